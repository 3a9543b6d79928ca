"""What a durable workflow sees go wrong, and the signal that stops a call.

`Suspend` derives from BaseException so that a user's `except Exception` cannot swallow
it: a workflow stops at an operation whose outcome is not recorded yet, and resumes in a
later call. Code in `finally` runs on every suspension: keep side effects out of it."""

from __future__ import annotations

from typing import Any

from functions.sdk.protocol import DurableCode

__all__ = ["ReplayMismatch", "StepFailed", "Suspend", "WorkflowError"]


class Suspend(BaseException):
    """The call stops here; the workflow resumes in a later call."""


class WorkflowError(Exception):
    """A workflow used the SDK wrongly (the message says how). It fails the run."""

    def __init__(self, message: str, code: str = "workflow_misuse") -> None:
        super().__init__(message)
        self.code = code


class StepFailed(Exception):
    """A step failed for good (a terminal error, or its retries ran out). Raised where the
    workflow awaited it, on the first run as on every replay: catch it to compensate."""

    def __init__(self, step: str, error: dict[str, Any]) -> None:
        self.step = step
        self.error = dict(error)
        self.code = str(error.get("code", "step_failed"))
        self.details = error.get("details")
        super().__init__(f"step {step!r} failed: {error.get('message', self.code)}")


class ReplayMismatch(WorkflowError):
    """The code issued a different operation where the journal has a record."""

    def __init__(self, recorded: dict[str, Any], issued: dict[str, Any]) -> None:
        super().__init__(
            f"replay mismatch at {issued.get('scope') or 'the top'} position {issued['pos']}: "
            f"the journal has {recorded['kind']} {recorded['name']!r}, the code now issues "
            f"{issued['kind']} {issued['name']!r}",
            code=DurableCode.REPLAY_MISMATCH,
        )
        self.recorded = recorded
        self.issued = issued
