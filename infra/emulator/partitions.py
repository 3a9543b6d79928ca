"""DynamoDB's partitions under the AWS model: sizes as DynamoDB counts them, and whether a
partition can pay for a request now.

A partition is a table (or a global secondary index, `table#index`) and one partition key
value: AWS's documented limit is per partition key value. What a request costs, partition
by partition, is charging.py's.

`Buckets` holds a token bucket per partition and kind (read, write), refilled at the
model's rate up to `burst_seconds` of it. `admit` takes a request's charges all or
nothing: a request over any of its partitions' budgets takes nothing and is throttled
(a full bucket pays any charge, going into debt). `debit` takes, unchecked, what a
request turned out to cost once it ran."""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from infra.emulator.aws_model import AwsModel

__all__ = ["Buckets", "Charge", "item_size", "value_size"]

Kind = Literal["read", "write"]


@dataclass(frozen=True)
class Charge:
    table: str
    key: str  # the partition key value, canonical (type and value)
    kind: Kind
    units: float


def value_size(value: dict[str, Any]) -> int:
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode("utf-8"))
    if kind == "N":
        return len(v.lstrip("-").replace(".", "")) // 2 + 1
    if kind == "B":
        return len(base64.b64decode(v)) if isinstance(v, str) else len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: e}) for e in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(e) for k, e in v.items())
    return 0


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it (names plus values), in bytes."""
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


class Buckets:
    """A token bucket per (table, partition key value, kind); thread-safe."""

    # Past this many partitions, the full buckets (nothing spent within a burst) are
    # forgotten: a run of unique keys must not grow the table without bound.
    PRUNE_AT = 100_000

    def __init__(self, model: AwsModel, clock: Callable[[], float]) -> None:
        p = model.dynamodb.partition
        self.rates: dict[Kind, float] = {"read": p.read_units_per_second,
                                         "write": p.write_units_per_second}
        self.burst = model.dynamodb.burst_seconds
        self.clock = clock
        # (table, key, kind) -> (tokens, when they were counted)
        self._tokens: dict[tuple[str, str, Kind], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, slot: tuple[str, str, Kind], now: float) -> float:
        cap = self.rates[slot[2]] * self.burst
        tokens, then = self._tokens.get(slot, (cap, now))
        return min(cap, tokens + (now - then) * self.rates[slot[2]])

    def admit(self, request: list[Charge]) -> bool:
        """Take every charge, or none of them (False: the request is throttled). A
        partition pays a charge it holds the units for, or any charge when its bucket is
        full (a request larger than a burst is not refused for ever: it leaves the
        partition in debt)."""
        if not request:
            return True
        wanted: dict[tuple[str, str, Kind], float] = {}
        for c in request:
            slot = (c.table, c.key, c.kind)
            wanted[slot] = wanted.get(slot, 0.0) + c.units
        with self._lock:
            now = self.clock()
            levels = {slot: self._level(slot, now) for slot in wanted}
            if any(levels[slot] < min(units, self.rates[slot[2]] * self.burst)
                   for slot, units in wanted.items()):
                return False
            for slot, units in wanted.items():
                self._tokens[slot] = (levels[slot] - units, now)
            if len(self._tokens) > self.PRUNE_AT:
                self._prune(now)
            return True

    def debit(self, charges: list[Charge]) -> None:
        """Take what a request turned out to cost beyond its admission, unchecked: a
        partition may go into debt, and refills from there."""
        with self._lock:
            now = self.clock()
            for c in charges:
                slot = (c.table, c.key, c.kind)
                self._tokens[slot] = (self._level(slot, now) - c.units, now)

    def _prune(self, now: float) -> None:
        for slot in list(self._tokens):
            if self._level(slot, now) >= self.rates[slot[2]] * self.burst:
                del self._tokens[slot]
