"""Applying the engine's decisions: the transitions a finished attempt, a failure, a
halt, a kill or a finished run cause, each as conditional writes plus dispatches.

Shared by the worker (after each attempt), the sweeper (repairs) and the API (kill)."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.adapters.blobs import Blobs
from orchestrator.adapters.queue import Dispatch, Queues
from orchestrator.adapters.store import Lease, Store
from orchestrator.engine.attempts import Fail, Retry
from orchestrator.engine.reconcile import final_status, not_started_statuses
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.errors import ConditionFailed, OrchestratorError
from orchestrator.settings import Settings

log = logging.getLogger(__name__)

__all__ = ["Advancer", "RunContext"]


@dataclass(frozen=True)
class RunContext:
    """The immutable facts of a run a worker needs on every step (cached per process)."""

    run_id: str
    workflow: str
    input: Any
    on_failure: str
    ndeps: dict[str, int]

    @classmethod
    def of(cls, run: RunRecord) -> RunContext:
        steps = run.definition.get("steps", {})
        return cls(
            run_id=run.run_id,
            workflow=run.workflow,
            input=run.input,
            on_failure=run.on_failure,
            ndeps={n: len(s.get("dependsOn") or []) for n, s in steps.items()},
        )


class LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class Tally:
    """Terminal transitions counted locally and folded into one write per run."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, run_id: str, n: int = 1) -> None:
        if n:
            self.counts[run_id] = self.counts.get(run_id, 0) + n


class Advancer:
    def __init__(
        self,
        store: Store,
        queues: Queues,
        blobs: Blobs,
        settings: Settings,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.queues = queues
        self.blobs = blobs
        self.settings = settings
        self.clock = clock
        # Called once a run has finished (Runtime wires admission's release here).
        self.on_finish: Callable[[RunRecord], None] | None = None

    # ---- outputs --------------------------------------------------------------------

    def store_output(self, row: StepRecord, raw: bytes) -> tuple[str | None, str | None]:
        """(inline JSON, blob key): bodies too large for a row go to the blob store."""
        if len(raw) > self.settings.inline_output_limit:
            key = f"outputs/{row.run_id}/{row.step}/{row.attempt}.json"
            return None, self.blobs.put(key, raw)
        return (raw.decode("utf-8") if raw else "null"), None

    def load_output(self, row: StepRecord) -> Any:
        if row.output_ref is not None:
            return json.loads(self.blobs.get(row.output_ref))
        return row.output

    # ---- after an attempt ------------------------------------------------------------

    def succeed(
        self,
        row: StepRecord,
        ctx: RunContext,
        output_json: str | None,
        output_ref: str | None,
        size: int,
        tally: Tally,
        *,
        keep_one: Lease | None,
        on_recorded: Callable[[], None] | None = None,
    ) -> tuple[StepRecord | None, StepRecord] | None:
        """Record success and promote dependants. Returns (the dependant promoted straight
        into `keep_one`'s lease for the caller to run inline, the recorded row), or None
        if our lease was lost (someone else owns the attempt now)."""
        now = self.clock()
        try:
            done = self.store.record_success(
                row.run_id,
                row.step,
                row.attempt,
                row.lease_owner or "",
                output_json=output_json,
                output_ref=output_ref,
                size=size,
                now=now,
            )
        except ConditionFailed:
            return None
        if done.counted:
            tally.add(row.run_id)
        if on_recorded is not None:
            on_recorded()
        inline, sends = self.promote_dependants(done, ctx, keep_one)
        if sends:
            self.queues.dispatch(sends)
        return inline, done

    def promote_dependants(
        self, done: StepRecord, ctx: RunContext, keep_one: Lease | None
    ) -> tuple[StepRecord | None, list[Dispatch]]:
        """Count `done` towards each dependant. Returns the dependant promoted into
        `keep_one` (if any) and the dispatches of the others not sent yet."""
        inline: StepRecord | None = None
        sends: list[Dispatch] = []
        last = len(done.dependants) - 1
        for i, dep in enumerate(done.dependants):
            # Only the last dependant may be run inline: a lease taken at the start of a
            # wide fan-out would age while the rest are being promoted.
            lease = keep_one if i == last else None
            ndeps = ctx.ndeps.get(dep, 0)
            # Stamp each promotion with its own time: a wide fan-out takes a while, and
            # the sweeper reads ready_at as "when was this message due to be sent".
            promoted = self.store.satisfy(done.run_id, dep, done.step, ndeps, lease,
                                          self.clock())
            if promoted is None:
                continue
            if promoted.status is StepStatus.DISPATCHED:
                inline = promoted
            else:
                sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1))
                if len(sends) == 10:  # a wide fan-out starts while it is still promoting
                    self.queues.dispatch(sends)
                    sends = []
        return inline, sends

    def retry(
        self, row: StepRecord, decision: Retry, *, expired_before: float | None = None
    ) -> bool:
        try:
            self.store.record_retry(
                row.run_id,
                row.step,
                row.attempt,
                row.lease_owner or "",
                next_attempt=decision.next_attempt,
                due_at=decision.due_at,
                error=decision.error,
                now=self.clock(),
                expired_before=expired_before,
            )
        except ConditionFailed:
            return False
        self.queues.timer(
            Dispatch(
                run_id=row.run_id,
                step=row.step,
                attempt=decision.next_attempt,
                due_at=decision.due_at,
            ),
            self.clock(),
        )
        return True

    def fail(
        self,
        row: StepRecord,
        ctx: RunContext,
        decision: Fail,
        tally: Tally,
        *,
        expired_before: float | None = None,
    ) -> bool:
        now = self.clock()
        try:
            failed = self.store.record_failure(
                row.run_id,
                row.step,
                row.attempt,
                row.lease_owner or "",
                error=decision.error,
                now=now,
                expired_before=expired_before,
            )
        except ConditionFailed:
            return False
        if failed.counted:
            tally.add(row.run_id)
        if ctx.on_failure == "continue-independent":
            self.cascade_skip(failed, tally)
        else:
            err = {"code": "step_failed", "step": row.step, "reason": decision.error}
            try:
                self.store.mark_halted(row.run_id, err, now)
            except ConditionFailed:
                return True
            self.stop_not_started(
                row.run_id,
                (StepStatus.BLOCKED, StepStatus.READY),
                f"run halted: step {row.step} failed",
                tally,
            )
        return True

    def cascade_skip(self, failed: StepRecord, tally: Tally) -> None:
        """continue-independent: skip the branch below a failure, nothing else."""
        now = self.clock()
        frontier = list(failed.dependants)
        seen: set[str] = set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            skipped = self.store.skip(
                failed.run_id,
                name,
                (StepStatus.BLOCKED,),
                f"dependency {failed.step} did not succeed",
                now,
            )
            if skipped is not None:
                if skipped.counted:
                    tally.add(failed.run_id)
                frontier.extend(skipped.dependants)

    def stop_not_started(
        self, run_id: str, statuses: Sequence[StepStatus], reason: str, tally: Tally
    ) -> int:
        """Halt or kill: skip every step that has not started; in-flight ones land."""
        now = self.clock()
        n = 0
        for s in self.store.query_steps(run_id):
            if (
                s.status in statuses
                and not s.claimed
                and self.store.skip(run_id, s.step, statuses, reason, now) is not None
            ):
                n += 1
        tally.add(run_id, n)
        return n

    def kill(self, run_id: str, reason: str) -> RunRecord:
        run = self.store.request_kill(run_id, reason, self.clock())
        tally = Tally()
        self.stop_not_started(run_id, not_started_statuses(run), f"run killed: {reason}", tally)
        self.flush(tally)
        return run

    # ---- finishing ---------------------------------------------------------------------

    def flush(self, tally: Tally) -> None:
        counts, tally.counts = tally.counts, {}
        for run_id, n in counts.items():
            left = self.store.decrement_remaining(run_id, n, self.clock())
            if left is not None and left <= 0:
                self.finish_if_done(run_id)

    def finish_if_done(self, run_id: str) -> RunStatus | None:
        """Verify against the rows (the counter is only a hint) and terminalize."""
        now = self.clock()
        run = self.store.get_run(run_id, now)
        if run is None or run.status.terminal:
            return None
        steps = self.store.query_steps(run_id)
        status = final_status(run, steps)
        if status is None:
            # Every sink is done but a failing, halted or killed run still has steps in
            # flight (their branches below were skipped). Make those steps count too,
            # so the last of them to land finishes the run.
            flagged = sum(
                self.store.flag_counted(run_id, s.step) for s in steps if not s.status.terminal
            )
            if flagged:
                self.store.decrement_remaining(run_id, -flagged, now)
            return None
        ttl = self.settings.ttl_success if status is RunStatus.SUCCESS else self.settings.ttl_failed
        expires = now + ttl
        error: dict[str, Any] | None = None
        failed = [s.step for s in steps if s.status is StepStatus.FAILED]
        if status is RunStatus.KILLED:
            error = {"code": "killed", "reason": run.kill_reason or ""}
        elif status is RunStatus.FAILED:
            first = next((s for s in steps if s.status is StepStatus.FAILED), None)
            error = {
                "code": "step_failed",
                "step": failed[0] if failed else None,
                "steps": failed,
                "reason": first.error if first else None,
            }
        # Steps expire with their run: stamp them before the run row says "finished".
        self.store.put_steps([_with_expiry(s, expires) for s in steps])
        try:
            self.store.finish_run(run_id, status, error, now, expires)
        except ConditionFailed:
            return None
        if self.on_finish is not None:
            try:
                self.on_finish(run)
            except OrchestratorError as exc:  # the sweeper repairs what this left undone
                log.warning("run %s: after-finish hook failed: %s", run_id, exc)
        return status


def _with_expiry(s: StepRecord, expires: float) -> StepRecord:
    return replace(s, expires_at=expires)
