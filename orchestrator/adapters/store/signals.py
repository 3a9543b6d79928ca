"""A durable run's signals, in the steps table under the run's partition (see journal.py
for the sort keys): each signal queued until a wait takes it, and a marker of its id so a
resend queues nothing."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import ms_key
from orchestrator.adapters.store.journal import SIGNAL_IDS, signal_prefix
from orchestrator.adapters.store.tables import Tables, step_key
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["SignalStore"]


class SignalStore(Tables):
    """Queue, take and give back a durable run's signals."""

    def queue_signal(self, run_id: str, name: str, payload: Any, signal_id: str,
                     now: float, *, also: tuple[dict[str, Any], ...] = ()) -> bool:
        """Queue a signal (False: one with this id was queued already, or a guard of
        `also` failed). The signal and a marker of its id are written in one transaction
        guarded by the marker: the queue is ordered by time, so the id alone cannot be
        the signal's key. `also`: more writes of the same transaction (a hook's use, on
        another table): all of them are written, or none."""
        expires = num(now + self.step_retention)
        item = {
            **step_key(run_id, f"{signal_prefix(name)}{ms_key(now)}#{signal_id}"),
            "doc": {"S": dumps({"id": signal_id, "payload": payload, "at": round(now, 3)})},
            "expires_at": expires,
        }
        marker = {**step_key(run_id, f"{SIGNAL_IDS}{name}#{signal_id}"), "expires_at": expires}
        try:
            with _translate(f"signal {run_id}/{name}: queue"):
                self.ddb.transact_write_items(TransactItems=[
                    {"Put": {"TableName": self.steps, "Item": marker,
                             "ConditionExpression": "attribute_not_exists(step)"}},
                    {"Put": {"TableName": self.steps, "Item": item}},
                    *also,
                ])
        except ConditionFailed:
            return False
        return True

    def signal_sent(self, run_id: str, name: str, signal_id: str) -> bool:
        with _translate(f"signal {run_id}/{name}: id"):
            item = self.ddb.get_item(
                TableName=self.steps, Key=step_key(run_id, f"{SIGNAL_IDS}{name}#{signal_id}"),
                ConsistentRead=True).get("Item")
        return item is not None

    def signal_ids(self, run_id: str, name: str) -> set[str]:
        return {s["id"] for s in self._signals(run_id, name, unconsumed=False)}

    def _signals(self, run_id: str, name: str, *, unconsumed: bool) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND begins_with(step, :p)",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":p": {"S": signal_prefix(name)}},
            "ConsistentRead": True,
        }
        out: list[dict[str, Any]] = []
        while True:
            with _translate(f"signals {run_id}/{name}"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                doc = json.loads(item["doc"]["S"])
                doc["key"] = item["step"]["S"]
                doc["consumed"] = item.get("taken_by", {}).get("S")
                if not unconsumed or doc["consumed"] is None:
                    out.append(doc)
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def take_signal(self, run_id: str, name: str, wait_id: str) -> dict[str, Any] | None:
        """The oldest signal `name` not consumed by another wait, now consumed by
        `wait_id` (a conditional write: two waits never take the same signal; taking it
        again for the same wait is a no-op). None: there is none."""
        for doc in self._signals(run_id, name, unconsumed=False):
            if doc["consumed"] == wait_id:
                return doc
            if doc["consumed"] is not None:
                continue
            try:
                with _translate(f"signal {run_id}/{name}: consume"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=step_key(run_id, doc["key"]),
                        UpdateExpression="SET taken_by = :w",
                        ConditionExpression="attribute_not_exists(taken_by) OR taken_by = :w",
                        ExpressionAttributeValues={":w": {"S": wait_id}},
                    )
            except ConditionFailed:
                continue  # another wait took it first
            return doc
        return None

    def untake_signal(self, run_id: str, key: str, wait_id: str) -> None:
        """Give back a signal a wait took whose outcome turned out to be another."""
        try:
            with _translate(f"signal {run_id}: give back"):
                self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, key),
                    UpdateExpression="REMOVE taken_by",
                    ConditionExpression="taken_by = :w",
                    ExpressionAttributeValues={":w": {"S": wait_id}},
                )
        except ConditionFailed:
            pass
