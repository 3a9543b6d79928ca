"""What the executor's parts share (`ExecutorBase`): the ports they act through (the
store, the queues, the blob store), the settings and the clock, what a finished run
calls, and a run's context read when a caller has none. The parts: promotions.py (a
success's dependants), run_stops.py (skipping and stopping), run_finishes.py (counting
and finishing runs); executor.py composes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from orchestrator.adapters.blobs import Blobs
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import RunRecord
from orchestrator.settings import Settings

__all__ = ["ExecutorBase"]


def _no_release(run: RunRecord) -> None:
    return None


@dataclass(frozen=True)
class ExecutorBase:
    """The ports and settings every part of the executor acts through."""

    store: Store
    queues: Queues
    blobs: Blobs
    settings: Settings
    clock: Callable[[], float]
    _: KW_ONLY
    # Called once a run has finished: admission's release (frees its group's lock).
    on_finish: Callable[[RunRecord], None] = _no_release

    def context(self, run_id: str, ctx: RunContext | None = None) -> RunContext:
        """`ctx` if it knows the run's definition, else one read afresh."""
        if ctx is not None and ctx.definition is not None:
            return ctx
        run = self.store.runs.get_run(run_id, self.clock())
        return RunContext.of(run) if run is not None else RunContext.missing(run_id)
