"""The client's errors: `ApiError` (a refusal, an answer that is not the API's JSON, or no
answer), a subclass for the statuses a caller handles apart, and the reading of an
answer into its JSON or the error it stands for (`answer`)."""

from __future__ import annotations

from typing import Any

import httpx

from orchestrator.errors import Code, OrchestratorError

__all__ = ["ApiError", "ConflictError", "GoneError", "NotFoundError", "UnavailableError",
           "answer", "unreachable"]


class ApiError(OrchestratorError):
    """The API refused a request (`status` 4xx or 5xx), answered something that is not its
    JSON, or could not be reached (`status` None). `code` is the API's stable error code
    (`not_found`, `run_finished`, `invalid_body`...; see the README's table)."""

    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        # Worth retrying: no answer, a 5xx, a 429.
        self.retryable = status is None or status >= 500 or status == 429

    def __str__(self) -> str:
        where = "no answer" if self.status is None else f"HTTP {self.status}"
        return f"{self.message} ({where}, {self.code})"


class NotFoundError(ApiError):
    """404: no such run, workflow or hook (or route)."""


class ConflictError(ApiError):
    """409: the request does not fit the run's state (`run_finished`, `conflict`...)."""


class GoneError(ApiError):
    """410: a hook already executed (with another payload), or expired."""


class UnavailableError(ApiError):
    """The API could not be reached, failed (5xx) or answered something not JSON."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError,
                                         410: GoneError}
_NOT_JSON = object()


def answer(resp: httpx.Response) -> Any:
    """The JSON of an answer, or the error it stands for."""
    try:
        body = resp.json()
    except ValueError:
        body = _NOT_JSON
    status = resp.status_code
    if status < 400 and body is not _NOT_JSON:
        return body
    if body is _NOT_JSON:
        code, message = Code.BAD_RESPONSE.value, resp.text[:300]
    else:
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        code, message = str(err.get("code") or f"http_{status}"), str(err.get("message") or "")
    kind = _BY_STATUS.get(status) or (UnavailableError if status >= 500 or status < 400
                                      else ApiError)
    raise kind(status, code, message or f"HTTP {status}")


def unreachable(url: str, exc: httpx.HTTPError) -> UnavailableError:
    return UnavailableError(None, Code.API_UNAVAILABLE.value,
                            f"cannot reach the orchestrator at {url}: {exc}")
