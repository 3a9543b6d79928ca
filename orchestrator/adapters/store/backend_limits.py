"""Backend limits in the control table (engine/backend_limits.py): one item per backend
(`blimit#<backend>`) holding its calls in flight (`holders`: a map from each call's
holder id to the end of its lease), the theoretical time of its next start (`tat`) and
the time a `429` let calls start again (`not_before`); and the line of steps waiting
for a free slot (`blimitq#<backend>`, by arrival).

A call takes its slot with one conditional `UpdateItem` that checks all three (room,
rate, hold-off) and writes its holder and the next start together; it gives it back
with a `REMOVE` guarded by its holder being there. Holders whose lease passed are
dropped under a guard on the lease read, so a slot whose call is in flight again (a
holder taking the same id) is never dropped.

**The line's marker.** The item also says whether anyone may wait in the line, so that
a call that gives its slot back looks at the line (a `Query`) only then: `line_v`
counts the joins (never decreases) and `line_seen` is the count at which a releaser
last found the line empty; the marker is up (`queued`) while `line_v > line_seen`.

- A joiner writes its place in the line, then bumps `line_v` (`ADD`: two requests, in
  that order; joining is the slow path, taken only when the backend is full).
- The give-back's own `UpdateItem` returns the item's new image (no extra request):
  marker down, the releaser does not look at the line; up, it queries the line, and
  if the query finds no item at all (an expired one counts: it may hide live ones
  after it) it lowers the marker with `SET line_seen = v`, `v` being the count its
  give-back read (never the count at the time of this write), guarded by
  `line_v = v` (so `line_seen` never goes back).

The invariant: **a place whose join has returned is in the line only while the marker
is up.** A releaser R lowers the marker only by writing `line_seen = v`, the count its
give-back read before its query found the line empty. Take a place P whose join
bumped `line_v` at instant b. If b came before R's give-back, P was written before
R's query, which saw it unless P had already left the line: R lowers nothing while P
is there. If b came after R's give-back, `line_v` is past `v` from b on, so from b on
`line_seen = v` (or any older count) leaves the marker up: R's write, before b,
is undone by the bump (`line_v = v + 1 > line_seen = v`), and after b its guard
fails. The counts only grow, so no count read earlier can match a later `line_v`
(no A-B-A, as a marker removed and set again would have).

A release that comes after P's place was written but before its bump may see the
marker down and skip the line; so may one whose give-back read `line_v` before b.
Both freed their slot before P's join returned, and the joiner always tries for a slot
once more after joining (runners/backend_gate.py, runners/durable/driver.py): it finds
that slot free, or taken by a call whose own release comes later and sees the marker.
A joiner that dies between its two writes leaves a place with the marker down: its
step's next claim joins again (bumping the count) and its recheck (`RECHECK`) repairs
the rest, as for any lost poke. A marker left up over an empty line (a releaser died
before lowering it, or the line emptied by takers leaving it) costs the next release
one query and lowers it.

The two writes are not one transaction on purpose: a transaction on this item would
make every concurrent take and give-back on it (non-transactional `UpdateItem`s, the
hot path) fail with `TransactionConflictException` while it is in flight, which
botocore does not retry, and it costs twice the write units."""

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

__all__ = ["BackendLimitStore", "Freed", "Line", "LineWaiter"]

# How long a place in a backend's line lasts if nobody takes it away (its run vanished).
LINE_TTL = 3600.0


@dataclass(frozen=True)
class Freed:
    """A slot given back: whether it was held (False: dropped as expired), whether
    someone may wait in the line (`queued`; True when unknown) and the count of joins
    the item held then (`line_v`: the guard of `line_empty`; None: unknown)."""

    held: bool
    queued: bool = True
    line_v: int | None = None


@dataclass(frozen=True)
class Line:
    """The head of a backend's line: its live places, and whether the partition held
    no item at all (`empty`: not even an expired one)."""

    waiters: list[LineWaiter]
    empty: bool


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

    def give_back(self, backend: str, holder: str) -> Freed:
        """Free `holder`'s slot, and say from the item's new image whether anyone may
        wait in the line (the same request)."""
        try:
            item = self.control.update(
                backend_limit_key(backend), update="REMOVE holders.#h",
                names={"#h": holder}, condition="attribute_exists(holders.#h)")
        except ConditionFailed:
            return Freed(held=False)  # e.g. dropped as expired: the line is unknown
        joins = int(item.get("line_v", {}).get("N", 0))
        seen = int(item.get("line_seen", {}).get("N", 0))
        return Freed(held=True, queued=joins > seen, line_v=joins)

    def hold_off(self, backend: str, until: float) -> None:
        """No call to the backend starts before `until` (a 429's Retry-After); a later
        hold-off already set stands."""
        self.control.update_if(backend_limit_key(backend), "SET not_before = :t",
                               {":t": num(until)},
                               "attribute_not_exists(not_before) OR not_before < :t")

    # ---- the line ------------------------------------------------------------------

    def join(self, backend: str, holder: str, run_id: str, row: str, arrived: float,
             now: float) -> None:
        """Take a place in the backend's line (again: the place stays as it was), then
        raise the line's marker (after: see the module's docstring)."""
        self.control.put_new(backend_line_key(backend), lock_waiter_sk(arrived, holder),
                             now=now, doc={"run_id": run_id, "row": row},
                             expires_at=now + LINE_TTL)
        self.control.update(backend_limit_key(backend), update="ADD line_v :one",
                            values={":one": num(1)})

    def line_empty(self, backend: str, line_v: int) -> bool:
        """Lower the line's marker: a query after a give-back that read `line_v` found
        the line empty (False: someone joined since, the marker stays up)."""
        return self.control.update_if(backend_limit_key(backend), "SET line_seen = :v",
                                      {":v": num(line_v)}, "line_v = :v")

    def leave(self, backend: str, holder: str, arrived: float) -> None:
        self.control.delete(backend_line_key(backend), lock_waiter_sk(arrived, holder))

    def line(self, backend: str, now: float, limit: int = 5) -> Line:
        """The first `limit` places of the backend's line."""
        items = self.control.query(backend_line_key(backend), now=now, limit=limit,
                                   with_expired=True)
        out = []
        for item in items:
            if float(item.get("expires_at", {}).get("N", "inf")) <= now:
                continue  # expired: its run vanished (DynamoDB deletes it later)
            doc = json.loads(item["doc"]["S"])
            out.append(LineWaiter(str(doc["run_id"]), str(doc["row"]), sk_of(item)))
        return Line(out, empty=not items)

    def take_turn(self, backend: str, waiter: LineWaiter) -> bool:
        """Take `waiter` out of the line to wake it (False: another did first)."""
        return self.control.delete(backend_line_key(backend), waiter.sk,
                                   condition="attribute_exists(pk)")
