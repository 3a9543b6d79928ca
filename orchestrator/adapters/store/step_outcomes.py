"""Step outcomes: the guarded writes that end an attempt with its answer: a success
(`record_success`, or `put_success`, one PutItem of the whole row in the common case) and
a retry (`record_retry`). The writes that end a step without its success are
step_stops.py's."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry, summed
from orchestrator.adapters.store.codec import history_entry, num, step_to_item
from orchestrator.adapters.store.step_writes import StepWrites
from orchestrator.adapters.store.tables import (
    history_clause,
    short_error,
    status_guard,
    status_set,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, StepStatus
from orchestrator.errors import Code
from orchestrator.strict_json import dumps

__all__ = ["StepOutcomes"]


def skip_doc(reason: str) -> dict[str, Any]:
    """What a step skipped by its condition shows where a failure shows its error."""
    return {"code": Code.CONDITION_FALSE.value, "message": reason}


class StepOutcomes(StepWrites):
    """The writes that end an attempt with its answer: a success or a retry."""

    def record_success(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        output_json: str | None,
        output_ref: str | None,
        size: int,
        now: float,
        keep_wake: bool = False,
        skipped: str | None = None,
    ) -> StepRecord:
        """The full write of a success (the common case, a row with no flag, is
        `put_success`). `keep_wake`: leave the claim's wake (its lease's end) as it is,
        for a step whose follow-ups (its dependants' promotions) are checked then: the
        row stays where it is in the wake index, which costs no index write (moving it
        costs two). `skipped`: the step's condition was false: it ends `skipped` for
        that reason, and is otherwise recorded (and followed up) as a success."""
        move = STEP_MOVES["skip-if" if skipped else "succeed"]
        values: dict[str, Any] = {
            ":now": num(now),
            ":exp": num(now + self.step_retention),
            ":size": num(size),
        }
        if output_ref is not None:
            sets = "output_ref = :ref"
            values[":ref"] = {"S": output_ref}
        else:
            sets = "#out = :out"
            values[":out"] = {"S": output_json or "null"}
        hist = (history_clause(values, now, "step.skipped", attempt=attempt, reason=skipped)
                if skipped else
                history_clause(values, now, "step.succeeded", attempt=attempt, bytes=size))
        if skipped:
            sets += ", #err = :err"
            values[":err"] = {"S": dumps(skip_doc(skipped))}
        update = (
            f"SET {status_set(move, values)}, {sets}, output_size = :size, finished_at = :now,"
            f" expires_at = :exp,{'' if keep_wake else ' wake_at = :now,'}"
            f" {hist}"
            f" REMOVE lease_owner, lease_until{'' if skipped else ', #err'}"
        )
        names = {"#err": "error", "#h": "history"}
        if output_ref is None:
            names["#out"] = "output"
        return self._finish_attempt(
            run_id, step, attempt, owner, update, values, move, names=names,
            mine={"attempt": num(attempt), "finished_at": values[":now"]},
        )

    def put_success(
        self, row: StepRecord, *, output_json: str | None, output_ref: str | None,
        size: int, now: float, keep_wake: bool = False, skipped: str | None = None,
    ) -> StepRecord:
        """A success of a row with no flag, as one PutItem of the whole row: `row` is the row
        as its claim answered it (every attribute of it), moved on as the update would.
        The guard is the plain one (this attempt, under this lease, no flag): every other
        write to a claimed row sets a flag or takes the lease, so the row put is the row
        as it stands. In the emulator a put is a fraction of an update's cost (no
        expression to evaluate). ConditionFailed when the guard fails: the caller makes
        the full write, which also knows this write's own earlier landing."""
        with carry(row.run_id, "dynamodb.PutItem") as counts:
            return self._put_success(row, output_json=output_json, output_ref=output_ref,
                                     size=size, now=now, keep_wake=keep_wake,
                                     requests=summed(row.requests, counts), skipped=skipped)

    def _put_success(
        self, row: StepRecord, *, output_json: str | None, output_ref: str | None,
        size: int, now: float, keep_wake: bool, requests: dict[str, int],
        skipped: str | None = None,
    ) -> StepRecord:
        move = STEP_MOVES["skip-if" if skipped else "succeed"]
        entry = (history_entry(now, "step.skipped", attempt=row.attempt, reason=skipped)
                 if skipped else
                 history_entry(now, "step.succeeded", attempt=row.attempt, bytes=size))
        done = replace(
            row, status=StepStatus.SKIPPED if skipped else StepStatus.SUCCESS, finished_at=now,
            lease_owner=None, lease_until=None, error=skip_doc(skipped) if skipped else None,
            has_output=False, output=None,
            output_ref=None,
            output_size=size, expires_at=now + self.step_retention,
            wake_at=row.wake_at if keep_wake else now, count_me=False, stopping=False,
            history=(*row.history, json.loads(entry["S"])), requests=requests,
        )
        item = step_to_item(done)
        if output_ref is not None:
            item["output_ref"] = {"S": output_ref}
        else:
            item["output"] = {"S": output_json or "null"}
        values: dict[str, Any] = {":n": num(row.attempt), ":o": {"S": row.lease_owner or ""}}
        cond = (f"{status_guard(move, values)} AND attempt = :n AND lease_owner = :o"
                " AND attribute_not_exists(stopping) AND attribute_not_exists(count_me)")
        with _translate(f"step {row.run_id}/{row.step}: {move.name} (attempt {row.attempt})"):
            self.ddb.put_item(TableName=self.steps, Item=item, ConditionExpression=cond,
                              ExpressionAttributeNames={"#s": "status"},
                              ExpressionAttributeValues=values)
        return replace(done, has_output=True, output_ref=output_ref)

    def record_retry(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        next_attempt: int,
        due_at: float,
        error: dict[str, Any],
        now: float,
        expired_before: float | None = None,
    ) -> StepRecord:
        move = STEP_MOVES["retry"]
        values = {":next": num(next_attempt), ":due": num(due_at), ":err": {"S": dumps(error)},
                  ":wk": num(due_at + self.wake.redispatch_after)}
        hist = history_clause(
            values, now, "step.retrying", attempt=attempt, due_at=round(due_at, 3),
            error=short_error(error),
        )
        # The status stays `dispatched` (the table's dispatched -> dispatched): said
        # explicitly, as every move's write says what it sets.
        return self._finish_attempt(
            run_id,
            step,
            attempt,
            owner,
            f"SET {status_set(move, values)}, attempt = :next, due_at = :due, ready_at = :due,"
            f" wake_at = :wk, #err = :err, {hist} REMOVE lease_owner, lease_until, resends",
            values,
            move,
            expired_before=expired_before,
            names={"#err": "error", "#h": "history"},
            mine={"attempt": values[":next"], "due_at": values[":due"]},
        )
