"""An item built at the cost of its size (moto_speedups.py registers this behind its
capability check).

moto builds an item (every put, every copy a query or an update makes, every projected
read) by setting its attributes one at a time into a dict that checks DynamoDB's 400 KB
limit on each set by sizing every attribute already in it: a row of 25 attributes was
sized some 300 times, a sixth of the emulator's time in a chain of short runs. The same
check, made with a running total: the prefix sum it compares with the limit after each
attribute is the sum moto computes from the dict, attribute for attribute, so the item,
and the error (and the attribute it is raised at) are moto's own."""

from __future__ import annotations

from typing import Any

from infra.capabilities import resolve

__all__ = ["ITEM_LIMIT", "READS", "item_init"]

_TYPES = "moto.dynamodb.models.dynamo_type"
# LimitedSizeDict sums what DynamoType.size answers, whatever sizes it (type-size may).
READS = (f"{_TYPES}:LimitedSizeDict", "moto.dynamodb.models.utilities:bytesize")
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
