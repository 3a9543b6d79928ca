"""`backends.<name>.limits`: what protects a backend from its callers (how it is kept:
engine/backend_limits.py).

```yaml
backends:
  api:
    url: http://localhost:8001
    limits: {concurrency: 4, rate: "10/1s"}   # either key may be left out
```"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from orchestrator.manifest.durations import parse_duration
from orchestrator.manifest.fields import ManifestModel

__all__ = ["MAX_CONCURRENCY", "BackendLimits", "parse_rate"]

# Its calls in flight are one item (an id and a lease each): a thousand stays far below
# DynamoDB's 400 KB.
MAX_CONCURRENCY = 1000


class BackendLimits(ManifestModel):
    # At most this many calls to the backend in flight at once.
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY, strict=True)
    # At most `<count>` calls started per `<period>` (a duration), spaced evenly.
    rate: str | None = None

    @field_validator("rate")
    @classmethod
    def _check_rate(cls, value: str | None) -> str | None:
        if value is None:
            return None
        count, period = parse_rate(value)
        seconds = parse_duration(period, "rate period")
        if seconds / count < 0.001:
            raise ValueError(f"rate {value!r}: more than 1000 starts a second")
        return value.strip()

    def rate_of(self) -> tuple[int, float] | None:
        """The rate as (count, period in seconds); None without one."""
        if self.rate is None:
            return None
        count, text = parse_rate(self.rate)
        return count, parse_duration(text, "rate period")


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")


def parse_rate(text: str) -> tuple[int, str]:
    """`"10/1s"` as (10, "1s"); ValueError naming the form otherwise (the period is
    checked by the caller, as a duration)."""
    match = _RATE.match(text)
    if match is None or int(match.group(1)) < 1:
        raise ValueError(f"rate {text!r}: write <count>/<period> with a count of at least"
                         " 1 and a duration, e.g. 10/1s or 100/1m")
    return int(match.group(1)), match.group(2)
