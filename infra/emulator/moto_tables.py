"""What the AWS model reads of moto's DynamoDB tables: a table's keys and global secondary
indexes (its `Shape`), and an item's size and key values as stored (its `Image`), so that
a request is charged the units AWS would charge it (partitions.py): the larger of an item
before and after a write, every index partition a write reaches, a read's item size.

moto documents none of this: `MOTO_TABLES` names what is reached (its backends' tables,
their `items`, `hash_key_attr`, `range_key_attr`, `global_indexes`, and `DynamoType`), and
any failure to read it answers None, which the model takes as "not known": the request
is then charged its lower bound (its key and values), never refused. Reads take the
process's DynamoDB lock for the few dictionary look-ups they make (no sleep is ever taken
under it), so a concurrent write never changes an item under them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from infra.emulator.capabilities import Capability, Reach, check, resolve
from infra.emulator.dynamodb_lock import DYNAMODB_LOCK

__all__ = ["MOTO_TABLES", "Image", "Index", "MotoTables", "Shape", "key_text"]

MOTO_TABLES = Capability(
    "aws-model:tables", "the AWS model charges items by their stored size and indexes",
    (Reach("moto.dynamodb.models:dynamodb_backends"),
     Reach("moto.dynamodb.models.dynamo_type:DynamoType")))


def key_text(value: dict[str, Any]) -> str | None:
    """A key value as the model names its partition ("S:abc"); None: not a key value."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (kind, v), = value.items()
    return f"{kind}:{v}" if isinstance(v, str) and kind in ("S", "N", "B") else None


@dataclass(frozen=True)
class Index:
    """One global secondary index: its partitions are `slot` (table#index) + a hash value."""
    slot: str
    hash_key: str
    keys: tuple[str, ...]  # the index's and the table's key attributes
    own: tuple[str, ...]  # the index's own key attributes: an item lacking one is not in it
    projection: str  # KEYS_ONLY, INCLUDE or ALL
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class Shape:
    hash_key: str
    range_key: str | None
    indexes: tuple[Index, ...]


@dataclass(frozen=True)
class Image:
    """An item as stored: its size in bytes and its scalar attributes' key texts."""
    size: int
    sizes: dict[str, int]  # attribute -> its size (name and value), for projections
    values: dict[str, str]  # attribute -> key_text of its value (scalars only)

    def projected(self, index: Index) -> int:
        """The size of what the index holds of this item."""
        if index.projection == "ALL":
            return self.size
        names = set(index.keys) | set(index.include)
        return sum(size for name, size in self.sizes.items() if name in names)


class MotoTables:
    """Shapes (cached per table name) and images, read from moto under its lock."""

    def __init__(self) -> None:
        self._shapes: dict[str, Shape] = {}
        self._lock = threading.Lock()
        self.usable = check(MOTO_TABLES) is None

    def forget(self, table: str) -> None:
        """A table was created or deleted: its shape is read again."""
        with self._lock:
            self._shapes.pop(table, None)

    def shape(self, table: str) -> Shape | None:
        with self._lock:
            found = self._shapes.get(table)
        if found is not None or not self.usable:
            return found
        with DYNAMODB_LOCK:
            t = self._table(table)
            shape = None if t is None else _shape_of(table, t)
        if shape is not None:
            with self._lock:
                self._shapes[table] = shape
        return shape

    def image(self, table: str, key: dict[str, Any]) -> Image | None:
        """The stored item at `key` (wire format), or None: absent, or not readable."""
        if not self.usable:
            return None
        try:
            dynamo_type = resolve("moto.dynamodb.models.dynamo_type:DynamoType")
            with DYNAMODB_LOCK:
                t = self._table(table)
                if t is None:
                    return None
                hash_value = key.get(t.hash_key_attr)
                if hash_value is None:
                    return None
                # `.get`, never `[]`: moto's items are a defaultdict, and a look-up of a
                # missing key must not add an empty partition to it.
                found = t.items.get(dynamo_type(hash_value))
                if found is not None and t.range_key_attr is not None:
                    range_value = key.get(t.range_key_attr)
                    found = None if range_value is None else found.get(dynamo_type(range_value))
                if found is None:
                    return None
                sizes = {name: len(name.encode("utf-8")) + value.size()
                         for name, value in found.attrs.items()}
                values = {}
                for name, value in found.attrs.items():
                    text = key_text({value.type: value.value})
                    if text is not None:
                        values[name] = text
            return Image(sum(sizes.values()), sizes, values)
        except (LookupError, AttributeError, TypeError, ValueError, RuntimeError):
            return None

    @staticmethod
    def _table(table: str) -> Any:
        try:
            backends = resolve("moto.dynamodb.models:dynamodb_backends")
            for account in list(dict.values(backends)):
                for backend in list(dict.values(account)):
                    found = backend.tables.get(table)
                    if found is not None:
                        return found
        except (LookupError, AttributeError, TypeError, RuntimeError):
            return None
        return None


def _shape_of(name: str, t: Any) -> Shape | None:
    try:
        table_keys = tuple(k for k in (t.hash_key_attr, t.range_key_attr) if k)
        indexes = []
        for gsi in t.global_indexes:
            hash_key = next(k["AttributeName"] for k in gsi.schema if k["KeyType"] == "HASH")
            own = tuple(k["AttributeName"] for k in gsi.schema)
            projection = (gsi.projection or {}).get("ProjectionType", "ALL")
            include = tuple((gsi.projection or {}).get("NonKeyAttributes", []) or ())
            indexes.append(Index(f"{name}#{gsi.name}", hash_key,
                                 tuple(dict.fromkeys(own + table_keys)), own, projection,
                                 include))
        return Shape(t.hash_key_attr, t.range_key_attr, tuple(indexes))
    except (AttributeError, StopIteration, TypeError, KeyError):
        return None
