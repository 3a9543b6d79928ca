"""The sort-key range of a table query, cut by bisection (part of index-range: the
speed-ups' registry, `__init__.py`, applies it behind that capability check, through
dynamodb_query.py's Table.query).

A table query with a sort-key condition: moto sorts its partition through moto's
comparisons and compares every item (30 ms a query of a run with 10,000 journal
entries). `partition_trim` cuts the partition's items to those that can change moto's
answer; for string keys and a range that is one run of keys in order (=, <, <=, >, >=,
BETWEEN, begins_with), the keys are sorted as strings and the range's ends found by
bisection (3.5 ms). The items, order, pages, counts and errors are moto's own."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

from infra.emulator.speedups.dynamodb_items import ITEM_LIMIT

__all__ = ["partition_trim"]


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
