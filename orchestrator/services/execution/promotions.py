"""Promoting a success's dependants: each one counted (a step whose only dependency it
was sent ready, a wide join counted apart from its row or folded by the caller), the one
taken under the caller's lease returned to run inline, the others dispatched; a wide
fan-out's further slices as Promote messages (`promote_slice`)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from orchestrator.adapters.messages import Dispatch, Promote
from orchestrator.adapters.store import Lease
from orchestrator.adapters.store.join_counts import WIDE_JOIN
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.services.execution.executor_base import ExecutorBase

__all__ = ["FOLD_FROM", "Fold", "Promotions"]

# A join with at least this many dependencies may have its completions folded by the
# caller (`fold`): a wide fan-in is counted in a few writes, not one per dependency.
# Such a join is counted apart from its row, however its completions come
# (adapters/store/join_counts.py).
FOLD_FROM = WIDE_JOIN

# (run, join, the dependency that succeeded, the join's in-degree): see promote_dependants.
Fold = Callable[[str, str, str, int], None]


class Promotions(ExecutorBase):
    """A success's dependants counted, promoted and dispatched."""

    def promote_slice(self, msg: Promote, ctx: RunContext, fold: Fold | None) -> None:
        """Promote one slice of a wide fan-out's dependants (a Promote message). The
        row decides: a step that is not a success, or that landed in a stopping run,
        promotes nothing; in a run stopped since, the stop pass's skips make each
        promotion's guard fail. Promoting twice is harmless."""
        done = self.store.steps.get_step(msg.run_id, msg.step)
        if done is None or done.status is not StepStatus.SUCCESS or done.stopping:
            return
        _, sends = self.promote_dependants(done, ctx, None, fold, lo=msg.lo, hi=msg.hi)
        if sends:
            self.queues.dispatch(sends)

    def promote_dependants(
        self, done: StepRecord, ctx: RunContext, keep_one: Lease | None,
        fold: Fold | None = None, *, lo: int = 0, hi: int | None = None,
    ) -> tuple[StepRecord | None, list[Dispatch]]:
        """Count `done` towards each dependant (those from `lo` to `hi`). Returns the
        dependant promoted into `keep_one` (if any) and the dispatches of the others not
        sent yet. A wide join (FOLD_FROM dependencies or more) is handed to `fold` when
        given: the caller counts it later with others (satisfy_many)."""
        inline: StepRecord | None = None
        sends: list[Dispatch] = []
        deps = done.dependants[lo:hi]
        last = len(deps) - 1
        for i, dep in enumerate(deps):
            # Only the last dependant may be run inline: a lease taken at the start of a
            # wide fan-out would age while the rest are being promoted.
            lease = keep_one if i == last else None
            ndeps = ctx.ndeps.get(dep, 0)
            if fold is not None and ndeps >= FOLD_FROM:
                fold(done.run_id, dep, done.step, ndeps)
            elif ndeps >= FOLD_FROM:
                promoted = self._count_wide(done.run_id, dep, [done.step], ndeps, ctx, lease)
                if promoted is not None and promoted.status is StepStatus.DISPATCHED:
                    inline = promoted
                elif promoted is not None:
                    sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1))
            elif ndeps == 1 and lease is None:
                # `done` was its only dependency: it is ready as its row stands. No write
                # says so; its message does, and the worker that takes it promotes and
                # claims it in one write. A lost message leaves it blocked with its
                # dependency done, which the sweeper promotes as it would a promotion
                # lost with its worker.
                sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1,
                                      after=done.step, ready_at=self.clock()))
            else:
                # Stamp each promotion with its own time: a wide fan-out takes a while,
                # and the sweeper reads ready_at as "when was this message due to be sent".
                promoted = self.store.steps.satisfy(done.run_id, dep, done.step, ndeps, lease,
                                                    self.clock(), plan=ctx.plan(dep))
                if promoted is None:
                    continue
                if promoted.status is StepStatus.DISPATCHED:
                    inline = promoted
                    continue
                sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1))
            if len(sends) == 10:  # a wide fan-out starts while it is still promoting
                self.queues.dispatch(sends)
                sends = []
        return inline, sends

    def satisfy_many(self, run_id: str, step: str, deps: Collection[str], ndeps: int,
                     ctx: RunContext | None = None) -> bool:
        """Count several successes towards one wide join (folded by a worker) and
        dispatch the join if that completed it. True if it did. `ctx`: the run's, if
        the caller has it (else it is read)."""
        promoted = self._count_wide(run_id, step, deps, ndeps, self.context(run_id, ctx))
        if promoted is None:
            return False
        self.queues.dispatch([Dispatch(run_id=run_id, step=step, attempt=1)])
        return True

    def _count_wide(self, run_id: str, step: str, deps: Collection[str], ndeps: int,
                    ctx: RunContext, lease: Lease | None = None) -> StepRecord | None:
        """Count `deps` towards a wide join by their places in its `dependsOn` (the
        run's definition): the row if that promoted it."""
        if ctx.definition is None:
            return None  # the run is gone
        places = ctx.definition.places.get(step, {})
        known = [places[d] for d in deps if d in places]
        if not known:
            return None
        return self.store.steps.satisfy_many(run_id, step, known, ndeps, self.clock(),
                                             lease=lease)
