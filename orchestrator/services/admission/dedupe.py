"""The dedupe stage: a trigger's id names its run, so a repeat is the same trigger.

Most trigger sources carry their id in the request (`run_id`: a caller's, or derived
from an event's id, a webhook delivery's, a schedule fire's, a child's operation): the
run row's conditional creation (launch.py), or a debounced burst's record of the
trigger (debounce.py), tells a repeat apart. An Idempotency-Key is claimed here first:

Idempotency-Key for `POST /runs`: the same key with the same body is the same run.

The first request with a key stores (fingerprint of the body, run id) with a conditional
put; every later request with the key reads that item. The same fingerprint gets the
same run id (and the start is repeated, which is itself idempotent for a chosen run id,
so a crash between the put and the start is repaired by the retry); another fingerprint
is refused with 422. Keys are kept for `retention` seconds (ORCH_IDEMPOTENCY_RETENTION,
24 h by default), after which the key is free again."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import idempotency_key
from orchestrator.errors import Unprocessable, UsageError
from orchestrator.services.admission.request import StartRequest

__all__ = ["IdempotencyKeys", "fingerprint", "resolve"]

KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


def fingerprint(document: Any) -> str:
    """SHA-256 of the canonical JSON of a request body (key order does not matter)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class IdempotencyKeys:
    def __init__(self, control: Control, retention: float) -> None:
        self.control = control
        self.retention = retention

    def claim(self, key: str, document: Any, run_id: str, now: float) -> tuple[str, bool]:
        """The run id this request must use, and whether this request was the first."""
        if not KEY_RE.fullmatch(key):
            raise UsageError(
                "Idempotency-Key: use 1-255 printable ASCII characters without spaces"
            )
        fp = fingerprint(document)
        claim = self.control.claim(
            idempotency_key(key), now=now, doc={"fp": fp, "run_id": run_id},
            expires_at=now + self.retention,
        )
        first_run = str(claim.doc["run_id"])
        if claim.doc["fp"] != fp:
            raise Unprocessable(
                "idempotency_key_reused",
                f"Idempotency-Key {key!r} was used with a different request body "
                f"(run {first_run}); use a new key for a new request",
            )
        return first_run, claim.first


def resolve(req: StartRequest, keys: IdempotencyKeys, now: float,
            new_id: Callable[[str, float], str]) -> StartRequest:
    """The request with the run id its Idempotency-Key names (the first request's), and
    the key in its trigger; as it is without a key."""
    if req.idempotency_key is None:
        return req
    run_id, _ = keys.claim(req.idempotency_key, req.document,
                           req.run_id or new_id(req.workflow, now), now)
    trigger = {**(req.trigger or {"source": "api"}), "idempotency_key": req.idempotency_key}
    return replace(req, run_id=run_id, trigger=trigger)
