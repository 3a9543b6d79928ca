"""A DAG run's step rows as its followers read them (GET /runs/{id}, `show`, watch), kept
per run and brought up to date with what can have changed, not read whole on every look.

What a view shows of a row stops changing once the row is terminal, so a follower keeps
the terminal rows it has read. A look then reads:
- the rows that are not terminal now: one query of the run's partition, the terminal rows
  filtered out before they are sent (DynamoDB reads them, at 4 KB a read unit: what
  costs is sending, parsing and, in the emulator, serializing every row);
- by key, the rows kept as not terminal that the query did not return: they ended since
  the last look, or their row is not written yet (a step its start left out). A row every
  one of whose dependencies is known not to be terminal cannot have moved (a promotion
  needs all of them to succeed, a skip one of them to fail or be skipped; a stop is read
  whole): those are not read.

The query reads only the key range from the first to the last step kept as not terminal
(a chain's or a fan-out's rows end roughly in name order, so the range shrinks as the run
goes), and none when every row kept is terminal.

A look costs one query (its answer the rows in flight) and the rows that ended since the
last one, where reading the run whole cost every row: a poller of a 200-step fan-out read
200 rows four times a second. A run that is stopping, ended other than in success (a stop
or a halt skips rows whatever their dependencies), a rerun (its rows are not as planned) or
durable (its rows are made as it runs; its journal has a follower of its own) is read
whole, as is a run seen for the first time. A run that succeeded is brought up to date like
a running one. Runs are kept least recently looked at first out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus

__all__ = ["StepFollower"]

# (run id, None: every row | (first, last): the rows not terminal, first to last step)
Query = Callable[[str, "tuple[str, str] | None"], list[StepRecord]]
GetMany = Callable[[str, Sequence[str]], "dict[str, StepRecord] | None"]
Planned = Callable[[RunRecord, list[StepRecord]], list[StepRecord]]


class StepFollower:
    """`read(run, planned)`: the run's step rows, with those its start left out as planned
    (`planned(run, rows read)` adds them)."""

    def __init__(self, query: Query, get_many: GetMany, keep: int = 256) -> None:
        self.query = query
        self.get_many = get_many
        self.keep = keep
        # Per run id: (the run's created_at, its rows). A run id used again (after the
        # first run's expiry) is another run: its rows are read afresh.
        self._runs: OrderedDict[str, tuple[float, dict[str, StepRecord]]] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, run: RunRecord, planned: Planned) -> list[StepRecord]:
        run_id = run.run_id
        with self._lock:
            created, kept = self._runs.pop(run_id, (None, None))
        if created != run.created_at:
            kept = None
        whole = ((run.status.terminal and run.status is not RunStatus.SUCCESS)
                 or run.stopping
                 or run.definition.durable is not None or bool(run.definition.reused))
        if whole or kept is None or not self._refresh(run, kept):
            kept = {r.step: r for r in planned(run, self.query(run_id, None))}
        if not whole:
            with self._lock:
                self._runs[run_id] = (run.created_at, kept)
                while len(self._runs) > self.keep:
                    self._runs.popitem(last=False)
        return sorted(kept.values(), key=lambda r: r.step)

    def _refresh(self, run: RunRecord, kept: dict[str, StepRecord]) -> bool:
        """Bring `kept` up to date; False if the run must be read whole instead."""
        specs = run.definition.specs
        order = run.definition.order()
        if set(kept) != set(specs) or len(order) != len(specs):
            return False  # rows this follower does not know of
        open_ = [name for name, row in kept.items() if not row.status.terminal]
        if not open_:
            return True  # nothing kept can move: terminal rows are final here
        live = {r.step: r for r in self.query(run.run_id, (min(open_), max(open_)))}
        if not set(live) <= set(specs):
            return False
        # Known not terminal: the live rows, and (in dependency order) every row kept as
        # not terminal whose dependencies are all known not terminal.
        moving = set(live)
        ended: list[str] = []
        for name in order:
            if name in live or kept[name].status.terminal:
                continue
            deps = specs[name].deps
            if deps and all(d in moving for d in deps):
                moving.add(name)
            else:
                ended.append(name)
        if ended:
            found = self.get_many(run.run_id, ended)
            if found is None:
                return False
            kept.update(found)  # a row not found is not written yet: as planned
        kept.update(live)
        return True
