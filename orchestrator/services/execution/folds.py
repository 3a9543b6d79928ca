"""What a worker's attempts end with, folded and written together: terminal-step counts
(one counter write per run per flush instead of one per attempt) and a wide join's
completions (one write per join per flush). Folded while a worker's poll loop runs, or
inside a Lambda invocation's batch (`Worker.folding`); lost with the process, they are
the sweeper's to repair, like any promotion."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from orchestrator.adapters.metering import metered
from orchestrator.engine.context import RunContext
from orchestrator.errors import OrchestratorError
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["FLUSH_NOW_SINKS", "Folds"]

log = logging.getLogger("orchestrator.worker")

# A run with at most this many sinks has its counts written as soon as its attempt ends
# (there is little to fold, and its finish need not wait for the next flush).
FLUSH_NOW_SINKS = 4


class Folds:
    def __init__(self, executor: Executor,
                 context: Callable[[str], RunContext | None],
                 cached: Callable[[str], RunContext | None]) -> None:
        self.executor = executor
        self.context = context  # a run's context (read if need be)
        self.cached = cached  # a run's context if cached (no read)
        self._lock = threading.Lock()
        self.on = False  # folding (else every count is written at once)
        self.scopes = 0  # `Worker.folding` scopes open
        self._tally = Tally()
        # (run, join) -> (its in-degree, the dependencies that succeeded since the flush)
        self._joins: dict[tuple[str, str], tuple[int, set[str]]] = {}

    def count(self, tally: Tally) -> None:
        """Hand an attempt's terminal counts on: while folding, into the next flush,
        except for runs with few sinks (written now: one of them may finish the run, and
        folding would only make it wait)."""
        if not self.on:
            self.executor.flush(tally)
            return
        now = Tally()
        with self._lock:
            for run_id, n in tally.counts.items():
                ctx = self.cached(run_id)
                if ctx is not None and 0 < ctx.sinks <= FLUSH_NOW_SINKS:
                    now.add(run_id, n)
                else:
                    self._tally.add(run_id, n)
        if now.counts:
            try:
                self.executor.flush(now)
            except OrchestratorError as exc:  # the sweeper finishes the run if this is lost
                log.warning("count failed: %s", exc)

    def fold(self, run_id: str, join: str, dep: str, ndeps: int) -> None:
        """A wide join's dependency succeeded: counted at the next flush."""
        with self._lock:
            self._joins.setdefault((run_id, join), (ndeps, set()))[1].add(dep)

    def flush(self) -> None:
        """Write what is folded."""
        with self._lock:
            tally, self._tally = self._tally, Tally()
            joins, self._joins = self._joins, {}
        for (run_id, join), (ndeps, deps) in joins.items():
            try:
                with metered(run_id):
                    self.executor.satisfy_many(run_id, join, deps, ndeps, self.context(run_id))
            except OrchestratorError as exc:  # the sweeper promotes the join if lost
                log.warning("join %s/%s: count failed: %s", run_id, join, exc)
        try:
            self.executor.flush(tally)
        except OrchestratorError as exc:  # the sweeper finishes the run if this is lost
            log.warning("count flush failed: %s", exc)
