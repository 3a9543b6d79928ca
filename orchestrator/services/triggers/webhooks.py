"""Signed webhooks: `POST /webhooks/{name}` starts the workflow the manifest names.

The signature is checked on the raw bytes before anything else (webhook_signing.py);
a failure is 401 and nothing is stored. The delivery id (GitHub's X-GitHub-Delivery,
Standard Webhooks' webhook-id, a Stripe event id) decides the run id, and is remembered
for ORCH_DELIVERY_RETENTION (72 h by default, at least 24 h: a GitHub-style signature
carries no timestamp, so a captured delivery can be replayed at any time), so a
redelivery or a replay returns the run the first delivery started.

The run's input is `{"body": ..., "headers": {...}}` (the headers the webhook selects),
or the webhook's `input:` mapping evaluated over that document."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import delivery_key
from orchestrator.errors import NotFound, OrchestratorError, Unauthorized, UsageError
from orchestrator.expressions import ExpressionError, compile_expression
from orchestrator.services.admission import Outcome, StartRequest
from orchestrator.services.admission.result import taken
from orchestrator.services.runs import RunService
from orchestrator.services.values import check_value
from orchestrator.strict_json import parse_json
from orchestrator.webhook_signing import SignatureError, verify

__all__ = ["WebhookService", "delivery_run_id"]

log = logging.getLogger(__name__)

MIN_RETENTION = 24 * 3600.0


def delivery_run_id(workflow: str, hook: str, delivery_id: str) -> str:
    digest = hashlib.sha256(f"{hook}\x00{delivery_id}".encode()).hexdigest()[:24]
    return f"{workflow[:150]}-wh-{digest}"


class WebhookService:
    def __init__(
        self,
        control: Control,
        runs: RunService,
        clock: Callable[[], float],
        retention: float,
    ) -> None:
        self.control = control
        self.runs = runs
        self.clock = clock
        # At least 24 h: a GitHub-style signature carries no timestamp, so only the
        # remembered delivery id stops a captured delivery from being replayed.
        self.retention = max(retention, MIN_RETENTION)

    def deliver(self, name: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        hooks = getattr(self.runs.manifest, "webhooks", None) or {}
        hook = hooks.get(name)
        if hook is None:
            raise NotFound(f"webhook {name!r} is not defined")
        now = self.clock()
        verify_spec = hook.verify
        try:
            delivery = verify(
                verify_spec.scheme, list(verify_spec.secrets), headers, body, now=now,
                tolerance=verify_spec.tolerance,
            )
        except ValueError as exc:  # the manifest's secret itself is unusable
            raise OrchestratorError(f"webhook {name!r} is misconfigured: {exc}") from None
        except SignatureError as exc:
            log.info("webhook %s: refused delivery: %s", name, exc.message)
            raise Unauthorized(exc.code, f"webhook {name!r}: {exc.message}") from None
        if verify_spec.scheme == "none":
            log.warning("webhook %s accepts unsigned deliveries (verify.scheme: none)", name)
        document = {"body": _body_of(body, headers), "headers": _selected(hook, headers)}
        input = self.input_of(name, hook, document)
        # Refused before the delivery id is taken: a redelivery is judged afresh.
        check_value("input (the run's, from the delivery)", input)
        did = delivery.delivery_id
        run_id = delivery_run_id(hook.workflow, name, did) if did is not None else None
        trigger = {"source": "webhook", "webhook": name, "delivery_id": did}
        if did is not None and run_id is not None:
            # Claim the delivery id first: one conditional put tells a redelivery apart,
            # and it outlives the run's own retention (a replay days later is refused).
            claim = self.control.claim(
                delivery_key(name, did), now=now,
                doc={}, expires_at=now + self.retention,
            )
            wf = self.runs.manifest.workflows.get(hook.workflow)
            if not claim.first:
                if getattr(wf, "debounce", None) is not None or (
                        claim.recent and self.runs.store.runs.get_run(run_id, now) is None):
                    # The first delivery was taken but its process died before the run
                    # was created: this redelivery completes it. A debounced workflow's
                    # burst knows the run the delivery joined (a repeat moves nothing).
                    started = self.runs.admit(StartRequest(hook.workflow, input, run_id, trigger))
                    return {"run_id": started.run.run_id, "workflow": hook.workflow,
                            "delivery_id": did, "status": started.run.status.value,
                            **taken(Outcome.DUPLICATE)}
                return {"run_id": run_id, "workflow": hook.workflow, "delivery_id": did,
                        **taken(Outcome.DUPLICATE)}
        started = self.runs.admit(StartRequest(hook.workflow, input, run_id, trigger))
        return {"run_id": started.run.run_id, "workflow": hook.workflow, "delivery_id": did,
                "status": started.run.status.value, **started.fields()}

    def input_of(self, name: str, hook: Any, document: dict[str, Any]) -> Any:
        mapping = getattr(hook, "input", None)
        if not mapping:
            return document
        out = {}
        for field, expression in mapping.items():
            try:
                out[field] = compile_expression(expression).evaluate(document)
            except ExpressionError as exc:
                raise UsageError(f"webhook {name!r}: input.{field}: {exc}") from None
        return out


def _body_of(body: bytes, headers: Mapping[str, str]) -> Any:
    """JSON bodies as JSON, form bodies as text, nothing as null."""
    if not body:
        return None
    content_type = str(headers.get("content-type", "")).lower()
    if "json" in content_type or body[:1] in (b"{", b"["):
        return parse_json(body)
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("body: neither JSON nor UTF-8 text") from None


def _selected(hook: Any, headers: Mapping[str, str]) -> dict[str, str]:
    lowered = {k.lower(): v for k, v in headers.items()}
    return {h.lower(): lowered[h.lower()] for h in getattr(hook, "headers", ()) or ()
            if h.lower() in lowered}


