"""Step writes: the guarded writes that move one step row along its states (claim,
promote, record a success or a retry, redispatch; the writes that end a step without its
success are step_stops.py's): UpdateItems, and two PutItems of a whole row (a left-out
row's first write, a plain success).

Each write names its move in `engine.states.STEP_MOVES`: the statuses its guard accepts
and the status it sets come from there, and the moves are checked against the one
transition table when they are defined.

Each write names the state it expects (status, attempt, lease owner). A duplicate, late
or reordered message finds that guard false: the write raises ConditionFailed, or
returns None / False where "someone else already moved the row" is an expected answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry, summed
from orchestrator.adapters.store.codec import history_entry, num, step_from_item, step_to_item
from orchestrator.adapters.store.tables import (
    HISTORY,
    Item,
    Tables,
    history_clause,
    short_error,
    status_guard,
    status_set,
    step_key,
    with_requests,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, Move, StepStatus
from orchestrator.engine.wakes import resend_wake
from orchestrator.errors import Code, ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["Lease", "StepWrites"]


def skip_doc(reason: str) -> dict[str, Any]:
    """What a step skipped by its condition shows where a failure shows its error."""
    return {"code": Code.CONDITION_FALSE.value, "message": reason}


@dataclass(frozen=True)
class Lease:
    """A claim on one attempt. The row's own timeout is added to `base` in the write
    (`lease_until = timeout + base`), so a lease always outlives the HTTP call it covers."""

    owner: str
    base: float


def _names(lease: Lease | None) -> dict[str, str]:
    names = {"#s": "status", "#h": "history"}
    if lease is not None:
        names["#t"] = "timeout"
    return names


# What a row's first write sets when the start left the row out (engine.plan.unwritten).
_STATIC = ("backend", "route", "deps", "dependants", "payload", "max_attempts", "timeout",
           "retry_strategy", "retry_delay", "retry_max_delay", "output_size", "wake_shard")


def _creating(plan: StepRecord | None, update: str, guard: str, values: dict[str, Any],
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
    for i, key in enumerate(_STATIC):
        values[f":c{i}"] = item[key]
        names[f"#c{i}"] = key
        sets.append(f"#c{i} = if_not_exists(#c{i}, :c{i})")
    return (f"SET {', '.join(sets)}, {update[4:]}",
            f"(attribute_not_exists(#s) OR {guard})")


def _returns(lease: Lease | None) -> str:
    """A promotion asks back the whole row only when it claims it too (the row runs
    next): moto's cost, and DynamoDB's bytes, grow with what a write returns."""
    return "ALL_NEW" if lease is not None else "UPDATED_NEW"


def _attempt_guard(values: dict[str, Any], move: Move, attempt: int, owner: str,
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

    def _promotion(
        self, lease: Lease | None, now: float, ready_at: float | None = None,
        plan: StepRecord | None = None,
    ) -> tuple[str, str, dict[str, Any]]:
        """(the SET clause, the status guard, their values) of a promotion. `ready_at`:
        when the step became ready, if earlier than this write (a claim from a message
        that said so). `plan`: the row as planned, if it may not be written yet (then
        the lease's end is computed here: the row may have no timeout to add it to)."""
        ready = now if ready_at is None else min(ready_at, now)
        values: dict[str, Any] = {":one": num(1), ":now": num(now), ":rdy": num(ready)}
        move = STEP_MOVES["promote" if lease is None else "promote+claim"]
        values[":wk"] = num(now + self.wake.redispatch_after)
        guard = status_guard(move, values)
        hist = history_clause(values, ready, "step.ready")
        if lease is None:
            del values[":now"]
            return (
                f"SET {status_set(move, values)}, attempt = :one, ready_at = :rdy,"
                f" wake_at = :wk, {hist}",
                guard, values,
            )
        # Promoted and claimed in one write: both transitions, in order.
        values[":h"]["L"].append(history_entry(now, "step.started", attempt=1))
        values.update({":o": {"S": lease.owner}, ":lu": num(lease.base)})
        del values[":wk"]
        until = "#t + :lu"
        if plan is not None:
            values[":lu"] = num(lease.base + plan.timeout)
            until = ":lu"
        return (
            f"SET {status_set(move, values)}, attempt = :one, ready_at = :rdy, lease_owner = :o,"
            f" lease_until = {until}, wake_at = {until}, started_at = :now,"
            f" attempt_started = :now, {hist}",
            guard, values,
        )

    def _create_promoted(
        self, plan: StepRecord, dep: str | None, lease: Lease | None, now: float,
        ready_at: float | None,
    ) -> StepRecord | None:
        """The promotion (and claim, under `lease`) of a row the start left out, as its
        first write: one PutItem of the whole row, guarded by its absence. It writes the
        same attributes as the creating update (`_creating` with `_promotion`) would, and
        needs no update expression evaluated (in the emulator, a third of the cost of a
        chain's step). The row, or None if it exists already: then the update, guarded
        by its status, decides (a repair or a stop wrote it, or another promoter won).
        `dep`: the dependency that made it ready; None for a root (`claim_planned`)."""
        ready = now if ready_at is None else min(ready_at, now)
        move = STEP_MOVES["promote" if lease is None else "promote+claim"]
        planned = step_to_item(plan)
        item: Item = {k: planned[k] for k in ("run_id", "step", *_STATIC)}
        assert move.target is not None
        item.update({"status": {"S": move.target.value}, "attempt": num(1),
                     "ready_at": num(ready)})
        if dep is not None:
            item["satisfied"] = {"SS": [dep]}
        history = [history_entry(ready, "step.ready")]
        if lease is None:
            item["wake_at"] = num(now + self.wake.redispatch_after)
            mine = {"wake_at": item["wake_at"], "ready_at": item["ready_at"]}
        else:
            history.append(history_entry(now, "step.started", attempt=1))
            until = num(lease.base + plan.timeout)
            item.update({"lease_owner": {"S": lease.owner}, "lease_until": until,
                         "wake_at": until, "started_at": num(now), "attempt_started": num(now)})
            mine = {"lease_owner": item["lease_owner"], "attempt_started": num(now)}
        item["history"] = {"L": history}
        key = step_key(plan.run_id, plan.step)
        try:
            with _translate(f"step {plan.run_id}/{plan.step}: {move.name} (first write)"):
                self.ddb.put_item(
                    TableName=self.steps, Item=item,
                    ConditionExpression="attribute_not_exists(#s)",
                    ExpressionAttributeNames={"#s": "status"},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ConditionFailed as exc:
            try:  # our own put, landed once already (its answer lost, the request resent)
                return step_from_item(self.landed(exc, move, mine, self.steps, key))
            except ConditionFailed:
                return None
        return step_from_item(item)

    def claim_planned(self, plan: StepRecord, lease: Lease, now: float,
                      ready_at: float | None) -> StepRecord | None:
        """Claim attempt 1 of a root its start left out (engine.plan), ready since
        `ready_at`, in the write that creates its row: one PutItem guarded by its
        absence. None if the row exists (a sweep's redispatch or a stop pass wrote it,
        or another worker claimed it): the caller's plain claim decides then."""
        return self._create_promoted(plan, None, lease, now, ready_at)

    def satisfy(
        self, run_id: str, step: str, dep: str, ndeps: int, lease: Lease | None, now: float,
        *, ready_at: float | None = None, plan: StepRecord | None = None,
    ) -> StepRecord | None:
        """Record that `dep` succeeded. Returns the row if this call promoted the step
        (blocked -> ready, or straight to dispatched under `lease`), else None: the whole
        row under a lease (it runs next), otherwise only what the promotion wrote.
        `plan`: the row as planned, for a step the start may have left out (it is created
        by this write).

        Adding `dep` to the `satisfied` set is idempotent, so a duplicated completion
        counts once; the promotion is a compare-and-swap, so exactly one caller wins.
        A wide join is counted apart from its row, never here (join_counts.py)."""
        key = step_key(run_id, step)
        if ndeps == 1 and plan is not None:
            created = self._create_promoted(plan, dep, lease, now, ready_at)
            if created is not None:
                return created
            plan = None  # the row exists (a repair or a stop wrote it): update it
        if ndeps == 1:
            # The only dependency: the update that records it is the promotion itself.
            update, guard, values = self._promotion(lease, now, ready_at, plan)
            values[":dep"] = {"SS": [dep]}
            names = _names(lease if plan is None else None)
            update, guard = _creating(plan, update, guard, values, names)
            attrs = self._guarded(
                f"step {run_id}/{step}: promote",
                Key=key,
                UpdateExpression=update + " ADD satisfied :dep",
                ConditionExpression=guard,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues=_returns(lease),
            )
            return None if attrs is None else step_from_item({**key, **attrs})
        counting: dict[str, Any] = {":dep": {"SS": [dep]}, ":d": {"S": dep}}
        guard = status_guard(STEP_MOVES["satisfy"], counting)
        try:
            with _translate(f"step {run_id}/{step}: satisfy {dep}"):
                resp = self.ddb.update_item(
                    TableName=self.steps,
                    Key=key,
                    UpdateExpression="ADD satisfied :dep",
                    ConditionExpression=f"{guard} AND NOT contains(satisfied, :d)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=counting,
                    # A known in-degree needs only the set back, not the whole join row.
                    ReturnValues="UPDATED_NEW" if ndeps else "ALL_NEW",
                )
            attrs = resp["Attributes"]
            count = len(attrs["satisfied"]["SS"])
            if not ndeps:
                ndeps = len(step_from_item(attrs).deps)
        except ConditionFailed:
            # Already counted (a duplicate) or no longer blocked. A crash may have
            # fallen between the count and the promotion: try the promotion anyway.
            count = ndeps
        if count < ndeps:
            return None
        return self.promote(run_id, step, ndeps, lease, now)

    def promote(
        self,
        run_id: str,
        step: str,
        ndeps: int,
        lease: Lease | None,
        now: float,
        *,
        all_deps: Sequence[str] | None = None,
        plan: StepRecord | None = None,
        counted: bool = False,
    ) -> StepRecord | None:
        """blocked -> ready (or dispatched under `lease`) once every dependency counted.

        The sweeper passes `all_deps` when it has seen every dependency succeed; the
        set is then completed in the same write (and, with `plan`, the row created if
        the start left it out). `counted`: the caller saw the count complete apart from
        the row (a wide join's, join_counts.py), so only the status guards the write."""
        if all_deps is None:
            plan = None  # a count that is not there cannot be complete: the row exists
        update, cond, values = self._promotion(lease, now, plan=plan)
        if all_deps is not None:
            update += ", satisfied = :all"
            values[":all"] = {"SS": list(all_deps)}
        elif not counted:
            cond += " AND size(satisfied) = :nd"
            values[":nd"] = num(ndeps)
        names = _names(lease if plan is None else None)
        update, cond = _creating(plan, update, cond, values, names)
        key = step_key(run_id, step)
        attrs = self._guarded(
            f"step {run_id}/{step}: promote",
            Key=key,
            UpdateExpression=update,
            ConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues=_returns(lease),
        )
        return None if attrs is None else step_from_item({**key, **attrs})

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
        values, cond = _attempt_guard(values, move, attempt, owner, expired_before)
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
            update, cond = _creating(plan, update, cond, values, names)
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
