"""A table query that copies nothing it answers with fresh items anyway, and sizes each
item once (moto_speedups.py registers this behind its capability check).

moto's Table.query sizes every item of the key range twice (once to see whether the page
is full, once to add it to the page's total), deep-copies every item of the page, then
applies the filter and, last, the projection. A projected item is built afresh from a
plain conversion of the item, so for a query of the table (not of an index) that names a
ProjectionExpression the deep copy protects nothing: the filter reads the items, the
answer is made of new ones. A follower of a 200-step run, whose query keeps the few rows
in flight of 200 and names the columns it shows, paid for 200 deep copies and 400 sizings
on every look.

Within one DynamoDBBackend.query on this thread:
- the copy of the page is a plain list when the query is of the table: moto then filters
  the stored items, which a filter only reads, and projects them into new ones, or (no
  projection) answers with their attributes as they are, written out by the response's
  serializer, which only reads them, in the same request (each DynamoDB request runs
  alone in the emulator). A follower of a 10,000-step durable run read its journal's new
  entries at 60 us an entry, a third of it the copy. A query of an index is copied as
  moto copies it;
- an item's size is computed once and kept for the rest of that query (nothing writes an
  item during a query: each DynamoDB request runs alone in the emulator).

A value's size (`type_size`, a speed-up of its own: item-size reads moto's): moto sizes a
value through a chain of type tests, and a map by wrapping each of its values in a new
DynamoType first. The same sum, with the type read once and a value that is already a
DynamoType sized as it is (wrapping one copies its type and value, and re-wraps the
members of a list or a map: the same sizes).

A table query with a sort-key condition (`partition_trim`, part of moto_speedups.py's
index-range): the partition's items cut to those that can change moto's answer.

The items, order, pages, counts and errors are moto's own."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from infra.capabilities import resolve
from infra.speedups_items import ITEM_LIMIT

__all__ = ["READS", "SIZE_READS", "backend_query", "item_size", "partition_trim", "table_copy",
           "type_size"]

_MODELS = "moto.dynamodb.models"
# What the replacements rely on: where Table.query copies its page (the only deep copy of
# a list from the query's start to its end) and what it does with the copy (filter, then
# project: whatever Item.project is, its items are what the answer is written from, in the
# same request).
READS = (f"{_MODELS}.table:Table.query",)

# What type_size reproduces: DynamoType.size, and how a DynamoType wraps what it is given.
_TYPES = f"{_MODELS}.dynamo_type"
SIZE_READS = (f"{_TYPES}:DynamoType.size", f"{_TYPES}:DynamoType.__init__", f"{_TYPES}:DDBType",
              f"{_MODELS}.utilities:bytesize")
_SETS = {"SS": "S", "NS": "N", "BS": "B"}  # moto's DDBType: a set type, its members' type

_within = threading.local()


def backend_query(stock: Any) -> Any:
    def query(self: Any, table_name: str, hash_key_dict: Any, range_comparison: Any,
              range_value_dicts: Any, limit: Any, exclusive_start_key: Any,
              scan_index_forward: Any, projection_expressions: Any, index_name: Any = None,
              *args: Any, **kwargs: Any) -> Any:
        outer = (getattr(_within, "sizes", None), getattr(_within, "uncopied", False))
        _within.sizes = {}
        _within.uncopied = not index_name
        try:
            return stock(self, table_name, hash_key_dict, range_comparison, range_value_dicts,
                         limit, exclusive_start_key, scan_index_forward,
                         projection_expressions, index_name, *args, **kwargs)
        finally:
            _within.sizes, _within.uncopied = outer

    return query


class _Copy:
    """The `copy` module as moto's table module sees it: the page of a projected table
    query handed on as a list, every other call the module's own."""

    def __init__(self, stock: Any) -> None:
        self._stock = stock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stock, name)

    def deepcopy(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if type(x) is list and not args and not kwargs and getattr(_within, "uncopied", False):
            _within.uncopied = False  # the page's copy: once per query
            return list(x)
        return self._stock.deepcopy(x, *args, **kwargs)


def table_copy(stock: Any) -> Any:
    return _Copy(stock)


def item_size(stock: Any) -> Any:
    def size(self: Any) -> int:
        sizes = getattr(_within, "sizes", None)
        if sizes is None:
            return int(stock(self))
        hit = sizes.get(id(self))
        if hit is None or hit[0] is not self:  # the item held: its id is not reused
            hit = sizes[id(self)] = (self, stock(self))
        return int(hit[1])

    return size


def type_size(stock: Any) -> Any:
    dynamo_type = resolve(f"{_TYPES}:DynamoType")
    bytesize = resolve(f"{_MODELS}.utilities:bytesize")

    def sized(value: Any, wrapped: bool = False) -> int:
        # moto's DynamoType.size of a DynamoType; anything else (a subclass) its own size.
        # `wrapped`: below a map, where moto sizes a new DynamoType of each value, which
        # wraps every member of a list or a map below it afresh (a plain dict too).
        if type(value) is not dynamo_type:
            return int(value.size())
        kind, inner = value.type, value.value
        if kind == "N":
            return len(str(inner))
        member = _SETS.get(kind)
        if member is not None:
            return sum(sized(dynamo_type({member: v})) for v in inner)
        if kind == "L":
            if wrapped:
                return sum(sized(v if type(v) is dynamo_type else dynamo_type(v), True)
                           for v in inner)
            return sum(v.size() if type(v) is not dynamo_type else sized(v) for v in inner)
        if kind == "M":
            return sum(bytesize(k) + sized(v if type(v) is dynamo_type else dynamo_type(v), True)
                       for k, v in inner.items())
        if isinstance(inner, bool):
            return 1
        return int(bytesize(inner))

    def size(self: Any) -> int:
        return sized(self)

    return size


def partition_trim(range_comparison: Any, range_objs: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any], page: int | None
                   ) -> Callable[[Any, list[Any]], list[Any]] | None:
    """For a table query with a sort-key condition: a cut of the partition's items to
    those moto's loop can be affected by (None: the whole partition).

    moto's loop walks the partition in key order (reversed if backwards) and, at every
    item, in the range or not, ends the page if it holds `Limit` items or if the item
    would take it past 1 MB; it keeps only the items in the range. An item before the
    first in the range (in the walk's order) meets an empty page: it has no effect. The
    items after the last in the range: none can end the page by size if the range's
    items total at most 1 MB less the largest item moto stores, and only the first can
    end it by count (then the page holds `Limit` items). A durable run's journal sorts
    after its step rows: a query of the rows no longer walks (and sizes) the journal.
    (moto checks the 405,000-byte limit when it builds an item or sets one of its
    attributes, not when an update sets a path inside one or adds to a set in place, as
    DynamoDB does: an item grown past it that way could end a page where this cut has
    dropped it.)"""
    known = {"hash_key_conditions", "range_key_conditions", "limit", "exclusive_start_key",
             "scan_index_forward", "projection_expressions", "index_name", "consistent_read",
             "filter_expression"}
    if not range_comparison or set(kwargs) - known:  # a legacy QueryFilter: moto's walk
        return None
    limit = kwargs.get("limit", args[0] if args else None)
    forward = kwargs.get("scan_index_forward", args[2] if len(args) > 2 else True)
    conditions = kwargs.get("range_key_conditions")
    if page is None:
        return None

    def trim(table: Any, items: list[Any]) -> list[Any]:
        name = conditions[-1][0] if conditions else table.range_key_attr
        cut = (_string_cut(items, range_comparison, range_objs, forward is not False)
               if name == table.range_key_attr else None)
        if cut is not None:
            kept, after = cut
            sizes = list(kept)  # the range's items, every one (kept grows below)
            if not kept:
                return []
        else:
            order = sorted(items, key=lambda i: i.range_key)
            if forward is False:
                order.reverse()
            inside = []
            for k, item in enumerate(order):
                value = item.attrs.get(name)
                if value is not None and value.compare(range_comparison, range_objs):
                    inside.append(k)
            if not inside:
                return []
            kept, after = order[inside[0]:inside[-1] + 1], order[inside[-1] + 1:]
            sizes = [order[k] for k in inside]
        if after:
            if sum(i.size() for i in sizes) + ITEM_LIMIT > page:
                kept += after
            elif limit is not None:
                kept.append(after[0])
        return kept

    return trim


def _string_cut(items: list[Any], comparison: str, bounds: Any, forward: bool
                ) -> tuple[list[Any], list[Any]] | None:
    """What `trim` finds by sorting the partition's items and comparing each (moto's
    comparison functions, a Python call an item: a 10,000-entry journal took 30 ms a
    query), for a comparison whose items sit together in key order and keys that are all
    strings: the keys sorted as strings (moto orders strings by their value) and the
    range's ends found by bisection. (the range's items, in the walk's order; the items
    after them). None: not such a query."""
    if len(bounds) not in (1, 2) or any(b.type != "S" for b in bounds) \
            or any(i.range_key is None or i.range_key.type != "S" for i in items):
        return None
    values = [b.value for b in bounds]
    order = sorted(items, key=lambda i: i.range_key.value)
    keys = [i.range_key.value for i in order]
    window = _window(keys, comparison, values)
    if window is None:
        return None
    lo, hi = window
    if lo >= hi:
        return [], []
    if forward:
        return order[lo:hi], order[hi:]
    return order[lo:hi][::-1], order[:lo][::-1]


def _window(keys: list[str], comparison: str, values: list[str]) -> tuple[int, int] | None:
    """The slice of sorted `keys` that moto's comparison `comparison` keeps."""
    first = values[0]
    if comparison in ("=", "EQ"):
        return bisect_left(keys, first), bisect_right(keys, first)
    if comparison in ("<", "LT"):
        return 0, bisect_left(keys, first)
    if comparison in ("<=", "LE"):
        return 0, bisect_right(keys, first)
    if comparison in (">", "GT"):
        return bisect_right(keys, first), len(keys)
    if comparison in (">=", "GE"):
        return bisect_left(keys, first), len(keys)
    if comparison == "BETWEEN" and len(values) == 2:
        return bisect_left(keys, first), bisect_right(keys, values[1])
    if comparison == "BEGINS_WITH":
        lo = hi = bisect_left(keys, first)
        while hi < len(keys) and keys[hi].startswith(first):
            hi += 1
        return lo, hi
    return None
