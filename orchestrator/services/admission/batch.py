"""Batches (a workflow's `batch: {size, timeout, key}`): the events that start the
workflow are gathered, per rendered key, into one run whose input is
`{"events": [...]}` (engine/batches.py says where each event goes).

The batch's run exists from its first event, `queued`, its start (`admit_at`) at that
event + `timeout`; the run row and the batch's control item (`batch#<wf>#<key>` → the
run) are written in one transaction, as a debounced burst's are (debounce.py). Each
later event is one guarded write on that queued run: its input with the event appended,
guarded by the count of events it read (`batched`), by the run being queued and by its
timeout not having passed. Two events racing for the last place: one write lands, the
other's guard fails, it reads again and finds the batch full, so it begins a new batch
(guarded on the old one being the open one, so two such events begin one). The event
that fills a batch moves its start to now and carries it on through admission's gate at
once; one not full is started by its timer message at `admit_at` (the sweeper repairs a
lost timer, or a filling event's process that died before the gate: its wake is due).

An event's trigger id (its run id, derived from the workflow, the event's name and id)
is recorded as taken in the same transaction as its own write, so an event delivered
twice joins one batch once, and its repeat is answered `duplicate` with the batch's
run. The event that begins a batch is answered `queued` (or `created` when it fills it),
one that joins `batched` (result.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.batches import batch_key, member_key
from orchestrator.engine.admission import render_key
from orchestrator.engine.batches import batch_input, member, place
from orchestrator.engine.records import RunRecord
from orchestrator.errors import ConditionFailed, StoreError
from orchestrator.services.admission.debounce import begin_burst
from orchestrator.services.admission.result import Outcome, Started, repeat_of
from orchestrator.services.values import MAX_VALUE_BYTES

__all__ = ["Batcher"]

# A batch's control item outlives its timeout by this much (then DynamoDB's TTL takes it).
KEEP = 86400.0
# Events racing for one batch each land within a round or two; a full batch hands the
# next ones a new batch.
ROUNDS = 50


class Batcher:
    """`admit(run)`: carry a full batch's run on through the gate."""

    def __init__(self, store: Store, clock: Callable[[], float],
                 admit: Callable[[RunRecord], RunRecord], *, remember: float = KEEP,
                 cap: int = MAX_VALUE_BYTES) -> None:
        self.store = store
        self.clock = clock
        self.admit = admit
        # How long an event taken is remembered (as long as its id: a repeat within the
        # event's retention is answered with its batch, never joins another).
        self.remember = remember
        self.cap = cap

    @staticmethod
    def key_of(spec: Any, workflow: str, event: Any) -> str:
        return render_key(spec.key, {"event": event}, f"workflow {workflow!r}: batch.key")

    def trigger(self, workflow: str, spec: Any, event: Any,
                create: Callable[[float, Any], RunRecord],
                begin: Callable[[RunRecord, list[dict[str, Any]]], RunRecord],
                trigger_id: str | None = None) -> Started:
        """One event of `workflow`: the batch's run, and how the event was taken.
        `create(admit_at, input)` makes a new queued run's record; `begin(run, also)`
        writes it with `also` in one transaction and carries it on. `trigger_id`: the
        event's dedupe id."""
        key = self.key_of(spec, workflow, event)
        pk = batch_key(workflow, key)
        rows = self.store.batches
        seen = None if trigger_id is None else member_key(workflow, trigger_id)
        one = member(event if isinstance(event, dict) else {"data": event})
        for _ in range(ROUNDS):
            now = self.clock()
            if seen is not None:
                taken = rows.taken(seen, now)
                if taken is not None:
                    return self._repeat(taken, now)
            keep = now + spec.timeout + KEEP
            remembered = now + max(spec.timeout + KEEP, self.remember)
            open_ = rows.open(pk, now)
            replacing = None
            if open_ is not None:
                run_id, _ = open_
                found = rows.run(run_id, now)
                where = None if found is None else place(
                    found[0].input, found[0].status, found[1], found[0].admit_at,
                    event=one, size=spec.size, cap=self.cap, now=now)
                if found is not None and where is not None and where.input is not None:
                    run, count = found
                    also = [] if seen is None else [rows.take(seen, run_id, now, remembered)]
                    try:
                        rows.join(run_id, where.input, count, now, full=where.full,
                                  also=also, added=batch_input([one]),
                                  created_at=run.created_at)
                    except ConditionFailed:
                        won = None if seen is None else rows.taken(seen, now)
                        if won is not None:
                            return self._repeat(won, now)  # a repeat of this event won
                        continue  # another event joined first: read the batch again
                    if not where.full:
                        return Started(replace(run, input=where.input), Outcome.BATCHED)
                    # Full: it starts now (the sweeper carries it on if this process dies).
                    return Started(self.admit(replace(run, input=where.input, admit_at=now)),
                                   Outcome.BATCHED)
                replacing = run_id  # full, started, timed out or gone: a new batch
            full = spec.size <= 1
            run = create(now if full else now + spec.timeout, batch_input([one]))
            began = begin_burst(rows, begin, run, pk, now, keep, replacing, seen, remembered)
            if began is not None:
                return began
            # Another event began the batch first (or this one's repeat): read again.
        raise StoreError(f"workflow {workflow!r}: batch key {key!r} is contended")

    def _repeat(self, run_id: str, now: float) -> Started:
        return repeat_of(self.store.runs.get_run(run_id, now), run_id, "event")
