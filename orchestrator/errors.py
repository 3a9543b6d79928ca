"""The error tree: every refusal has a stable code, a retryable flag and a message
that names the run, step, field or file line it is about."""

from __future__ import annotations

__all__ = [
    "ConditionFailed",
    "Conflict",
    "ManifestError",
    "NotFound",
    "OrchestratorError",
    "StoreError",
    "Unauthorized",
    "Unprocessable",
    "UsageError",
]


class OrchestratorError(Exception):
    """Base of every error the orchestrator raises on purpose."""

    code = "orchestrator_error"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message}


class UsageError(OrchestratorError):
    """The caller asked for something malformed (bad flag, bad JSON, bad body)."""

    code = "bad_request"


class NotFound(OrchestratorError):
    code = "not_found"


class Unprocessable(OrchestratorError):
    """Well-formed but refused: e.g. an Idempotency-Key reused with another body (422)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Conflict(OrchestratorError):
    """The request does not fit the current state of a run (409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Unauthorized(OrchestratorError):
    """No credentials, or wrong ones (401)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ManifestError(OrchestratorError):
    """A manifest failed to load or lint; `problems` holds one line per finding,
    each formatted `file:line: field: message`."""

    code = "invalid_manifest"

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems) or "invalid manifest")


class StoreError(OrchestratorError):
    """A DynamoDB/SQS/S3 call failed for a reason other than a guard (the cause is chained)."""

    code = "store_error"
    retryable = True


class ConditionFailed(OrchestratorError):
    """A conditional write found the row in another state than it expected.

    This is the normal outcome of a duplicate, late or reordered message: callers
    treat it as "someone else already did this" and move on."""

    code = "condition_failed"
