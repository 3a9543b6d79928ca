"""Strict JSON: the one parser for bodies from outside (API requests, webhook
deliveries) and the one compact encoding of what we store and send."""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.errors import UsageError

__all__ = [
    "MAX_DEPTH",
    "dumps",
    "parse_json",
]

_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


MAX_DEPTH = 64


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


def dumps(value: Any) -> str:
    """The one compact JSON encoding of what we store and send (no NaN, UTF-8 kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
