"""Reading HTTP request bodies: size-checked before parsing, strict JSON, validated
against a request model with a 422 naming each wrong field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.errors import Code, Unprocessable, UsageError
from orchestrator.strict_json import parse_json

__all__ = [
    "MAX_BODY",
    "TooLarge",
    "error",
    "limit_of",
    "read_body",
    "read_json",
    "read_object",
    "validated",
]

MAX_BODY = 1024 * 1024


class TooLarge(Exception):
    def __init__(self, limit: int = MAX_BODY) -> None:
        super().__init__(limit)
        self.limit = limit


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The raw body, refused (TooLarge) as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise TooLarge(limit)
    return b"".join(chunks)


async def read_json(request: Request, limit: int = MAX_BODY) -> Any:
    body = await read_body(request, limit)
    return {} if not body else parse_json(body)


async def read_object(request: Request, what: str) -> dict[str, Any]:
    """A body that must be a JSON object (empty: `{}`): 422 naming `what` otherwise."""
    doc = await read_json(request)
    if not isinstance(doc, dict):
        raise Unprocessable(Code.INVALID_BODY, f"body: {what} is a JSON object, not "
                            f"{type(doc).__name__}")
    return doc


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], document: Any) -> M:
    """The body as `model`, or a 422 naming each field that is wrong."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise Unprocessable("invalid_body", _validation_message(exc)) from None


def limit_of(request: Request, default: int = 100, most: int = 500) -> int:
    """The `limit` query parameter: a whole number from 1 to `most` (400 otherwise)."""
    raw = request.query_params.get("limit") or str(default)
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise UsageError(f"limit: a whole number from 1 to {most}, got {raw!r}")
    return int(raw)
