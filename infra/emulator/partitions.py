"""DynamoDB's partitions under the AWS model: what a request costs, and whether its
partitions can pay for it now.

`charges(operation, body, hash_key)` reads a request's JSON as AWS would charge it:

- PutItem: the item's size in write units (1 KB each); UpdateItem: the key's and the new
  values' size (AWS charges the larger of the item before and after, which the request
  alone does not show: a lower bound, at least 1); DeleteItem: 1 unit (likewise);
- GetItem: 1 read unit (4 KB; the item's size is not known before it is read), half when
  eventually consistent; Query: likewise, on the partition its key condition's `=` names
  (a Query on an index, or a condition it cannot read, goes unthrottled);
- TransactWriteItems, TransactGetItems: each item's units, times the transaction factor;
- BatchWriteItem, BatchGetItem: each item's units on its own partition;
- anything else (Scan, the control plane, Streams): free.

A partition is a table and one partition key value (AWS's documented limit is per
partition key value); the key attribute's name comes from `hash_key(table)`, moto's table.

`Buckets` holds a token bucket per partition and kind (read, write), refilled at the
model's rate up to `burst_seconds` of it. `admit` takes a request's charges all or
nothing: a request over any of its partitions' budgets takes nothing and is throttled."""

from __future__ import annotations

import base64
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from infra.emulator.aws_model import AwsModel

__all__ = ["Buckets", "Charge", "charges", "item_size"]

Kind = Literal["read", "write"]


@dataclass(frozen=True)
class Charge:
    table: str
    key: str  # the partition key value, canonical (type and value)
    kind: Kind
    units: float


def _value_size(value: dict[str, Any]) -> int:
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
        return sum(_value_size({kind[0]: e}) for e in v)
    if kind == "L":
        return 3 + sum(1 + _value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + _value_size(e) for k, e in v.items())
    return 0


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it (names plus values), in bytes."""
    return sum(len(name.encode("utf-8")) + _value_size(v) for name, v in item.items())


def _units(size: int, unit: int) -> int:
    return max(1, math.ceil(size / unit))


def _key_of(item: dict[str, Any], hash_key: str | None) -> str | None:
    if hash_key is None or hash_key not in item:
        return None
    (kind, v), = item[hash_key].items()
    return f"{kind}:{v}"


_EQUALS = re.compile(r"(#?[\w.]+)\s*=\s*(:\w+)")


def _query_key(body: dict[str, Any], hash_key: str) -> str | None:
    names = body.get("ExpressionAttributeNames") or {}
    values = body.get("ExpressionAttributeValues") or {}
    for name, placeholder in _EQUALS.findall(body.get("KeyConditionExpression") or ""):
        if names.get(name, name) == hash_key and placeholder in values:
            return _key_of({hash_key: values[placeholder]}, hash_key)
    return None


def charges(operation: str, body: dict[str, Any], model: AwsModel,
            hash_key: Callable[[str], str | None]) -> list[Charge]:
    """What this request costs, per partition (empty: free, or not keyed)."""
    u = model.dynamodb.units
    out: list[Charge] = []

    def add(table: str, item: dict[str, Any] | None, kind: Kind, units: float) -> None:
        key = _key_of(item or {}, hash_key(table))
        if key is not None:
            out.append(Charge(table, key, kind, units))

    def read(consistent: bool, factor: float = 1.0) -> float:
        return factor * (1.0 if consistent else u.eventually_consistent_read_factor)

    table = body.get("TableName", "")
    if operation == "PutItem":
        add(table, body.get("Item"), "write", _units(item_size(body.get("Item") or {}),
                                                     u.write_unit_bytes))
    elif operation == "UpdateItem":
        size = item_size(body.get("Key") or {}) + sum(
            _value_size(v) for v in (body.get("ExpressionAttributeValues") or {}).values())
        add(table, body.get("Key"), "write", _units(size, u.write_unit_bytes))
    elif operation == "DeleteItem":
        add(table, body.get("Key"), "write", 1)
    elif operation == "GetItem":
        add(table, body.get("Key"), "read", read(bool(body.get("ConsistentRead"))))
    elif operation == "Query" and not body.get("IndexName"):
        name = hash_key(table)
        key = None if name is None else _query_key(body, name)
        if key is not None:
            out.append(Charge(table, key, "read", read(bool(body.get("ConsistentRead")))))
    elif operation == "TransactWriteItems":
        for entry in body.get("TransactItems") or []:
            for action, spec in entry.items():
                item = spec.get("Item") if action == "Put" else spec.get("Key")
                size = item_size(item or {})
                add(spec.get("TableName", ""), item, "write",
                    u.transaction_factor * _units(size, u.write_unit_bytes))
    elif operation == "TransactGetItems":
        for entry in body.get("TransactItems") or []:
            spec = entry.get("Get") or {}
            add(spec.get("TableName", ""), spec.get("Key"), "read",
                read(True, u.transaction_factor))
    elif operation == "BatchWriteItem":
        for name, requests in (body.get("RequestItems") or {}).items():
            for request in requests:
                if "PutRequest" in request:
                    item = request["PutRequest"].get("Item") or {}
                    add(name, item, "write", _units(item_size(item), u.write_unit_bytes))
                elif "DeleteRequest" in request:
                    add(name, request["DeleteRequest"].get("Key"), "write", 1)
    elif operation == "BatchGetItem":
        for name, spec in (body.get("RequestItems") or {}).items():
            for key in spec.get("Keys") or []:
                add(name, key, "read", read(bool(spec.get("ConsistentRead"))))
    return out


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
        """Take every charge, or none of them (False: the request is throttled)."""
        if not request:
            return True
        wanted: dict[tuple[str, str, Kind], float] = {}
        for c in request:
            slot = (c.table, c.key, c.kind)
            wanted[slot] = wanted.get(slot, 0.0) + c.units
        with self._lock:
            now = self.clock()
            levels = {slot: self._level(slot, now) for slot in wanted}
            if any(levels[slot] < units for slot, units in wanted.items()):
                return False
            for slot, units in wanted.items():
                self._tokens[slot] = (levels[slot] - units, now)
            if len(self._tokens) > self.PRUNE_AT:
                self._prune(now)
            return True

    def _prune(self, now: float) -> None:
        for slot in list(self._tokens):
            if self._level(slot, now) >= self.rates[slot[2]] * self.burst:
                del self._tokens[slot]
