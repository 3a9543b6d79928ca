"""The answers a `FunctionApp` sends: a step's output as compact JSON, and the one error
body every refusal and failure carries, ``{"error": {"code", "message", "retryable",
"details"}}`` (`protocol.ErrorBody`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["dumps", "error", "http_error"]

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def dumps(value: Any) -> bytes:
    """`value` (pydantic models, dataclasses and dates included) as compact JSON."""
    plain = to_jsonable_python(value)
    return json.dumps(plain, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def error(
    status: int,
    code: str,
    message: str,
    retryable: bool,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An error answer: `status` with the error body."""
    info: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if details is not None:
        try:
            info["details"] = to_jsonable_python(details)
        except Exception:  # details are context; an odd one must not hide the error
            info["details"] = repr(details)
    return Response(
        dumps({"error": info}), status_code=status, media_type="application/json", headers=headers
    )


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) in the same error body."""
    assert isinstance(exc, HTTPException)
    return error(
        exc.status_code,
        _HTTP_CODES.get(exc.status_code, "http_error"),
        f"{request.method} {request.url.path}: {exc.detail}",
        retryable=False,
        headers=exc.headers,
    )
