"""Durations as workflow code writes them: a number of milliseconds (`5000`), or text
with one or more `<number><unit>` parts, largest unit first (`"5000ms"`, `"5s"`,
`"10m"`, `"1h"`, `"14d"`, `"1h30m"`), or a `datetime.timedelta`. Returned in seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["Duration", "seconds"]

Duration = int | float | str | timedelta

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ORDER = list(_UNITS)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_HINT = "a number of milliseconds, a timedelta, or text such as 500ms, 5s, 10m, 1h, 14d, 1h30m"


def seconds(value: Duration, what: str = "duration", *, allow_zero: bool = True) -> float:
    """`value` in seconds; ValueError naming `what` if it is not a duration."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a duration ({_HINT})")
    if isinstance(value, timedelta):
        out = value.total_seconds()
    elif isinstance(value, int | float):
        out = float(value) / 1000.0
    elif isinstance(value, str):
        out = _text(value.strip(), what)
    else:
        raise ValueError(f"{what}: {value!r} is not a duration ({_HINT})")
    if not math.isfinite(out):
        raise ValueError(f"{what}: {value!r} is not finite")
    if out < 0 or (out == 0 and not allow_zero):
        raise ValueError(f"{what}: {value!r} must be {'at least' if allow_zero else 'more than'} 0")
    return out


def _text(text: str, what: str) -> float:
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text) / 1000.0
    total, at, last = 0.0, 0, -1
    for match in _PART.finditer(text):
        rank = _ORDER.index(match.group(2))
        if match.start() != at or rank <= last:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at, last = match.end(), rank
    if at != len(text) or last < 0:
        raise ValueError(f"{what}: {text!r} is not a duration ({_HINT})")
    return total
