"""A `fan_out` step's items in the control table: one item per index of the list
(`fanout#<run>#<step>`, `<index>`), holding its outcome: `ok` (its value), `failed` (its
error) or `retry` (its next attempt and when). An outcome is final once written as ok or
failed (a guarded write: a duplicate call's late answer changes nothing)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import fanout_item_sk, fanout_key
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["FanOutItems"]


class FanOutItems:
    def __init__(self, control: Control, retention: float) -> None:
        self.control = control
        self.ddb = control.ddb
        self.table = control.table
        self.retention = retention

    def outcomes(self, run_id: str, step: str) -> dict[int, dict[str, Any]]:
        """Every item's outcome so far, by index (strongly consistent, all pages)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table, "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": fanout_key(run_id, step)}},
            "ConsistentRead": True,
        }
        out: dict[int, dict[str, Any]] = {}
        while True:
            with _translate(f"fan_out {run_id}/{step}: read"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                out[int(item["sk"]["S"])] = json.loads(item["doc"]["S"])
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def record(self, run_id: str, step: str, index: int, outcome: dict[str, Any],
               now: float) -> bool:
        """Write an item's outcome unless a final one is there (False: it was)."""
        try:
            with _translate(f"fan_out {run_id}/{step}[{index}]: record"):
                self.ddb.put_item(
                    TableName=self.table,
                    Item={**Control.key(fanout_key(run_id, step), fanout_item_sk(index)),
                          "doc": {"S": dumps(outcome)}, "final": {"BOOL": outcome["status"]
                                                                  != "retry"},
                          "expires_at": num(now + self.retention)},
                    ConditionExpression="attribute_not_exists(pk) OR #f = :no",
                    ExpressionAttributeNames={"#f": "final"},  # a reserved word
                    ExpressionAttributeValues={":no": {"BOOL": False}})
        except ConditionFailed:
            return False
        return True
