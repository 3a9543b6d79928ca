"""The wire format of one step call, shared by the orchestrator (which builds requests and
reads error bodies) and the SDK (which parses requests and writes error bodies).

A request body is one JSON object::

    {
      "input": {"month": "2026-10"},              # the run's input (or its fan-out row)
      "steps": {"extract-orders": {...}, ...},    # direct dependencies' outputs; absent for roots
      "run": {"run_id": "...", "workflow": "monthly-report", "step": "transform", "attempt": 1},
      "top": 5                                    # the step's static payload, merged at top level
    }

`input`, `steps` and `run` are reserved: a static payload may not use them. A failure the
SDK reports (a step's, or a refused durable call's) has the body
``{"error": {"code", "message", "retryable", "details"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "RESERVED_KEYS",
    "ErrorBody",
    "ErrorInfo",
    "RunInfo",
    "StepRequestBody",
    "request_body",
]

RESERVED_KEYS = frozenset({"input", "steps", "run"})


class RunInfo(BaseModel):
    """Which run, step and attempt a call belongs to."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str = Field(min_length=1, description="The run this call belongs to.")
    workflow: str = Field(description="Name of the workflow the run executes.")
    step: str = Field(description="Name of the step being executed.")
    attempt: int = Field(ge=0, description="Attempt number of this step, 1 on the first call.")
    idempotency_key: str | None = Field(
        default=None,
        description="Optional copy of the Idempotency-Key header, covered by the signature.",
    )


class StepRequestBody(BaseModel):
    """The JSON body POSTed to a step route. Keys other than the reserved ones are the
    step's static payload."""

    model_config = ConfigDict(extra="allow", title="StepRequest")

    input: Any = Field(default=None, description="The run's input, or its fan-out row.")
    steps: dict[str, Any] | None = Field(
        default=None,
        description="Outputs of the step's direct dependencies by step name; absent for roots.",
    )
    run: RunInfo

    @property
    def payload(self) -> dict[str, Any]:
        """The static payload: every top-level key that is not reserved."""
        return dict(self.model_extra or {})


class ErrorInfo(BaseModel):
    code: str = Field(description="Stable, machine-readable error code.")
    message: str = Field(description="What went wrong, for humans.")
    retryable: bool = Field(description="Whether the orchestrator should try this step again.")
    details: Any = Field(default=None, description="Structured context, if any.")


class ErrorBody(BaseModel):
    """The body of every non-2xx response the SDK sends."""

    error: ErrorInfo


def request_body(
    *,
    input: Any,
    steps: Mapping[str, Any] | None,
    run: RunInfo,
    payload: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble a request body. `steps=None` (a root step) leaves the key out entirely.

    Raises ValueError if the static payload uses a reserved key, since merging it would
    silently overwrite the run's own data."""
    extra = dict(payload or {})
    clash = sorted(RESERVED_KEYS & extra.keys())
    if clash:
        raise ValueError(f"payload keys {clash} are reserved (input, steps, run)")
    body: dict[str, Any] = {**extra, "input": input, "run": run.model_dump(exclude_none=True)}
    if steps is not None:
        body["steps"] = dict(steps)
    return body
