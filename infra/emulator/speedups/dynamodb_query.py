"""moto's DynamoDB Query (moto.dynamodb.models: DynamoDBBackend.query, Table.query,
Table.all_items), reading only what can change its answer (the speed-ups' registry,
`__init__.py`, applies these, each behind its capability check).

Copies (query-copy): moto's Table.query sizes every item of the key range twice (once to
see whether the page is full, once to add it to the page's total), deep-copies every item
of the page, then applies the filter and, last, the projection. A projected item is built
afresh from a plain conversion of the item, so for a query of the table (not of an index)
that names a ProjectionExpression the deep copy protects nothing: the filter reads the
items, the answer is made of new ones. A follower of a 200-step run, whose query keeps the
few rows in flight of 200 and names the columns it shows, paid for 200 deep copies and 400
sizings on every look.
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

Key ranges (index-range): moto's Query on an index sorts every item of the table, then
sizes and sorts every item under the partition key before it applies the sort-key
condition, so a query of a narrow range costs as much as reading the whole partition (the
orchestrator's wake index keeps finished rows: every sweep paid for all of them). DynamoDB
reads only the key range; the emulator hands moto's query only the items from the range's
start on (in the query's direction): those before it moto steps over without any effect,
so the items, order, pages and counts are the same. A query of the table by partition key
gets that partition's items (moto keeps just those, and sorts them itself) instead of the
whole table, sorted, cut to its sort-key range where one is given (dynamodb_range.py).

The items, order, pages, counts and errors are moto's own."""

from __future__ import annotations

import threading
from typing import Any

from infra.emulator.capabilities import resolve
from infra.emulator.speedups.dynamodb_range import partition_trim

__all__ = ["PAGE_LIMIT", "READS", "backend_query", "bind", "clear", "item_size",
           "table_all_items", "table_copy", "table_query"]

_MODELS = "moto.dynamodb.models"
# What the replacements rely on: where Table.query copies its page (the only deep copy of
# a list from the query's start to its end) and what it does with the copy (filter, then
# project: whatever Item.project is, its items are what the answer is written from, in the
# same request).
READS = (f"{_MODELS}.table:Table.query",)

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


# moto's page size in bytes (1 MB), which a table query's cut reads.
PAGE_LIMIT = f"{_MODELS}.table:RESULT_SIZE_LIMIT"

_stock: dict[str, Any] = {}
# moto's objects the replacements use, looked up when they are installed (`bind`).
_refs: dict[str, Any] = {}
# The query running on this thread: (table, sort-key attribute, a test for the values
# before its range, None) for an index; (table, None, partition key, a cut of its items
# or None) for the table (dynamodb_range.partition_trim).
_range = threading.local()


def bind() -> None:
    """Look up moto's page size (missing: index-range's check fails on the same path, and
    it is not applied)."""
    try:
        _refs["page_limit"] = resolve(PAGE_LIMIT)
    except LookupError:
        pass


def clear() -> None:
    _stock.clear()


def _before(comparison: str, bounds: list[Any], forward: bool) -> Any:
    """A test for sort-key values that come before the range in the query's direction
    (None: nothing can be said). moto's query steps over those without any effect: no
    result, no page, no count, and its page size is still 0 there."""
    lo = {"BETWEEN": 0, "=": 0, "EQ": 0, ">": 0, "GT": 0, ">=": 0, "GE": 0}
    hi = {"BETWEEN": 1, "=": 0, "EQ": 0, "<": 0, "LT": 0, "<=": 0, "LE": 0}
    if forward and comparison in lo:
        bound = bounds[lo[comparison]]
        if comparison in (">", "GT"):
            return lambda v: v <= bound
        return lambda v: v < bound
    if not forward and comparison in hi:
        bound = bounds[hi[comparison]]
        if comparison in ("<", "LT"):
            return lambda v: v >= bound
        return lambda v: v > bound
    return None


def _all_items(self: Any) -> list[Any]:
    within = getattr(_range, "query", None)
    if within is None or within[0] is not self:
        return list(_stock["all_items"](self))
    _, attr, before, trim = within
    if attr is None:  # a query of the table by partition key: only that partition
        hash_set = self.items.get(before)
        if hash_set is None:
            return []
        if not self.range_key_attr:
            return [hash_set]
        return list(hash_set.values()) if trim is None else trim(self, list(hash_set.values()))
    items = []
    for hash_set in self.items.values():
        for item in (hash_set.values() if self.range_key_attr else (hash_set,)):
            value = item.attrs.get(attr)
            if value is not None:
                try:
                    if before(value.cast_value):
                        continue
                except TypeError:  # another type than the bound's: moto decides
                    pass
            items.append(item)
    # moto's own order (all_items sorts the table by its keys), of fewer items.
    return sorted(items, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)


def table_all_items(stock: Any) -> Any:
    """Table.all_items: within a query, only the items that can change its answer."""
    _stock["all_items"] = stock
    return _all_items


def _index_range_attr(table: Any, index_name: str, conditions: Any) -> str | None:
    if conditions:
        return str(conditions[-1][0])
    for index in table.all_indexes():
        if index.name == index_name:
            ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
            return ranges[0] if len(ranges) == 1 else None
    return None


def _query(self: Any, hash_key: Any, range_comparison: Any, range_objs: Any, *args: Any,
           **kwargs: Any) -> Any:
    index_name = kwargs.get("index_name", args[4] if len(args) > 4 else None)
    forward = kwargs.get("scan_index_forward", args[2] if len(args) > 2 else True)
    attr = before = None
    if not index_name and hash_key is not None:
        # moto keeps only the items whose hash key equals it, and sorts them by range
        # key itself: the partition's items are all it needs, in any order.
        _range.query = (self, None, hash_key, partition_trim(
            range_comparison, range_objs, args, kwargs, _refs.get("page_limit")))
        try:
            return _stock["query"](self, hash_key, range_comparison, range_objs, *args,
                                   **kwargs)
        finally:
            _range.query = None
    if index_name and range_comparison and range_objs:
        attr = _index_range_attr(self, index_name, kwargs.get("range_key_conditions"))
        before = _before(range_comparison, [o.cast_value for o in range_objs],
                         forward is not False)
    if attr is None or before is None:
        return _stock["query"](self, hash_key, range_comparison, range_objs, *args, **kwargs)
    _range.query = (self, attr, before, None)
    try:
        return _stock["query"](self, hash_key, range_comparison, range_objs, *args, **kwargs)
    finally:
        _range.query = None


def table_query(stock: Any) -> Any:
    """Table.query, telling all_items which range (or partition) it reads."""
    _stock["query"] = stock
    return _query
