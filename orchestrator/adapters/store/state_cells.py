"""Durable state cells in the control table: (`state#<entity>`, `<key>`) → a JSON value,
scoped by entity, outliving runs, with an optional expiry.

Each item holds the value (`doc`, JSON), a version (`ver`, +1 on every write, so a
read-modify-write such as `incr` is guarded by the version it read) and, for a cell made
by `add`, who claimed it. A durable run's operation on a cell is written in the same
transaction as its journal entry (`write_items` hands out the cell's side of it): the
cell changes exactly when the entry is recorded, so a worker that dies between the two
cannot apply an operation twice, and a replay reads the recorded answer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import sk_of, state_key, state_sk
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["Cell", "StateCells"]


@dataclass(frozen=True)
class Cell:
    entity: str
    key: str
    value: Any
    version: int
    expires_at: float | None = None
    claimed_by: str | None = None

    def doc(self) -> dict[str, Any]:
        return {"entity": self.entity, "key": self.key, "value": self.value,
                "version": self.version, "expires_at": self.expires_at}


def _cell(entity: str, item: dict[str, Any]) -> Cell:
    exp = item.get("expires_at", {}).get("N")
    return Cell(entity=entity, key=sk_of(item), value=json.loads(item["doc"]["S"]),
                version=int(item["ver"]["N"]), expires_at=None if exp is None else float(exp),
                claimed_by=item.get("claimer", {}).get("S"))


class StateCells:
    def __init__(self, control: Control) -> None:
        self.control = control
        self.ddb = control.ddb
        self.table = control.table

    def get(self, entity: str, key: str, now: float) -> Cell | None:
        """The live cell (a strongly consistent read; an expired one is absent)."""
        item = self.control.get(state_key(entity), state_sk(key), now=now)
        return None if item is None else _cell(entity, item)

    def list(self, entity: str, now: float, *, after: str | None = None,
             limit: int = 100) -> list[Cell]:
        """An entity's live cells in key order, from after `after`."""
        items = self.control.query(state_key(entity), now=now, limit=limit,
                                   after=None if after is None else state_sk(after))
        return [_cell(entity, i) for i in items]

    # ---- the cell's side of a write ------------------------------------------------------

    def put_item(self, entity: str, key: str, value: Any, now: float, *,
                 expect: Cell | bool | None, ttl: float | None = None,
                 claimer: str | None = None) -> dict[str, Any]:
        """A TransactWriteItems Put of the cell holding `value`. `expect`: the cell as it
        was read (its version must still be there), None (no live cell may be there),
        or True (whatever is there)."""
        item: dict[str, Any] = {
            **Control.key(state_key(entity), state_sk(key)), "doc": {"S": dumps(value)},
            "ver": num((expect.version if isinstance(expect, Cell) else 0) + 1),
        }
        if ttl is not None:
            item["expires_at"] = num(now + ttl)
        if claimer is not None:
            item["claimer"] = {"S": claimer}
        put: dict[str, Any] = {"TableName": self.table, "Item": item}
        if expect is None:
            put["ConditionExpression"] = "attribute_not_exists(pk) OR expires_at <= :now"
            put["ExpressionAttributeValues"] = {":now": num(now)}
        elif isinstance(expect, Cell):
            put["ConditionExpression"] = "ver = :v"
            put["ExpressionAttributeValues"] = {":v": num(expect.version)}
        return {"Put": put}

    def delete_item(self, entity: str, key: str) -> dict[str, Any]:
        return {"Delete": {"TableName": self.table,
                           "Key": Control.key(state_key(entity), state_sk(key))}}

    # ---- writes of their own (the API, the CLI) -----------------------------------------

    def write(self, *items: dict[str, Any], what: str) -> None:
        """Apply cell writes made above, together; ConditionFailed if a guard failed."""
        with _translate(f"state: {what}"):
            if len(items) == 1:
                op, body = next(iter(items[0].items()))
                if op == "Put":
                    self.ddb.put_item(**body)
                else:
                    self.ddb.delete_item(**body)
                return
            self.ddb.transact_write_items(TransactItems=list(items))

    def delete(self, entity: str, key: str) -> bool:
        """Delete a cell; False if there was none."""
        try:
            with _translate(f"state {entity}/{key}: delete"):
                self.ddb.delete_item(TableName=self.table,
                                     Key=Control.key(state_key(entity), state_sk(key)),
                                     ConditionExpression="attribute_exists(pk)")
        except ConditionFailed:
            return False
        return True
