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

Every trigger of a burst is answered with the burst's run id (`created` true for the
first), so callers can follow the run that will do the work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import debounce_key
from orchestrator.engine.records import RunRecord
from orchestrator.errors import ConditionFailed, StoreError, UsageError
from orchestrator.expressions import ExpressionError, compile_template

__all__ = ["Debouncer"]

# A burst's control item outlives its end by this much (then DynamoDB's TTL takes it).
KEEP = 86400.0
ROUNDS = 20


class Debouncer:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    @staticmethod
    def key_of(spec: Any, workflow: str, input: Any) -> str:
        try:
            key = compile_template(spec.key).render({"input": input}) if spec.key else ""
        except ExpressionError as exc:
            raise UsageError(f"workflow {workflow!r}: debounce.key: {exc}") from None
        if len(key) > 200:
            raise UsageError(f"workflow {workflow!r}: debounce.key is longer than 200 "
                             "characters once rendered")
        return key

    def trigger(self, workflow: str, spec: Any, input: Any,
                create: Callable[[float], RunRecord],
                begin: Callable[[RunRecord, list[dict[str, Any]]], RunRecord]
                ) -> tuple[RunRecord, bool]:
        """One trigger of `workflow`: (the burst's run, whether this trigger began the
        burst). `create(admit_at)` makes a new queued run's record; `begin(run, also)`
        writes it with `also` in one transaction and carries it on."""
        key = self.key_of(spec, workflow, input)
        pk = debounce_key(workflow, key)
        control = self.store.control
        for _ in range(ROUNDS):
            now = self.clock()
            burst = control.burst(pk, now)
            replacing = None
            if burst is not None:
                run_id, first = burst
                due = now + spec.period
                if spec.max_wait is not None:
                    due = min(due, first + spec.max_wait)
                try:
                    return self.store.runs.debounce(run_id, input, due, now), False
                except ConditionFailed:
                    replacing = run_id  # its run has started (or ended): a new burst
            due = now + spec.period if spec.max_wait is None else \
                now + min(spec.period, spec.max_wait)
            run = create(due)
            keep = now + (spec.max_wait or spec.period) + KEEP
            try:
                return begin(run, [control.begin_burst(pk, run.run_id, now, keep,
                                                       replacing)]), True
            except ConditionFailed:
                continue  # another trigger began the burst first: join it
        raise StoreError(f"workflow {workflow!r}: debounce key {key!r} is contended")
