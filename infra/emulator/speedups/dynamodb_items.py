"""moto's DynamoDB items (moto.dynamodb.models.dynamo_type): built, sized and projected
at the cost of their size (the speed-ups' registry, `__init__.py`, applies these, each
behind its capability check).

Building (`item_init`, item-size): moto builds an item (every put, every copy a query or
an update makes, every projected read) by setting its attributes one at a time into a
dict that checks DynamoDB's 400 KB limit on each set by sizing every attribute already in
it: a row of 25 attributes was sized some 300 times, a sixth of the emulator's time in a
chain of short runs. The same check, made with a running total: the prefix sum it
compares with the limit after each attribute is the sum moto computes from the dict,
attribute for attribute, so the item, and the error (and the attribute it is raised at)
are moto's own.

Sizing a value (`type_size`, type-size; item-size reads moto's): moto sizes a value
through a chain of type tests, and a map by wrapping each of its values in a new
DynamoType first. The same sum, with the type read once and a value that is already a
DynamoType sized as it is (wrapping one copies its type and value, and re-wraps the
members of a list or a map: the same sizes).

Projecting (`project`, projection): moto projects an item by converting the whole item to
plain JSON once per attribute named in the ProjectionExpression (the sweeper's and a
finish's read of a run's step states names 25): the item is converted once per
projection, and each attribute is looked up in that one conversion (the conversion is
pure, and the lookups only copy out of it)."""

from __future__ import annotations

from typing import Any

from infra.emulator.capabilities import resolve

__all__ = ["ITEM_LIMIT", "PROJECT_READS", "READS", "SIZE_READS", "bind", "clear", "item_init",
           "project", "type_size"]

_TYPES = "moto.dynamodb.models.dynamo_type"
# LimitedSizeDict sums what DynamoType.size answers, whatever sizes it (type-size may).
READS = (f"{_TYPES}:LimitedSizeDict", "moto.dynamodb.models.utilities:bytesize")
# What type_size reproduces: DynamoType.size, and how a DynamoType wraps what it is given.
SIZE_READS = (f"{_TYPES}:DynamoType.size", f"{_TYPES}:DynamoType.__init__", f"{_TYPES}:DDBType",
              "moto.dynamodb.models.utilities:bytesize")
_SETS = {"SS": "S", "NS": "N", "BS": "B"}  # moto's DDBType: a set type, its members' type
# What project calls, besides Item.project itself.
PROJECT_READS = (f"{_TYPES}:find_nested_key", f"{_TYPES}:merge_dicts")
# LimitedSizeDict.__setitem__'s limit (its fingerprint holds the number): no item moto
# stores is larger.
ITEM_LIMIT = _LIMIT = 405000


def item_init(stock: Any) -> Any:
    dynamo_type = resolve(f"{_TYPES}:DynamoType")
    limited = resolve(f"{_TYPES}:LimitedSizeDict")
    too_large = resolve("moto.dynamodb.exceptions:ItemSizeTooLarge")
    bytesize = resolve("moto.dynamodb.models.utilities:bytesize")

    def __init__(self: Any, hash_key: Any, range_key: Any, attrs: dict[str, Any]) -> None:
        # moto's Item.__init__: each attribute typed and set in order, the item's size
        # (keys and values so far, this one included) checked after each.
        self.hash_key = hash_key
        self.range_key = range_key
        self.attrs = limited()
        size = 0
        for key, value in attrs.items():
            typed = dynamo_type(value)
            size += bytesize(str(key)) + typed.size()
            if size > _LIMIT:
                raise too_large
            dict.__setitem__(self.attrs, key, typed)

    return __init__


def type_size(stock: Any) -> Any:
    dynamo_type = resolve(f"{_TYPES}:DynamoType")
    bytesize = resolve("moto.dynamodb.models.utilities:bytesize")

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


_stock: dict[str, Any] = {}
# moto's dynamo_type module, looked up when the speed-ups are installed (`bind`).
_refs: dict[str, Any] = {}


def bind() -> None:
    """Look up the module the projection builds its items with (missing: its speed-up's
    check fails on the same path, and it is not applied)."""
    try:
        _refs["dynamo_type"] = resolve(_TYPES)
    except LookupError:
        pass


def clear() -> None:
    _stock.clear()


def _project(self: Any, projection_expressions: list[list[str]]) -> Any:
    # moto's Item.project, with self.to_regular_json() computed once, not per expression.
    result: dict[str, Any] = {}
    dynamo_type = _refs["dynamo_type"]
    plain = self.to_regular_json()
    for expr in projection_expressions:
        dynamo_type.merge_dicts(result, dynamo_type.find_nested_key(expr, plain))
    return dynamo_type.Item(
        hash_key=self.hash_key,
        range_key=self.range_key,
        attrs=dynamo_type.serializer.serialize(result)["M"],
    )


def project(stock: Any) -> Any:
    """Item.project, the item converted once per projection."""
    _stock["project"] = stock
    return _project
