"""A debounced workflow's bursts in the control table (services/admission/debounce.py):

- the burst of one key (`debounce#<wf>#<key>`): the queued run the burst will start, and
  when the burst began; written with the run's creation in one transaction;
- the triggers a burst has taken, by their dedupe id (`debounced#<wf>#<id>`: an
  Idempotency-Key's run id, an event's or a webhook delivery's, a caller's run id): each
  written with the trigger's own write in one transaction, so a trigger delivered twice
  moves its burst once, and its repeat is answered with the burst's run."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Pk

__all__ = ["Bursts", "burst_key", "trigger_key"]


def burst_key(workflow: str, key: str) -> Pk:
    """A debounced workflow's burst for one key: the run the burst will start."""
    return Pk(f"debounce#{workflow}#{key}")


def trigger_key(workflow: str, trigger_id: str) -> Pk:
    """A trigger a burst of `workflow` took: the run it joined."""
    return Pk(f"debounced#{workflow}#{trigger_id}")


class Bursts:
    def __init__(self, control: Control) -> None:
        self.control = control

    def burst(self, pk: Pk, now: float) -> tuple[str, float] | None:
        """A burst: (its queued run, when it began); None if there is none."""
        item = self.control.get(pk, now=now)
        if item is None:
            return None
        return str(item["run_id"]["S"]), float(item["first_at"]["N"])

    def begin(self, pk: Pk, run_id: str, now: float, expires_at: float,
              replacing: str | None) -> dict[str, Any]:
        """The write that begins a burst (a TransactWriteItems item, with the run's
        creation): guarded on there being no live burst, or the one that ended."""
        put: dict[str, Any] = {"TableName": self.control.table, "Item": {
            **self.control.key(pk), "run_id": {"S": run_id}, "first_at": num(now),
            "expires_at": num(expires_at)}}
        if replacing is None:
            put["ConditionExpression"] = "attribute_not_exists(pk) OR expires_at <= :now"
            put["ExpressionAttributeValues"] = {":now": num(now)}
        else:
            put["ConditionExpression"] = "run_id = :old"
            put["ExpressionAttributeValues"] = {":old": {"S": replacing}}
        return {"Put": put}

    def taken(self, pk: Pk, now: float) -> str | None:
        """The run a trigger joined, if it was taken already."""
        item = self.control.get(pk, now=now)
        return None if item is None else str(item["run_id"]["S"])

    def take(self, pk: Pk, run_id: str, now: float, expires_at: float) -> dict[str, Any]:
        """The write that records a trigger as taken by `run_id`'s burst (a
        TransactWriteItems item, with the trigger's own write): once only."""
        return {"Put": {
            "TableName": self.control.table,
            "Item": {**self.control.key(pk), "run_id": {"S": run_id},
                     "expires_at": num(expires_at)},
            "ConditionExpression": "attribute_not_exists(pk) OR expires_at <= :now",
            "ExpressionAttributeValues": {":now": num(now)}}}
