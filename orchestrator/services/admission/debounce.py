"""Debounce (a workflow's `debounce: {key, period, max_wait}`): a burst of triggers with
one key starts one run, on the last trigger's input.

The burst's run exists from its first trigger, `queued` with a start time (`admit_at`)
of now + `period`; the run row and the burst's control item (`debounce#<wf>#<key>` →
the run) are written in one transaction, so a trigger racing the first finds one or the
other whole. Each later trigger is one guarded write on that queued run: its input
becomes the trigger's, and its start moves to now + `period`, but never past the burst's
first trigger + `max_wait`. The run is admitted as a throttled run is (a timer message
at `admit_at`, which finds the start moved and sets a new timer; the sweeper repairs a
lost one); admission is a guarded queued → running write, so a timer delivered twice, or
a timer and the sweeper, start it once. A trigger that finds the burst's run started
already begins a new burst (guarded on the old one, so two such triggers begin one).

A trigger with an id (an Idempotency-Key's run id, an event's or a webhook delivery's,
a caller's run id) is recorded as taken in the same transaction as its own write (the
burst's creation, or its move), so a repeat finds it taken and moves nothing: a repeated
trigger is one trigger, answered `duplicate` with the burst's run. A trigger that joins
a burst is answered `debounced`, the one that begins it `queued` (result.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.bursts import Bursts, burst_key, trigger_key
from orchestrator.adapters.store.control_keys import Pk
from orchestrator.engine.admission import render_key
from orchestrator.engine.records import RunRecord
from orchestrator.errors import ConditionFailed, StoreError
from orchestrator.services.admission.result import Outcome, Started, repeat_of

__all__ = ["Debouncer", "begin_burst"]

# A burst's control item outlives its end by this much (then DynamoDB's TTL takes it).
KEEP = 86400.0
ROUNDS = 20


class Debouncer:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    @staticmethod
    def key_of(spec: Any, workflow: str, input: Any) -> str:
        return render_key(spec.key, {"input": input}, f"workflow {workflow!r}: debounce.key")

    def trigger(self, workflow: str, spec: Any, input: Any,
                create: Callable[[float], RunRecord],
                begin: Callable[[RunRecord, list[dict[str, Any]]], RunRecord],
                trigger_id: str | None = None) -> Started:
        """One trigger of `workflow`: the burst's run, and how the trigger was taken.
        `create(admit_at)` makes a new queued run's record; `begin(run, also)` writes it
        with `also` in one transaction and carries it on. `trigger_id`: the trigger's
        dedupe id, if it has one."""
        key = self.key_of(spec, workflow, input)
        pk = burst_key(workflow, key)
        bursts = self.store.bursts
        seen = None if trigger_id is None else trigger_key(workflow, trigger_id)
        for _ in range(ROUNDS):
            now = self.clock()
            if seen is not None:
                taken = bursts.taken(seen, now)
                if taken is not None:
                    return self._repeat(taken, now)
            burst = bursts.burst(pk, now)
            replacing = None
            keep = now + (spec.max_wait or spec.period) + KEEP
            if burst is not None:
                run_id, first = burst
                due = now + spec.period
                if spec.max_wait is not None:
                    due = min(due, first + spec.max_wait)
                try:
                    if seen is None:
                        return Started(self.store.runs.debounce(run_id, input, due, now),
                                       Outcome.DEBOUNCED)
                    self.store.runs.debounce_with(
                        run_id, input, due, now, [bursts.take(seen, run_id, now, keep)])
                    joined = self.store.runs.get_run(run_id, now)
                    if joined is not None:
                        return Started(joined, Outcome.DEBOUNCED)
                    continue  # expired meanwhile: the next round says so
                except ConditionFailed:
                    won = None if seen is None else bursts.taken(seen, now)
                    if won is not None:
                        return self._repeat(won, now)  # a repeat of this trigger won
                    replacing = run_id  # its run has started (or ended): a new burst
            due = now + spec.period if spec.max_wait is None else \
                now + min(spec.period, spec.max_wait)
            began = begin_burst(bursts, begin, create(due), pk, now, keep, replacing, seen,
                                keep)
            if began is not None:
                return began
            # Another trigger began the burst first (or this one's repeat): read again.
        raise StoreError(f"workflow {workflow!r}: debounce key {key!r} is contended")

    def _repeat(self, run_id: str, now: float) -> Started:
        return repeat_of(self.store.runs.get_run(run_id, now), run_id, "trigger")


def begin_burst(items: Bursts, begin: Callable[[RunRecord, list[dict[str, Any]]], RunRecord],
                run: RunRecord, pk: Pk, now: float, keep: float, replacing: str | None,
                seen: Pk | None, remembered: float) -> Started | None:
    """Write a new burst's (or batch's) queued `run` with its control item (`pk`, kept
    until `keep`; replacing the ended one's) and the trigger's record (`seen`, kept
    until `remembered`), in one transaction; None if another trigger began one first
    (or this one's repeat did)."""
    also = [items.begin(pk, run.run_id, now, keep, replacing)]
    if seen is not None:
        also.append(items.take(seen, run.run_id, now, remembered))
    try:
        return Started.new(begin(run, also))
    except ConditionFailed:
        return None
