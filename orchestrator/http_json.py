"""Reading request bodies strictly, and the one shape of an API error.

A body is size-checked before it is parsed (413 past MAX_BODY), its nesting depth is
counted on the raw bytes, and the JSON parser refuses duplicate keys, NaN and Infinity.
Every refusal is `{"error": {"code", "message"}}` with a 4xx status."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.errors import Unprocessable, UsageError

__all__ = [
    "MAX_BODY",
    "MAX_DEPTH",
    "TooLarge",
    "error",
    "parse_json",
    "read_body",
    "read_json",
    "validated",
]

MAX_BODY = 1024 * 1024
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
MAX_DEPTH = 64


class TooLarge(Exception):
    pass


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _depth_ok(body: bytes) -> bool:
    """Nesting depth, counted on the raw bytes before parsing (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


async def read_body(request: Request) -> bytes:
    """The raw body, refused (TooLarge) as soon as it passes MAX_BODY."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise TooLarge()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge()
    return body


def parse_json(body: bytes, what: str = "body") -> Any:
    """Strict JSON: UTF-8 only, no duplicate keys, no NaN/Infinity, no unpaired
    surrogate escapes (they cannot be stored or sent on as UTF-8)."""
    if not _depth_ok(body):
        raise UsageError(f"{what}: nested deeper than {MAX_DEPTH} levels")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant,
                           object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{what}: invalid JSON: {exc}") from exc
    if "\\u" in text and _SURROGATE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise UsageError(f"{what}: contains an unpaired UTF-16 surrogate escape") from None
    return value


async def read_json(request: Request) -> Any:
    body = await read_body(request)
    return {} if not body else parse_json(body)


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
