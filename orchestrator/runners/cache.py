"""What a worker keeps of the runs it works on: each run's context (read once; only its
stop flags are read again, at each start check) and the outputs of steps it recorded
(read by their dependants, often on the same thread next)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import StepRecord

__all__ = ["RunCache"]

_MISSING = object()


class LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


class RunCache:
    def __init__(self, store: Store, clock: Callable[[], float],
                 load: Callable[[StepRecord], Any]) -> None:
        self.store = store
        self.clock = clock
        self.load = load
        self._lock = threading.Lock()
        self._contexts: LRU = LRU(2048)
        self._outputs: LRU = LRU(8192)

    def cached(self, run_id: str) -> RunContext | None:
        """The run's context if it is cached (no read)."""
        with self._lock:
            ctx: RunContext | None = self._contexts.get(run_id)
        return ctx

    def context(self, run_id: str) -> RunContext | None:
        """The run's context, cached (its stop flags as first read: `start_check` reads
        them again)."""
        ctx = self.cached(run_id)
        if ctx is None:
            run = self.store.runs.get_run(run_id, self.clock())
            if run is None:
                return None
            ctx = RunContext.of(run)
            with self._lock:
                self._contexts.put(run_id, ctx)
        return ctx

    def start_check(self, run_id: str) -> RunContext | None:
        """The start check (DESIGN.md, invariant 5): the run's context with its stop
        flags and version as they are now, read strongly consistent (all else a context
        holds never changes: only they are read again, or the whole run if it is not cached).
        None if the run is gone."""
        ctx = self.cached(run_id)
        if ctx is None:
            return self.context(run_id)
        flags = self.store.runs.run_flags(run_id, self.clock())
        if flags is None:
            return None
        stopping, created_at, version = flags
        if created_at != ctx.created_at:
            # Another run of this id (the one cached expired, and its row was deleted):
            # its context read whole, strongly consistent, is this start check.
            with self._lock:
                self._contexts.pop(run_id, None)
            return self.context(run_id)
        if stopping != ctx.stopping or version != ctx.version:
            ctx = replace(ctx, stopping=stopping, version=version)
            with self._lock:
                self._contexts.put(run_id, ctx)
        return ctx

    def remember(self, row: StepRecord, created_at: float, output: Any) -> None:
        """A step's output as recorded, for its dependants (`created_at`: which run of
        that id)."""
        with self._lock:
            self._outputs.put((row.run_id, created_at, row.step), output)

    def dep_outputs(self, row: StepRecord, created_at: float = 0.0) -> dict[str, Any] | None:
        """The outputs of `row`'s dependencies, cached by run (`created_at`: which run of
        that id) and step."""
        if not row.deps:
            return None
        out: dict[str, Any] = {}
        missing = []
        with self._lock:
            for d in row.deps:
                cached = self._outputs.get((row.run_id, created_at, d), _MISSING)
                if cached is _MISSING:
                    missing.append(d)
                else:
                    out[d] = cached
        if missing:
            for name, dep in self.store.steps.get_outputs(row.run_id, missing).items():
                out[name] = self.load(dep)
        return {d: out.get(d) for d in row.deps}
