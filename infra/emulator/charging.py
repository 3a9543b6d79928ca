"""What a DynamoDB request costs under the AWS model, partition by partition, as AWS
charges it (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html):

- a write: the larger of the item before and after, in write units (1 KB), at least 1;
  a failed condition still pays; every global secondary index it reaches pays too, on
  the index's own partition (the index's hash key value): a new entry, a removed one
  (both when the index key moved), or a changed one (an index that projects only keys
  pays nothing when its keys did not change);
- a read: the item's stored size in read units (4 KB), at least 1, half when eventually
  consistent; a Query: the items it returns, summed, on the partition its key
  condition's `=` names, the table's or an index's;
- in a transaction: each item's units, times the transaction factor.

`plan(operation, body, model, tables)` answers a `Plan`: the charges known before the
request runs (taken at admission: if its partitions cannot pay, the request is
throttled), and `settle`, what it turned out to cost beyond them once moto has answered
(an UpdateItem's item after, a Query's items), which is debited without a check: a
partition may go into debt, and the requests after it are throttled until it refills, as
on AWS. Items are read from moto (`MotoTables`); an item or table it cannot read is
charged its lower bound (its key and the request's values), never refused. A request this
module cannot read (a malformed value) is charged nothing: moto answers it as it would."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from infra.emulator.aws_model import AwsModel
from infra.emulator.moto_tables import Image, Index, Shape, key_text
from infra.emulator.partitions import Charge, item_size, value_size

__all__ = ["Plan", "Tables", "plan"]


class Tables(Protocol):
    def shape(self, table: str) -> Shape | None: ...

    def image(self, table: str, key: dict[str, Any]) -> Image | None: ...


@dataclass
class Plan:
    charges: list[Charge] = field(default_factory=list)
    # After moto answered (its body, when `needs_answer`): the charges beyond `charges`.
    settle: Callable[[bytes | None], list[Charge]] | None = None
    needs_answer: bool = False


_PLACEHOLDER = re.compile(r":\w+")
# A path's first name (`#n` or a bare name), not the names nested under it (a.b[0].c).
_NAME = re.compile(r"(?<![.\w#])(#\w+|[A-Za-z_]\w*)")
_KEYWORDS = frozenset({"SET", "REMOVE", "ADD", "DELETE", "IF_NOT_EXISTS", "LIST_APPEND"})
_EQUALS = re.compile(r"(#?[\w.]+)\s*=\s*(:\w+)")


def _named(expression: str, names: dict[str, str]) -> set[str]:
    """The attribute names an update expression touches (top-level names)."""
    out = set()
    for token in _NAME.findall(_PLACEHOLDER.sub(" ", expression or "")):
        if token.startswith("#"):
            out.add(names.get(token, token))
        elif token.upper() not in _KEYWORDS:
            out.add(token)
    return out


def _reaches(index: Index, touched: set[str]) -> bool:
    """Whether an update of `touched` attributes changes what the index holds."""
    if index.projection == "ALL":
        return bool(touched)
    return bool(touched & (set(index.keys) | set(index.include)))


class _Planner:
    def __init__(self, model: AwsModel, tables: Tables) -> None:
        self.u = model.dynamodb.units
        self.tables = tables

    def w(self, size: int) -> int:
        return max(1, math.ceil(size / self.u.write_unit_bytes))

    def r(self, size: int) -> int:
        return max(1, math.ceil(size / self.u.read_unit_bytes))

    def read_factor(self, consistent: bool) -> float:
        return 1.0 if consistent else self.u.eventually_consistent_read_factor

    def keyed(self, table: str, key: dict[str, Any]) -> tuple[Shape | None, str | None]:
        """The table's shape and the partition `key` names (None, None: not known)."""
        shape = self.tables.shape(table)
        if shape is None:
            return None, None
        return shape, key_text(key.get(shape.hash_key, {}))

    @staticmethod
    def key(shape: Shape, item: dict[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in (shape.hash_key, shape.range_key) if k and k in item}

    # ---- writes ----------------------------------------------------------------------

    def indexes(self, shape: Shape, before: Image | None, after: Image | None,
                touched: set[str] | None, factor: float) -> list[Charge]:
        """What the item's move from `before` to `after` costs its indexes. `touched`:
        the attributes the request names (None: all of them, a whole-item write)."""
        out = []
        for index in shape.indexes:
            old, new = _entry(index, before), _entry(index, after)
            if old is not None and old == new and before is not None and after is not None:
                if any(before.values.get(k) != after.values.get(k) for k in index.own):
                    # Its sort key moved: the old entry deleted, the new one put.
                    out.append(Charge(index.slot, new, "write", factor * (
                        self.w(before.projected(index)) + self.w(after.projected(index)))))
                elif (index.projection != "KEYS_ONLY" if touched is None
                      else _reaches(index, touched)):
                    out.append(Charge(index.slot, new, "write",
                                      factor * self.w(after.projected(index))))
                continue
            if new is not None and after is not None:
                out.append(Charge(index.slot, new, "write",
                                  factor * self.w(after.projected(index))))
            if old is not None and before is not None:
                out.append(Charge(index.slot, old, "write",
                                  factor * self.w(before.projected(index))))
        return out

    def put(self, table: str, item: dict[str, Any], factor: float) -> list[Charge]:
        shape = self.tables.shape(table)
        if shape is None or shape.hash_key not in item:
            return []
        partition = key_text(item[shape.hash_key])
        if partition is None:
            return []
        before = self.tables.image(table, self.key(shape, item))
        after = _image_of(item)
        size = max(after.size, 0 if before is None else before.size)
        return [Charge(table, partition, "write", factor * self.w(size)),
                *self.indexes(shape, before, after, None, factor)]

    def delete(self, table: str, key: dict[str, Any], factor: float) -> list[Charge]:
        shape, partition = self.keyed(table, key)
        if shape is None or partition is None:
            return []
        before = self.tables.image(table, key)
        size = item_size(key) if before is None else before.size
        return [Charge(table, partition, "write", factor * self.w(size)),
                *self.indexes(shape, before, None, None, factor)]

    def update(self, table: str, spec: dict[str, Any], factor: float
               ) -> tuple[list[Charge], Callable[[], list[Charge]] | None]:
        """The charges before (the item before, the request's own values), and what the
        item after adds."""
        key = spec.get("Key") or {}
        shape, partition = self.keyed(table, key)
        if shape is None or partition is None:
            return [], None
        lower = item_size(key) + sum(
            value_size(v) for v in (spec.get("ExpressionAttributeValues") or {}).values())
        before = self.tables.image(table, key)
        size = max(lower, 0 if before is None else before.size)
        touched = _named(spec.get("UpdateExpression") or "",
                         spec.get("ExpressionAttributeNames") or {})
        first = [Charge(table, partition, "write", factor * self.w(size))]
        # The index partitions the item is in now: whatever the update does there.
        for index in shape.indexes:
            old = _entry(index, before)
            if old is not None and before is not None and _reaches(index, touched):
                first.append(Charge(index.slot, old, "write",
                                    factor * self.w(before.projected(index))))

        def after() -> list[Charge]:
            now = self.tables.image(table, key)
            if now is None and before is None:
                return []
            total = [Charge(table, partition, "write",
                            factor * self.w(max(size, 0 if now is None else now.size))),
                     *self.indexes(shape, before, now, touched, factor)]
            return _beyond(total, first)

        return first, after

    # ---- reads -----------------------------------------------------------------------

    def get(self, table: str, key: dict[str, Any], factor: float) -> list[Charge]:
        shape, partition = self.keyed(table, key)
        if shape is None or partition is None:
            return []
        found = self.tables.image(table, key)
        return [Charge(table, partition, "read",
                       factor * self.r(0 if found is None else found.size))]

    def query(self, body: dict[str, Any]) -> tuple[list[Charge], Callable[[bytes | None],
                                                                           list[Charge]] | None]:
        table = body.get("TableName", "")
        shape = self.tables.shape(table)
        if shape is None:
            return [], None
        slot, hash_key = table, shape.hash_key
        if body.get("IndexName"):
            index = next((i for i in shape.indexes
                          if i.slot == f"{table}#{body['IndexName']}"), None)
            if index is None:
                return [], None  # a local secondary index: the table's partition, unread
            slot, hash_key = index.slot, index.hash_key
        partition = _query_key(body, hash_key)
        if partition is None:
            return [], None
        factor = self.read_factor(bool(body.get("ConsistentRead")))
        first = [Charge(slot, partition, "read", factor)]

        def settle(answer: bytes | None) -> list[Charge]:
            try:
                items = json.loads(answer or b"{}").get("Items") or []
                size = sum(item_size(i) for i in items)
            except (ValueError, AttributeError, TypeError, KeyError):
                return []
            return _beyond([Charge(slot, partition, "read", factor * self.r(size))], first)

        return first, settle


def _entry(index: Index, image: Image | None) -> str | None:
    """The index partition the item is in (its hash key value), or None: not in it (an
    index holds only the items that have all its own key attributes)."""
    if image is None or any(k not in image.values for k in index.own):
        return None
    return image.values[index.hash_key]


def _image_of(item: dict[str, Any]) -> Image:
    sizes = {name: len(name.encode("utf-8")) + value_size(v) for name, v in item.items()}
    values = {}
    for name, v in item.items():
        text = key_text(v)
        if text is not None:
            values[name] = text
    return Image(sum(sizes.values()), sizes, values)


def _query_key(body: dict[str, Any], hash_key: str) -> str | None:
    names = body.get("ExpressionAttributeNames") or {}
    values = body.get("ExpressionAttributeValues") or {}
    for name, placeholder in _EQUALS.findall(body.get("KeyConditionExpression") or ""):
        if names.get(name, name) == hash_key and placeholder in values:
            return key_text(values[placeholder])
    return None


def _beyond(total: list[Charge], paid: list[Charge]) -> list[Charge]:
    """What `total` charges beyond `paid`, slot by slot (never a refund)."""
    owed: dict[tuple[str, str, str], float] = {}
    for c in total:
        owed[(c.table, c.key, c.kind)] = owed.get((c.table, c.key, c.kind), 0.0) + c.units
    for c in paid:
        slot = (c.table, c.key, c.kind)
        if slot in owed:
            owed[slot] -= c.units
    return [Charge(t, k, kind, units) for (t, k, kind), units in owed.items()  # type: ignore[arg-type]
            if units > 1e-9]


def plan(operation: str, body: dict[str, Any], model: AwsModel, tables: Tables) -> Plan:
    """What this request costs (an empty plan: free, unkeyed, or unreadable)."""
    try:
        planner = _Planner(model, tables)
        return _plan(operation, body, planner, model.dynamodb.units.transaction_factor)
    except (ValueError, TypeError, AttributeError, KeyError):  # moto answers it, as it would
        return Plan()


def _plan(operation: str, body: dict[str, Any], p: _Planner, tx: float) -> Plan:
    table = body.get("TableName", "")
    if operation == "PutItem":
        return Plan(p.put(table, body.get("Item") or {}, 1.0))
    if operation == "DeleteItem":
        return Plan(p.delete(table, body.get("Key") or {}, 1.0))
    if operation == "UpdateItem":
        first, after = p.update(table, body, 1.0)
        if after is None:
            return Plan(first)
        then = after
        return Plan(first, lambda _answer: then())
    if operation == "GetItem":
        return Plan(p.get(table, body.get("Key") or {},
                          p.read_factor(bool(body.get("ConsistentRead")))))
    if operation == "Query":
        first, settle = p.query(body)
        return Plan(first, settle, needs_answer=settle is not None)
    if operation == "BatchGetItem":
        out = []
        for name, spec in (body.get("RequestItems") or {}).items():
            for key in spec.get("Keys") or []:
                out += p.get(name, key, p.read_factor(bool(spec.get("ConsistentRead"))))
        return Plan(out)
    if operation == "BatchWriteItem":
        out = []
        for name, requests in (body.get("RequestItems") or {}).items():
            for request in requests:
                if "PutRequest" in request:
                    out += p.put(name, request["PutRequest"].get("Item") or {}, 1.0)
                elif "DeleteRequest" in request:
                    out += p.delete(name, request["DeleteRequest"].get("Key") or {}, 1.0)
        return Plan(out)
    if operation == "TransactGetItems":
        out = []
        for entry in body.get("TransactItems") or []:
            spec = entry.get("Get") or {}
            out += p.get(spec.get("TableName", ""), spec.get("Key") or {}, tx)
        return Plan(out)
    if operation == "TransactWriteItems":
        out, later = [], []
        for entry in body.get("TransactItems") or []:
            for action, spec in entry.items():
                name = spec.get("TableName", "")
                if action == "Put":
                    out += p.put(name, spec.get("Item") or {}, tx)
                elif action == "Delete":
                    out += p.delete(name, spec.get("Key") or {}, tx)
                elif action == "Update":
                    first, after = p.update(name, spec, tx)
                    out += first
                    if after is not None:
                        later.append(after)
                elif action == "ConditionCheck":
                    # Charged as a write of the key (no published figure for a check
                    # alone: aws_model.yaml's units `note`).
                    key = spec.get("Key") or {}
                    _, partition = p.keyed(name, key)
                    if partition is not None:
                        out.append(Charge(name, partition, "write", tx * p.w(item_size(key))))
        if not later:
            return Plan(out)

        def settle(_answer: bytes | None) -> list[Charge]:
            return [c for after in later for c in after()]

        return Plan(out, settle)
    return Plan()
