"""Durations as people write them in manifests ("500ms", "30s", "1h30m") and as seconds.

A duration is a bare number of seconds (`30`, `0.5`, `"30"`) or one or more
`<number><unit>` parts with units `d`, `h`, `m`, `s`, `ms`, largest first, each at most
once: `1d`, `1h30m`, `2m30.5s`, `1s500ms`.
"""

from __future__ import annotations

import math
import re

__all__ = ["format_duration", "parse_duration"]

_UNITS: dict[str, float] = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_RANK = {unit: rank for rank, unit in enumerate(_UNITS)}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_HINT = "use seconds or <number><unit> parts with units d, h, m, s, ms, e.g. 500ms, 30s, 1h30m"


def parse_duration(value: str | int | float, field: str, *, allow_zero: bool = False) -> float:
    """Seconds in `value`; `ValueError` naming the value (and `field`) if it is not a
    positive duration (zero is accepted only with `allow_zero`)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{field}: {value!r} is not a duration ({_HINT})")
    if isinstance(value, str):
        seconds = _parse_text(value.strip(), field)
    else:
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{field}: {value!r} is not a finite duration")
    if seconds < 0:
        raise ValueError(f"{field}: duration {value!r} is negative")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"{field}: duration {value!r} must be greater than zero")
    return seconds


def _parse_text(text: str, field: str) -> float:
    if text.startswith("-"):
        if _NUMBER.fullmatch(text[1:]) or _PART.match(text[1:]):
            raise ValueError(f"{field}: duration {text!r} is negative")
        raise ValueError(f"{field}: {text!r} is not a duration ({_HINT})")
    if _NUMBER.fullmatch(text):
        return float(text)
    total = 0.0
    position = 0
    last_rank = -1
    for match in _PART.finditer(text):
        unit = match.group(2)
        if match.start() != position or _RANK[unit] <= last_rank:
            break
        total += float(match.group(1)) * _UNITS[unit]
        position = match.end()
        last_rank = _RANK[unit]
    if position == 0 or position != len(text):
        raise ValueError(f"{field}: {text!r} is not a duration ({_HINT})")
    return total


def format_duration(seconds: float) -> str:
    """The shortest spelling `parse_duration` reads back: 90 -> "1m30s", 0.25 -> "250ms"."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"cannot format duration {seconds!r}")
    millis = round(seconds * 1000)
    if (millis == 0 and seconds > 0) or abs(millis / 1000 - seconds) > 1e-9:
        return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    if millis == 0:
        return "0s"
    whole, frac_ms = divmod(millis, 1000)
    parts = []
    for unit in ("d", "h", "m"):
        size = int(_UNITS[unit])
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    if frac_ms and not whole and not parts:
        parts.append(f"{frac_ms}ms")
    elif frac_ms:
        parts.append(f"{whole}.{frac_ms:03d}".rstrip("0") + "s")
    elif whole:
        parts.append(f"{whole}s")
    return "".join(parts)
