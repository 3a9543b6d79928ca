"""Step writes: what the guarded writes that move one step row along its states share
(`StepWrites`: one guarded UpdateItem, the guard of an attempt's outcome, a left-out
row's creation, the `Lease` a claim carries), and the writes of a claimed attempt's
life: its claim and its redispatch. The moves are composed by what they do:
step_promotions.py (blocked -> ready), step_outcomes.py (a success or a retry),
step_stops.py (a final failure, a skip, a stop).

Each write names its move in `engine.states.STEP_MOVES`: the statuses its guard accepts
and the status it sets come from there, and the moves are checked against the one
transition table when they are defined.

Each write names the state it expects (status, attempt, lease owner). A duplicate, late
or reordered message finds that guard false: the write raises ConditionFailed, or
returns None / False where "someone else already moved the row" is an expected answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry
from orchestrator.adapters.store.codec import history_entry, num, step_from_item, step_to_item
from orchestrator.adapters.store.tables import (
    HISTORY,
    Item,
    Tables,
    history_clause,
    status_guard,
    status_set,
    step_key,
    with_requests,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, Move, StepStatus
from orchestrator.engine.wakes import resend_wake
from orchestrator.errors import ConditionFailed

__all__ = ["PLANNED_ATTRS", "Lease", "StepWrites", "attempt_guard", "creating"]


@dataclass(frozen=True)
class Lease:
    """A claim on one attempt. The row's own timeout is added to `base` in the write
    (`lease_until = timeout + base`), so a lease always outlives the HTTP call it covers."""

    owner: str
    base: float


# What a row's first write sets when the start left the row out (engine.plan.unwritten).
PLANNED_ATTRS = ("backend", "route", "deps", "dependants", "payload", "max_attempts", "timeout",
           "retry_strategy", "retry_delay", "retry_max_delay", "output_size", "wake_shard")


def creating(plan: StepRecord | None, update: str, guard: str, values: dict[str, Any],
              names: dict[str, str]) -> tuple[str, str]:
    """`update` and `guard` made to also create the row, as planned, where the start left
    it out: the guard holds on no row, and the update sets what the row would have been
    written with, each attribute only where the row has none (a row that exists keeps
    its own: a caller may pass a row read without its payload). With no `plan`, both as
    they were."""
    if plan is None:
        return update, guard
    assert update.startswith("SET "), update
    item = step_to_item(plan)
    sets = []
    for i, key in enumerate(PLANNED_ATTRS):
        values[f":c{i}"] = item[key]
        names[f"#c{i}"] = key
        sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
    return (f"SET {', '.join(sets)}, {update[4:]}",
            f"(attribute_not_exists(#s) OR {guard})")


def attempt_guard(values: dict[str, Any], move: Move, attempt: int, owner: str,
                   expired_before: float | None) -> tuple[dict[str, Any], str]:
    """The guard of an attempt's outcome: its move's statuses, exactly that attempt, under
    `owner`'s lease (one that expired before `expired_before`, for a sweep's)."""
    values = {**values, ":n": num(attempt), ":o": {"S": owner}}
    cond = f"{status_guard(move, values)} AND attempt = :n AND lease_owner = :o"
    if expired_before is not None:
        cond += " AND lease_until < :expired"
        values[":expired"] = num(expired_before)
    return values, cond


class StepWrites(Tables):
    """Conditional state changes of step rows."""

    def _guarded(self, what: str, **request: Any) -> Item | None:
        """One conditional UpdateItem on a step row: its attributes, or None when the
        guard did not hold (someone else already moved the row)."""
        try:
            with _translate(what):
                resp = self.ddb.update_item(TableName=self.steps, **request)
        except ConditionFailed:
            return None
        attrs: Item = resp.get("Attributes", {})
        return attrs

    def claim(self, run_id: str, step: str, attempt: int, lease: Lease, now: float) -> StepRecord:
        """Take the lease on one attempt. Exactly one caller wins per attempt, and none
        on a step of a stopping run."""
        move = STEP_MOVES["claim"]
        values: dict[str, Any] = {
            ":o": {"S": lease.owner},
            ":lu": num(lease.base),
            ":now": num(now),
            ":n": num(attempt),
            ":nil": {"L": []},
            ":h": {"L": [history_entry(now, "step.started", attempt=attempt)]},
        }
        guard = status_guard(move, values)
        try:
            with _translate(f"step {run_id}/{step}: claim attempt {attempt}"):
                resp = self.ddb.update_item(
                    TableName=self.steps,
                    Key=step_key(run_id, step),
                    UpdateExpression=(
                        f"SET {status_set(move, values)}, lease_owner = :o,"
                        " lease_until = #t + :lu, wake_at = #t + :lu,"
                        " started_at = if_not_exists(started_at, :now), attempt_started = :now,"
                        f" {HISTORY} REMOVE due_at"
                    ),
                    ConditionExpression=(
                        f"attempt = :n AND attribute_not_exists(lease_owner) AND {guard}"
                        " AND attribute_not_exists(stopping)"
                    ),
                    ExpressionAttributeNames={"#s": "status", "#t": "timeout", "#h": "history"},
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ConditionFailed as exc:
            # Our own claim, landed once already (its answer lost, the request resent).
            return step_from_item(self.landed(exc, move, {
                "attempt": values[":n"], "lease_owner": values[":o"],
                "attempt_started": values[":now"]}, self.steps, step_key(run_id, step)))
        return step_from_item(resp["Attributes"])

    def _finish_attempt(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        update: str,
        values: dict[str, Any],
        move: Move,
        *,
        expired_before: float | None = None,
        names: dict[str, str] | None = None,
        mine: Item,
    ) -> StepRecord:
        """An attempt's outcome, written by the lease holder of exactly that attempt.
        `mine`: attributes only this write sets, by which a guard that fails on the
        write's own earlier landing knows it (see tables.landed)."""
        values, cond = attempt_guard(values, move, attempt, owner, expired_before)
        what = move.name
        names = {"#s": "status", **(names or {})}
        # The attempt's request counts ride on its outcome's write (adapters/metering.py).
        with carry(run_id, "dynamodb.UpdateItem") as counts:
            update = with_requests(update, counts, names, values)
            try:
                with _translate(f"step {run_id}/{step}: {what} (attempt {attempt})"):
                    resp = self.ddb.update_item(
                        TableName=self.steps,
                        Key=step_key(run_id, step),
                        UpdateExpression=update,
                        ConditionExpression=cond,
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=values,
                        ReturnValues="ALL_NEW",
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    )
            except ConditionFailed as exc:
                # Our own write, landed once already (its answer was lost and botocore
                # sent it again): the outcome is recorded, and its follow-ups are still
                # ours.
                return step_from_item(self.landed(exc, move, mine, self.steps,
                                                  step_key(run_id, step)))
        return step_from_item(resp["Attributes"])

    def touch_dispatch(
        self, run_id: str, step: str, attempt: int, now: float, *, resends: int = 1,
        plan: StepRecord | None = None,
    ) -> bool:
        """Stamp a dispatch sent again for the `resends`-th time with its next wake, so
        the next sweeps do not send it again at once (engine.wakes.resend_wake).
        `plan`: a root as planned, created ready (with its planned history) if its start
        left it out and nobody claimed it yet."""
        values: dict[str, Any] = {
            ":n": num(attempt), ":k": num(resends),
            ":wk": num(resend_wake(resends, now, self.wake)),
        }
        guard = status_guard(STEP_MOVES["redispatch"], values)
        hist = history_clause(values, now, "step.redispatched", attempt=attempt)
        names = {"#s": "status", "#h": "history"}
        update = f"SET wake_at = :wk, resends = :k, {hist}"
        cond = f"attempt = :n AND attribute_not_exists(lease_owner) AND {guard}"
        if plan is not None and plan.status is StepStatus.READY:
            planned = step_to_item(plan)
            update += (", #s = if_not_exists(#s, :pst), ready_at = if_not_exists(ready_at, :prd),"
                       " attempt = if_not_exists(attempt, :n)")
            values.update({":pst": planned["status"], ":prd": num(plan.ready_at or now),
                           ":nil": planned.get("history", {"L": []})})
            update, cond = creating(plan, update, cond, values, names)
        return self._guarded(
            f"step {run_id}/{step}: redispatch",
            Key=step_key(run_id, step),
            UpdateExpression=update,
            ConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        ) is not None

    def stamp_expiry(self, run_id: str, step: str, expires_at: float) -> None:
        """Make a finished step row live as long as its run (rows that ran for longer
        than the retention, or were written before terminal writes stamped it)."""
        self._guarded(
            f"step {run_id}/{step}: expiry",
            Key=step_key(run_id, step),
            UpdateExpression="SET expires_at = :exp",
            ConditionExpression="attribute_exists(run_id)",
            ExpressionAttributeValues={":exp": num(expires_at)},
        )
