"""Step promotions: the guarded writes that move a step from blocked to ready (or
straight to dispatched, under a lease) once its dependencies succeeded: a dependency
counted in the row's `satisfied` set (`satisfy`), the promotion itself (`promote`), and
a row the start left out, created promoted by its first write (`claim_planned`). A wide
join counts apart from its row (join_counts.py) and promotes here.

Adding a dependency to the set is idempotent and the promotion a compare-and-swap, so a
duplicated completion counts once and exactly one caller promotes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import history_entry, num, step_from_item, step_to_item
from orchestrator.adapters.store.step_writes import PLANNED_ATTRS, Lease, StepWrites, creating
from orchestrator.adapters.store.tables import (
    Item,
    history_clause,
    status_guard,
    status_set,
    step_key,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES
from orchestrator.errors import ConditionFailed

__all__ = ["StepPromotions"]


def _names(lease: Lease | None) -> dict[str, str]:
    names = {"#s": "status", "#h": "history"}
    if lease is not None:
        names["#t"] = "timeout"
    return names


def _returns(lease: Lease | None) -> str:
    """A promotion asks back the whole row only when it claims it too (the row runs
    next): moto's cost, and DynamoDB's bytes, grow with what a write returns."""
    return "ALL_NEW" if lease is not None else "UPDATED_NEW"


class StepPromotions(StepWrites):
    """The writes that move a step from blocked to ready once its dependencies succeeded."""

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
        same attributes as the creating update (`creating` with `_promotion`) would, and
        needs no update expression evaluated (in the emulator, a third of the cost of a
        chain's step). The row, or None if it exists already: then the update, guarded
        by its status, decides (a repair or a stop wrote it, or another promoter won).
        `dep`: the dependency that made it ready; None for a root (`claim_planned`)."""
        ready = now if ready_at is None else min(ready_at, now)
        move = STEP_MOVES["promote" if lease is None else "promote+claim"]
        planned = step_to_item(plan)
        item: Item = {k: planned[k] for k in ("run_id", "step", *PLANNED_ATTRS)}
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
            update, guard = creating(plan, update, guard, values, names)
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
        update, cond = creating(plan, update, cond, values, names)
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
