"""Step stops: the guarded writes of a step that ends without succeeding, or is held back
because its run is stopping: a final failure (with its run's stop instant, under
`halt`), a skip, the `stopping` flag of a step in flight, a finishing run's flag on the
steps it still waits for, and an attempt given up at its start check.

Each write names its move in `engine.states.STEP_MOVES`, as the other step writes do
(step_writes.py, step_promotions.py, step_outcomes.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry
from orchestrator.adapters.store.codec import num, step_from_item
from orchestrator.adapters.store.step_writes import StepWrites, attempt_guard, creating
from orchestrator.adapters.store.tables import (
    history_clause,
    short_error,
    status_guard,
    status_set,
    step_key,
    with_requests,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, Move, StepStatus
from orchestrator.errors import Code, ConditionFailed, error_doc
from orchestrator.strict_json import dumps

__all__ = ["StepStops"]


def _unstarted(history: Sequence[dict[str, Any]], attempt: int) -> list[dict[str, Any]]:
    """A row's history without the `step.started` entry of `attempt` (its last), nor
    the `step.stopping` entries after it: a stop pass that found the attempt claimed
    flagged it as in flight, and it never was."""
    out = list(history)
    for i in range(len(out) - 1, -1, -1):
        e = out[i]
        if e.get("type") == "step.started" and int(e.get("attempt") or 0) == attempt:
            out = out[:i] + [e for e in out[i + 1:] if e.get("type") != "step.stopping"]
            break
    return out


class StepStops(StepWrites):
    """Conditional writes that end or hold back a step without its success."""

    def record_failure(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        error: dict[str, Any],
        now: float,
        expired_before: float | None = None,
        stop_run: bool = False,
    ) -> StepRecord:
        """A step's final failure. `stop_run` (its run halts on failure): the same
        transaction sets the run's stop instant (`stop_at`), so that no step whose start
        check comes after this commit is called, whoever makes the halt's pass and however
        late (DESIGN.md, invariant 5)."""
        move = STEP_MOVES["fail"]
        values = {
            ":err": {"S": dumps(error)},
            ":now": num(now),
            ":exp": num(now + self.step_retention),
        }
        hist = history_clause(values, now, "step.failed", attempt=attempt, error=short_error(error))
        update = (
            f"SET {status_set(move, values)}, #err = :err, finished_at = :now, expires_at = :exp,"
            f" wake_at = :now, {hist}"
            " REMOVE lease_owner, lease_until"
        )
        names = {"#err": "error", "#h": "history"}
        if stop_run:
            failed = self._fail_and_stop(run_id, step, attempt, owner, update, values, move,
                                         expired_before, names)
            if failed is not None:
                return failed
        # Not halting, or the transaction's guard failed: the plain write tells this
        # write's own earlier landing (an answer lost, the request sent again) from a
        # rival's, and records a failure whose run is gone.
        return self._finish_attempt(
            run_id, step, attempt, owner, update, values, move,
            expired_before=expired_before, names=names,
            mine={"attempt": num(attempt), "finished_at": values[":now"]},
        )

    def _fail_and_stop(self, run_id: str, step: str, attempt: int, owner: str, update: str,
                       values: dict[str, Any], move: Move, expired_before: float | None,
                       names: dict[str, str]) -> StepRecord | None:
        """The failure and the run's stop instant in one transaction; the failed row
        (read back: a transaction returns nothing), or None if a guard did not hold."""
        values, cond = attempt_guard(values, move, attempt, owner, expired_before)
        key = step_key(run_id, step)
        names = {"#s": "status", **names}
        try:
            # The attempt's request counts ride on its failure (adapters/metering.py).
            with carry(run_id, "dynamodb.TransactWriteItems") as counts, _translate(
                    f"step {run_id}/{step}: fail and stop the run (attempt {attempt})"):
                self.ddb.transact_write_items(TransactItems=[
                    {"Update": {
                        "TableName": self.steps, "Key": key,
                        "UpdateExpression": with_requests(update, counts, names, values),
                        "ConditionExpression": cond,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values}},
                    {"Update": {
                        "TableName": self.runs, "Key": {"run_id": {"S": run_id}},
                        "UpdateExpression": "SET stop_at = if_not_exists(stop_at, :now)",
                        "ConditionExpression": "attribute_exists(run_id)",
                        "ExpressionAttributeValues": {":now": values[":now"]}}},
                ])
        except ConditionFailed:
            return None
        with _translate(f"step {run_id}/{step}: read"):
            item = self.ddb.get_item(TableName=self.steps, Key=key,
                                     ConsistentRead=True).get("Item")
        if item is None:  # expired meanwhile: the row as this write left it is enough
            return None
        return step_from_item(item)

    def skip(
        self,
        run_id: str,
        step: str,
        statuses: Sequence[StepStatus],
        reason: str,
        now: float,
        *,
        plan: StepRecord | None = None,
    ) -> StepRecord | None:
        """Mark a step that has not started (no lease) as skipped; None if it has.
        `plan`: the row as planned, created skipped if the start left it out."""
        move = STEP_MOVES["skip"]
        values: dict[str, Any] = {
            ":why": {"S": dumps(error_doc(Code.SKIPPED, reason))},
            ":now": num(now),
            ":exp": num(now + self.step_retention),
        }
        guard = status_guard(move, values, only=statuses)
        hist = history_clause(values, now, "step.skipped", reason=reason[:300])
        names = {"#s": "status", "#err": "error", "#h": "history"}
        update = (f"SET {status_set(move, values)}, #err = :why, finished_at = :now,"
                  f" expires_at = :exp, wake_at = :now, {hist}")
        if plan is not None and plan.status not in statuses:
            plan = None  # a row its start left out is as planned: blocked, or a root ready
        if plan is not None:
            update += ", attempt = if_not_exists(attempt, :zero)"
            values[":zero"] = num(0)
        update, guard = creating(plan, update, guard, values, names)
        attrs = self._guarded(
            f"step {run_id}/{step}: skip",
            Key=step_key(run_id, step),
            UpdateExpression=f"{update} REMOVE due_at",
            ConditionExpression=f"{guard} AND attribute_not_exists(lease_owner)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return None if attrs is None else step_from_item(attrs)

    def flag_counted(self, run_id: str, step: str, *, plan: StepRecord | None = None) -> bool:
        """Mark a step still in flight so that its terminal transition counts (once).
        `plan`: the row as planned, created as planned (and flagged) if the start left
        it out."""
        values: dict[str, Any] = {":t": {"BOOL": True}}
        guard = status_guard(STEP_MOVES["flag-counted"], values)
        names = {"#s": "status"}
        update = "SET count_me = :t"
        if plan is not None:
            update += (", #s = if_not_exists(#s, :pst), attempt = if_not_exists(attempt, :pat),"
                       " ready_at = if_not_exists(ready_at, :prd)")
            values.update({":pst": {"S": plan.status.value}, ":pat": num(plan.attempt),
                           ":prd": num(plan.ready_at or 0.0)})
        update, guard = creating(plan, update, guard, values, names)
        return self._guarded(
            f"step {run_id}/{step}: flag",
            Key=step_key(run_id, step),
            UpdateExpression=update,
            ConditionExpression=f"attribute_not_exists(count_me) AND {guard}",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        ) is not None

    def mark_stopping(self, run_id: str, step: str, now: float) -> bool:
        """Flag a step running under a lease in a stopping run: it lands, but its claim
        and retry guards refuse another attempt. False if it holds no lease (any more)."""
        values: dict[str, Any] = {":t": {"BOOL": True}}
        guard = status_guard(STEP_MOVES["stop-in-flight"], values)
        hist = history_clause(values, now, "step.stopping")
        return self._guarded(
            f"step {run_id}/{step}: stop in flight",
            Key=step_key(run_id, step),
            UpdateExpression=f"SET stopping = :t, {hist}",
            ConditionExpression=f"{guard} AND attribute_exists(lease_owner)"
            " AND attribute_not_exists(stopping)",
            ExpressionAttributeNames={"#s": "status", "#h": "history"},
            ExpressionAttributeValues=values,
        ) is not None

    def abandon(self, run_id: str, step: str, attempt: int, owner: str, reason: str,
                now: float, *, unstart: StepRecord | None = None) -> StepRecord | None:
        """Give up a claimed attempt (its run is stopping): the lease holder skips the
        step. None if the lease is no longer ours.

        `unstart`: the row as its claim left it, when the attempt's start check found the
        run stopping. The attempt never started, so its `step.started` entry goes, and
        the history reads as if the claim had been refused (the entries are rewritten,
        guarded by their count: a stop pass may have flagged the row meanwhile)."""
        move = STEP_MOVES["abandon"]
        for _ in range(3):
            values: dict[str, Any] = {
                ":why": {"S": dumps(error_doc(Code.SKIPPED, reason))},
                ":now": num(now),
                ":exp": num(now + self.step_retention),
                ":n": num(attempt),
                ":o": {"S": owner},
            }
            guard = f"{status_guard(move, values)} AND attempt = :n AND lease_owner = :o"
            hist = history_clause(values, now, "step.skipped", reason=reason[:300])
            removes = "lease_owner, lease_until"
            if unstart is not None:
                kept = _unstarted(unstart.history, attempt)
                values[":h"]["L"][:0] = [{"S": dumps(e)} for e in kept]
                values[":len"] = num(len(unstart.history))
                del values[":nil"]
                hist = "#h = :h"
                guard += " AND size(#h) = :len"
                if unstart.started_at == unstart.attempt_started:  # its claim's stamp
                    removes += ", started_at"
            attrs = self._guarded(
                f"step {run_id}/{step}: abandon",
                Key=step_key(run_id, step),
                UpdateExpression=f"SET {status_set(move, values)}, #err = :why,"
                f" finished_at = :now, expires_at = :exp, wake_at = :now, {hist}"
                f" REMOVE {removes}",
                ConditionExpression=guard,
                ExpressionAttributeNames={"#s": "status", "#err": "error", "#h": "history"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            if attrs is not None:
                return step_from_item(attrs)
            if unstart is None:
                return None
            # The lease is gone, or the history grew (a stop pass flagged the row): read
            # it again and tell which.
            with _translate(f"step {run_id}/{step}: read"):
                item = self.ddb.get_item(TableName=self.steps, Key=step_key(run_id, step),
                                         ConsistentRead=True).get("Item")
            if item is None:
                return None
            unstart = step_from_item(item)
            if unstart.attempt != attempt or unstart.lease_owner != owner:
                return None
        return None
