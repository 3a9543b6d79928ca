"""moto's TransactWriteItems (moto.dynamodb.models: DynamoDBBackend.transact_write_items)
without copying whole tables (transact-undo: the speed-ups' registry, `__init__.py`,
applies it behind its capability check).

moto keeps a backup of every table a transaction names, as a deep copy of the whole
table, to put back if the transaction is cancelled: each transaction costs as much as
the table holds (60 microseconds per item on the development machine: a durable run's
checkpoints, committed a batch at a time, grew quadratic with everything the table
held). DynamoDB's cost does not depend on the table's size.

This does what moto's `DynamoDBBackend.transact_write_items` does, step for step (the
same checks in the same order, the same backend calls, the same errors), but keeps an
undo record of only the items the transaction touches: each one's copy from just before
its operation (or its absence). A cancelled transaction puts those back, which leaves
each table as the whole copy would have. A table with a stream keeps moto's own path
(its stream records are in the copy too). The moto objects it uses are resolved once
(`bind`), each among the speed-up's checked reaches."""

from __future__ import annotations

import copy
from typing import Any

from infra.emulator.capabilities import resolve

__all__ = ["READS", "bind", "transact_write_items"]

_EXC = "moto.dynamodb.exceptions"
# The moto objects this reproduces or calls, for the speed-up's capability check.
READS = (
    f"{_EXC}:TooManyTransactionsException",
    f"{_EXC}:TransactWriteSingleOpException",
    f"{_EXC}:MultipleTransactionsException",
    f"{_EXC}:MockValidationException",
    f"{_EXC}:ConditionalCheckFailed",
    f"{_EXC}:TransactionCanceledException",
    "moto.dynamodb.models:get_filter_expression",
    "moto.dynamodb.models.dynamo_type:DynamoType",
)

_ref: dict[str, Any] = {}


def bind() -> None:
    """Resolve the moto objects used (a LookupError names one that is missing)."""
    for path in READS:
        _ref[path.rsplit(":", 1)[1]] = resolve(path)


def _streamed(backend: Any, transact_items: list[dict[str, Any]]) -> bool:
    for item in transact_items:
        for op in item.values():
            table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            if table is not None and getattr(table, "stream_shard", None) is not None:
                return True
    return False


def transact_write_items(stock: Any) -> Any:
    """The replacement of `DynamoDBBackend.transact_write_items`, given moto's own."""

    def transact(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if _streamed(self, transact_items):
            stock(self, transact_items)
            return None
        r = _ref
        if len(transact_items) > 100:
            raise r["TooManyTransactionsException"]()
        undo: dict[tuple[str, Any, Any], tuple[Any, Any]] = {}

        def roll_back() -> None:
            for (_, hash_key, range_key), (table, old) in reversed(undo.items()):
                _put_back(table, hash_key, range_key, old)

        targets: set[tuple[str, str]] = set()

        def check_unicity(table_name: str, key: dict[str, Any]) -> None:
            item = (str(table_name), str(dict(sorted(key.items()))))
            if item in targets:
                raise r["MultipleTransactionsException"]()
            targets.add(item)

        errors: list[tuple[str | None, str | None, Any]] = []
        for item in transact_items:
            original_item: dict[str, Any] | None = None
            if len(list(item.keys())) > 1:
                raise r["TransactWriteSingleOpException"]
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                condition_expression = op.get("ConditionExpression")
                names = op.get("ExpressionAttributeNames")
                values = op.get("ExpressionAttributeValues")
                on_failure = op.get("ReturnValuesOnConditionCheckFailure")
                if op_type == "Put":
                    attrs = op["Item"]
                    table = self.get_table(table_name)
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                check_unicity(table_name, key)
                current = self.get_item(table_name, key)
                _remember(self, undo, table_name, key, current)
                if condition_expression is not None:
                    condition = r["get_filter_expression"](condition_expression, names, values)
                    if not condition.expr(current):
                        if on_failure == "ALL_OLD" and current:
                            original_item = current.to_json()["Attributes"]
                        raise r["ConditionalCheckFailed"](item=original_item)
                if op_type == "Put":
                    self.put_item(table_name, op["Item"],
                                  condition_expression=condition_expression,
                                  expression_attribute_names=names,
                                  expression_attribute_values=values)
                elif op_type == "Delete":
                    self.delete_item(table_name, key,
                                     condition_expression=condition_expression,
                                     expression_attribute_names=names,
                                     expression_attribute_values=values)
                elif op_type == "Update":
                    self.update_item(table_name, key,
                                     update_expression=op["UpdateExpression"],
                                     condition_expression=condition_expression,
                                     expression_attribute_names=names,
                                     expression_attribute_values=values)
                errors.append((None, None, None))
            except (r["MultipleTransactionsException"], r["MockValidationException"]):
                roll_back()
                raise
            except r["ConditionalCheckFailed"] as e:
                errors.append(("ConditionalCheckFailed", str(e.message), original_item))
            except Exception as e:  # as moto: any other error cancels the transaction
                errors.append((type(e).__name__, str(e), original_item))
        if any(code is not None for code, _, _ in errors):
            roll_back()
            raise r["TransactionCanceledException"](errors)
        return None

    return transact


def _remember(backend: Any, undo: dict[tuple[str, Any, Any], tuple[Any, Any]],
              table_name: str, key: dict[str, Any], current: Any) -> None:
    """Keep the item at `key` as it is before the transaction first touches it."""
    table = backend.tables.get(table_name)
    if table is None:
        return
    dynamo_type = _ref["DynamoType"]
    hash_key = dynamo_type(key[table.hash_key_attr])
    range_key = (dynamo_type(key[table.range_key_attr])
                 if table.range_key_attr is not None else None)
    place = (table_name, hash_key, range_key)
    if place not in undo:
        undo[place] = (table, copy.deepcopy(current))


def _put_back(table: Any, hash_key: Any, range_key: Any, old: Any) -> None:
    """The item at a key as it was (absent if `old` is None)."""
    if range_key is None:
        if old is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = old
        return
    partition = table.items.get(hash_key)
    if old is None:
        if partition is not None:
            partition.pop(range_key, None)
            if not partition:
                table.items.pop(hash_key, None)
        return
    if partition is None:
        partition = table.items[hash_key] = {}
    partition[range_key] = old
