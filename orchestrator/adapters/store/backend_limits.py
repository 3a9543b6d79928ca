"""Backend limits in the control table (engine/backend_limits.py): one item per backend
(`blimit#<backend>`) holding its calls in flight (`holders`: a map from each call's
holder id to the end of its lease), the theoretical time of its next start (`tat`) and
the time a `429` let calls start again (`not_before`); and the line of steps waiting
for a free slot (`blimitq#<backend>`, by arrival).

A call takes its slot with one conditional `UpdateItem` that checks all three (room,
rate, hold-off) and writes its holder and the next start together; it gives it back
with a `REMOVE` guarded by its holder being there. Holders whose lease passed are
dropped under a guard on the lease read, so a slot whose call is in flight again (a
holder taking the same id) is never dropped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import (
    Sk,
    backend_limit_key,
    backend_line_key,
    lock_waiter_sk,
    sk_of,
)
from orchestrator.engine.backend_limits import BackendLimit
from orchestrator.errors import ConditionFailed

__all__ = ["BackendLimitStore", "LineWaiter"]

# How long a place in a backend's line lasts if nobody takes it away (its run vanished).
LINE_TTL = 3600.0


@dataclass(frozen=True)
class LineWaiter:
    """A step waiting for a backend's slot: the row to poke when one is freed."""

    run_id: str
    row: str
    sk: Sk


class BackendLimitStore:
    def __init__(self, control: Control) -> None:
        self.control = control

    def take(self, backend: str, holder: str, lease_until: float, now: float, *,
             concurrency: int | None, interval: float | None) -> bool:
        """Take a slot for `holder`, if there is room, its rate slot has come and no
        429 holds calls off (False: any of them does not hold, or the item lacks its
        holders map: read it, `state`)."""
        sets: list[str] = []
        conds = ["(attribute_not_exists(not_before) OR not_before <= :now)"]
        values: dict[str, Any] = {":now": num(now)}
        names: dict[str, str] = {}
        if concurrency is not None:
            names["#h"] = holder
            values[":lease"] = num(lease_until)
            values[":n"] = num(concurrency)
            sets.append("holders.#h = :lease")
            conds.append("attribute_exists(holders) AND size(holders) < :n"
                         " AND attribute_not_exists(holders.#h)")
        if interval is not None:
            values[":next"] = num(now + interval)
            sets.append("tat = :next")
            conds.append("(attribute_not_exists(tat) OR tat <= :now)")
        if not sets:
            return True
        try:
            self.control.update(backend_limit_key(backend), update="SET " + ", ".join(sets),
                                values=values, names=names or None,
                                condition=" AND ".join(conds))
        except ConditionFailed:
            # A take whose first send landed and was sent again (the caller saw a
            # timeout; botocore retried) finds its own slot: it holds it.
            # (The lease is stored to the millisecond.)
            held = self.state(backend, now).holders.get(holder) if concurrency else None
            return held is not None and abs(held - lease_until) < 0.001
        return True

    def state(self, backend: str, now: float) -> BackendLimit:
        item = self.control.get(backend_limit_key(backend), now=now)
        if item is None:
            return BackendLimit({}, exists=False)
        holders = {k: float(v["N"]) for k, v in item.get("holders", {}).get("M", {}).items()}
        return BackendLimit(
            holders, tat=float(item.get("tat", {}).get("N", 0.0)),
            not_before=float(item.get("not_before", {}).get("N", 0.0)),
            exists="holders" in item)

    def open(self, backend: str) -> None:
        """Give the item its (empty) map of holders, if it has none yet."""
        self.control.update_if(backend_limit_key(backend), "SET holders = :empty",
                               {":empty": {"M": {}}}, "attribute_not_exists(holders)")

    def drop(self, backend: str, expired: dict[str, float]) -> bool:
        """Drop holders whose lease passed (guarded by the lease read: False if one
        moved)."""
        names = {f"#x{i}": h for i, h in enumerate(expired)}
        values = {f":x{i}": num(until) for i, until in enumerate(expired.values())}
        return self.control.update_if(
            backend_limit_key(backend),
            "REMOVE " + ", ".join(f"holders.{n}" for n in names), values,
            " AND ".join(f"holders.{n} = :{n[1:]}" for n in names), names)

    def give_back(self, backend: str, holder: str) -> bool:
        """Free `holder`'s slot (False: it held none, e.g. dropped as expired)."""
        try:
            self.control.update(backend_limit_key(backend), update="REMOVE holders.#h",
                                names={"#h": holder}, condition="attribute_exists(holders.#h)")
        except ConditionFailed:
            return False
        return True

    def hold_off(self, backend: str, until: float) -> None:
        """No call to the backend starts before `until` (a 429's Retry-After); a later
        hold-off already set stands."""
        self.control.update_if(backend_limit_key(backend), "SET not_before = :t",
                               {":t": num(until)},
                               "attribute_not_exists(not_before) OR not_before < :t")

    # ---- the line ------------------------------------------------------------------

    def join(self, backend: str, holder: str, run_id: str, row: str, arrived: float,
             now: float) -> None:
        """Take a place in the backend's line (again: a no-op)."""
        self.control.put_new(backend_line_key(backend), lock_waiter_sk(arrived, holder),
                             now=now, doc={"run_id": run_id, "row": row},
                             expires_at=now + LINE_TTL)

    def leave(self, backend: str, holder: str, arrived: float) -> None:
        self.control.delete(backend_line_key(backend), lock_waiter_sk(arrived, holder))

    def line(self, backend: str, now: float, limit: int = 5) -> list[LineWaiter]:
        out = []
        for item in self.control.query(backend_line_key(backend), now=now, limit=limit):
            doc = json.loads(item["doc"]["S"])
            out.append(LineWaiter(str(doc["run_id"]), str(doc["row"]), sk_of(item)))
        return out

    def take_turn(self, backend: str, waiter: LineWaiter) -> bool:
        """Take `waiter` out of the line to wake it (False: another did first)."""
        return self.control.delete(backend_line_key(backend), waiter.sk,
                                   condition="attribute_exists(pk)")
