"""What a step handler is given: a `StepRequest`, read from one call's raw body and
headers (`protocol.StepRequestBody` on the wire)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from starlette.responses import Response

from functions.sdk import signing
from functions.sdk.failures import TerminalError
from functions.sdk.protocol import StepRequestBody
from functions.sdk.responses import error

__all__ = ["StepRequest", "read"]


@dataclass(frozen=True)
class StepRequest:
    """One call of a step, as the handler sees it."""

    input: Any
    """The run's input (or its fan-out row); None if the run has none."""
    steps: dict[str, Any]
    """Outputs of the direct dependencies by step name; empty for a root step."""
    payload: dict[str, Any]
    """The step's static payload: every top-level body key other than input/steps/run."""
    run_id: str
    workflow: str
    step: str
    attempt: int
    idempotency_key: str | None
    """Stable across every attempt of this step of this run: key side effects on it."""
    headers: Mapping[str, str] = field(repr=False)
    """The request headers (case-insensitive lookup)."""

    @property
    def traceparent(self) -> str | None:
        """The call's W3C `traceparent` header, if the orchestrator traces its runs: send
        it on with the calls this step makes, and they join the run's trace."""
        return self.headers.get("traceparent")

    def output_of(self, step: str) -> Any:
        """The output of dependency `step`; a TerminalError if the workflow does not
        declare it as a direct dependency (no retry would make it appear)."""
        if step not in self.steps:
            have = ", ".join(sorted(self.steps)) or "none"
            raise TerminalError(
                f"step {self.step!r} needs the output of {step!r}, which is not among its "
                f"direct dependencies ({have}); add it to dependsOn",
                code="missing_dependency",
            )
        return self.steps[step]


def read(raw: bytes, headers: Mapping[str, str]) -> StepRequest | Response:
    """The request of a call whose signature was checked; or the 400 answer naming what
    is wrong with its body."""
    parsed = _parse_body(raw)
    if isinstance(parsed, Response):
        return parsed
    key = headers.get(signing.IDEMPOTENCY_HEADER) or None
    signed_key = parsed.run.idempotency_key
    if key is not None and signed_key is not None and key != signed_key:
        return error(
            400,
            "invalid_request",
            f"{signing.IDEMPOTENCY_HEADER} header {key!r} does not match "
            f"run.idempotency_key {signed_key!r} in the body",
            retryable=False,
        )
    return StepRequest(
        input=parsed.input,
        steps=dict(parsed.steps or {}),
        payload=parsed.payload,
        run_id=parsed.run.run_id,
        workflow=parsed.run.workflow,
        step=parsed.run.step,
        attempt=parsed.run.attempt,
        idempotency_key=key or signed_key,
        headers=headers,
    )


def _parse_body(raw: bytes) -> StepRequestBody | Response:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        return error(400, "invalid_json", f"request body is not valid JSON: {exc}", False)
    if not isinstance(data, dict):
        return error(
            400,
            "invalid_request",
            f"request body must be a JSON object, got {type(data).__name__}",
            False,
        )
    try:
        return StepRequestBody.model_validate(data)
    except ValidationError as exc:
        problems = json.loads(exc.json(include_url=False, include_input=False))
        summary = "; ".join(
            f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}" for problem in problems
        )
        return error(400, "invalid_request", f"invalid step request: {summary}", False, problems)
