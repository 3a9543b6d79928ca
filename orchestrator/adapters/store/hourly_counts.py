"""A workflow's counters hour by hour (`counts#<workflow>`, one item an hour), for its
page's charts (`GET /workflows/{name}/stats`): at its heartbeat a process adds what it
counted for a workflow to the workflow's cumulative item (stack_counts.py) and, with
one more `ADD`, to the item of the hour the beat falls in. The items expire eight days
after their hour, so a week's window is always whole; a read of a week is one query of
at most 168 small items.

The counts of a beat land in the hour of the beat, not of each event: up to one beat
(ORCH_HEARTBEAT_INTERVAL, 10 s) late at an hour's turn. As for the cumulative item, a
write botocore retries after it landed counts twice."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import hour_of, hour_sk, hourly_counts_key
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["HOUR", "KEEP", "HourlyCounts", "hour_at"]

HOUR = 3600
# How long an hour's item is kept after its hour: a week's window and a day to spare.
KEEP = 8 * 24 * HOUR


def hour_at(t: float) -> int:
    """The hour (since the epoch, UTC) that time `t` falls in."""
    return int(t // HOUR)


class HourlyCounts:
    def __init__(self, control: ControlTable) -> None:
        self.control = control

    def add(self, workflow: str, counts: Mapping[str, float], now: float) -> None:
        """Add `counts` (attribute -> amount) to the item of the hour `now` falls in, in
        one request (it expires KEEP after its hour's end)."""
        amounts = {a: n for a, n in counts.items() if n}
        if not amounts:
            return
        hour = hour_at(now)
        names = {f"#a{i}": attr for i, attr in enumerate(amounts)}
        values = {f":v{i}": num(n) for i, n in enumerate(amounts.values())}
        values[":exp"] = num((hour + 1) * HOUR + KEEP)
        update = ("SET expires_at = :exp ADD "
                  + ", ".join(f"#a{i} :v{i}" for i in range(len(amounts))))
        self.control.update(hourly_counts_key(workflow), hour_sk(hour), update=update,
                            values=values, names=names)

    def read(self, workflow: str, first_hour: int, now: float) -> dict[int, dict[str, float]]:
        """The workflow's counters of each hour from `first_hour` to the hour of `now`
        (hours with nothing counted have no item): hour -> attribute -> amount. One
        query."""
        last = hour_at(now)
        items = self.control.query(hourly_counts_key(workflow), now=now,
                                   limit=max(1, last - first_hour + 2),
                                   after=hour_sk(first_hour - 1))
        out: dict[int, dict[str, float]] = {}
        for item in items:
            hour = hour_of(item)
            if first_hour <= hour <= last:
                out[hour] = {k: float(v["N"]) for k, v in item.items()
                             if "N" in v and k != "expires_at"}
        return out
