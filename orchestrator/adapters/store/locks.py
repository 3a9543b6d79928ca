"""Locks in the control table: one holder item per key (`mutex#<key>`), a waiting line per
key (`mutexq#<key>`, sorted by arrival), and per run the keys it holds
(`mutexheld#<run>`), so a run's end releases them all.

Taking a lock is one transaction: the holder item created (or found naming the same
holder), the holder's own line item removed and its held item written; so there is
never a second holder, and the line only moves forward. Releasing is the reverse,
guarded by the holder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import (
    Sk,
    lock_item_key,
    lock_line_key,
    lock_waiter_sk,
    locks_held_key,
    sk_of,
)
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["Holder", "LockStore", "Waiter"]


@dataclass(frozen=True)
class Holder:
    holder: str
    run_id: str
    since: float


@dataclass(frozen=True)
class Waiter:
    """One place in a lock's line: who (`holder`), of which run, and the row to poke
    when its turn comes (a YAML step's row, or a durable run's driver)."""

    holder: str
    run_id: str
    row: str
    arrived: float
    sk: Sk


class LockStore:
    def __init__(self, control: Control, runs_table: str) -> None:
        self.control = control
        self.ddb = control.ddb
        self.table = control.table
        self.runs = runs_table

    def holder(self, key: str, now: float) -> Holder | None:
        item = self.control.get(lock_item_key(key), now=now)
        if item is None:
            return None
        return Holder(item["holder"]["S"], item["run_id"]["S"], float(item["since"]["N"]))

    def line(self, key: str, now: float, limit: int = 2) -> list[Waiter]:
        """The first `limit` waiting for the lock, in arrival order."""
        out = []
        for item in self.control.query(lock_line_key(key), now=now, limit=limit):
            doc = json.loads(item["doc"]["S"])
            out.append(Waiter(doc["holder"], doc["run_id"], doc["row"], float(doc["arrived"]),
                              sk_of(item)))
        return out

    def join(self, key: str, holder: str, run_id: str, row: str, arrived: float,
             now: float) -> None:
        """Take a place in the lock's line (again: a no-op)."""
        self.control.put_new(lock_line_key(key), lock_waiter_sk(arrived, holder), now=now,
                             doc={"holder": holder, "run_id": run_id, "row": row,
                                  "arrived": arrived})

    def take(self, key: str, holder: str, run_id: str, arrived: float, now: float) -> bool:
        """Take the free lock for `holder` (True: it holds it now, or held it already)."""
        writes = [
            {"Put": {"TableName": self.table, "Item": {
                **Control.key(lock_item_key(key)), "holder": {"S": holder},
                "run_id": {"S": run_id}, "since": num(now)},
                "ConditionExpression": "attribute_not_exists(pk) OR holder = :me",
                "ExpressionAttributeValues": {":me": {"S": holder}}}},
            {"Put": {"TableName": self.table, "Item": {
                **Control.key(locks_held_key(run_id), _held_sk(key)),
                "doc": {"S": dumps({"key": key, "holder": holder})}}}},
            {"Delete": {"TableName": self.table,
                        "Key": Control.key(lock_line_key(key),
                                           lock_waiter_sk(arrived, holder))}},
            # The run's end then releases what it holds (RunRecord.holds_locks).
            {"Update": {"TableName": self.runs, "Key": {"run_id": {"S": run_id}},
                        "UpdateExpression": "SET holds_locks = :t",
                        "ConditionExpression": "attribute_exists(run_id)",
                        "ExpressionAttributeValues": {":t": {"BOOL": True}}}},
        ]
        try:
            with _translate(f"lock {key}: take for {holder}"):
                self.ddb.transact_write_items(TransactItems=writes)
        except ConditionFailed:
            return False
        return True

    def release(self, key: str, holder: str, run_id: str) -> bool:
        """Free the lock if `holder` holds it (False: it did not; nothing changed but the
        run's note that it held it)."""
        writes = [
            {"Delete": {"TableName": self.table, "Key": Control.key(lock_item_key(key)),
                        "ConditionExpression": "holder = :me",
                        "ExpressionAttributeValues": {":me": {"S": holder}}}},
            {"Delete": {"TableName": self.table,
                        "Key": Control.key(locks_held_key(run_id), _held_sk(key))}},
        ]
        try:
            with _translate(f"lock {key}: release by {holder}"):
                self.ddb.transact_write_items(TransactItems=writes)
        except ConditionFailed:
            self.control.delete(locks_held_key(run_id), _held_sk(key))
            return False
        return True

    def leave(self, key: str, waiter: Waiter) -> None:
        """Drop a place in the line (its run has ended)."""
        self.control.delete(lock_line_key(key), waiter.sk)

    def held_by(self, run_id: str, now: float) -> list[tuple[str, str]]:
        """(key, holder) of every lock the run holds."""
        out = []
        for item in self.control.query(locks_held_key(run_id), now=now, limit=1000):
            doc: dict[str, Any] = json.loads(item["doc"]["S"])
            out.append((str(doc["key"]), str(doc["holder"])))
        return out


def _held_sk(key: str) -> Sk:
    return Sk(key)
