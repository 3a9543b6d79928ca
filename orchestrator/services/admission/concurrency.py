"""The concurrency stage: a run goes when every one of its limits (`Gate.limits`: at
most N running runs per rendered group and key) has room; the store's part is
adapters/store/limit_lines.py.

A limit's waiting runs are kept per turns key (the limit's own key, or for a limit
without one the key of the run's keyed limit), each key's runs by place: arrival moved
earlier by priority (engine/admission.py `effective_time`). When a limit has room, the
keys take turns: the key with the lowest round goes, ties to the key whose first run
has the better place, and that key's round goes up one. A key that starts waiting joins
at the current (lowest) round, so one tenant's backlog of thousands waits behind a
newcomer's one run for at most one turn of each key already waiting.

Policy `skip` refuses a run that finds a limit full; `cancel-running` cancels the
oldest holders (and the runs waiting before it) so that the newest goes next. A
finished run lets go of its limits and each lets its next run go; a holder that has
finished (or is gone) is dropped by the sweeper's look (gate.py `recheck`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Sk, round_sk, waiting_sk
from orchestrator.adapters.store.limit_lines import Turn
from orchestrator.engine.admission import effective_time
from orchestrator.engine.definition import Gate, Limit
from orchestrator.engine.policies import GroupPolicy
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code

__all__ = ["Groups", "waiting_place"]

log = logging.getLogger("orchestrator.services.admission")

Admit = Callable[[RunRecord, dict[str, Any]], RunRecord]
Refuse = Callable[[RunRecord, Code, str], RunRecord]

# Turns keys compared a look (the first ones in turn order), and looks a hand-off makes
# before it leaves the rest to the next hand-off or the sweeper.
KEYS_A_LOOK = 4
LOOKS = 8


def waiting_place(run: RunRecord) -> Sk:
    """A waiting run's place: its arrival moved earlier by its priority, ties broken
    by run id."""
    priority = run.gate.priority if run.gate is not None else 0
    return waiting_sk(effective_time(run.created_at, priority), run.run_id)


class Groups:
    """`admit(run, detail)` starts a run its limits let go; `refuse(run, code, why)`
    ends one they refuse; `reread(run)` reads a run again; `cancel(run_id, why)`
    cancels a replaced one."""

    def __init__(self, store: Store, control: Control, clock: Callable[[], float], *,
                 admit: Admit, refuse: Refuse, reread: Callable[[RunRecord], RunRecord],
                 cancel: Callable[[str, str], object]) -> None:
        self.store = store
        self.control = control
        self.clock = clock
        self.admit = admit
        self.refuse = refuse
        self.reread = reread
        self.cancel = cancel

    # ---- a run arrives (or is looked at again) -----------------------------------------

    def arrive(self, run: RunRecord, gate: Gate, now: float) -> RunRecord:
        limits = gate.limits
        if any(lim.policy is GroupPolicy.SKIP for lim in limits):
            return self._now_or_never(run, limits)
        for lim in limits:
            self._queue(run, lim, now)
        if any(lim.policy is GroupPolicy.CANCEL_RUNNING for lim in limits):
            self._replace_others(run, limits, now)
        holding = [lim for lim in limits
                   if run.run_id in self.control.holders(lim.line_id, now).runs]
        if len(holding) == len(limits) and self._take(run):
            # It took its limits and stopped short of starting (a crash): it goes now.
            return self._start(run, None, None)
        for lim in limits:
            self.next(lim)
        return self.reread(run)

    def try_admit(self, run: RunRecord) -> RunRecord:
        """Start `run` if its limits have room now (used by tests and the sweeper)."""
        gate = run.gate or Gate()
        return self.arrive(run, gate, self.clock())

    def admitted(self, run: RunRecord) -> None:
        """The run was admitted: its places in line go."""
        for lim in (run.gate or Gate()).limits:
            self.control.stop_waiting(lim.line_id, lim.turns, waiting_place(run))

    def release(self, run: RunRecord) -> None:
        """A run finished: let go of its limits, and let each one's next run go."""
        limits = (run.gate or Gate()).limits
        for lim in limits:
            self.control.let_go_of(lim.line_id, [run.run_id])
            if run.started_at is None:  # it never started: its place in line goes
                self.control.stop_waiting(lim.line_id, lim.turns, waiting_place(run))
        for lim in limits:
            self.next(lim)

    # ---- the next run of a limit ---------------------------------------------------------

    def next(self, lim: Limit) -> None:
        """While the limit has room, start its next waiting run: keys in turns, then
        place. A run another of its limits holds back is passed over this time."""
        passed: set[str] = set()
        for _ in range(LOOKS):
            now = self.clock()
            if self.control.holders(lim.line_id, now).count() >= lim.limit:
                return
            chosen = self._choose(lim, now, passed)
            if chosen is None:
                return
            turn, run, place = chosen
            if not self._take(run):
                passed.add(turn.turns)  # another of its limits is full
                continue
            self._start(run, lim, turn, place)

    def _choose(self, lim: Limit, now: float,
                passed: set[str]) -> tuple[Turn, RunRecord, Sk] | None:
        """The next run of a limit: from the first keys in turn order, the one of the
        lowest round whose first waiting run has the best place."""
        after: Sk | None = None
        for _ in range(LOOKS):
            turns = self.control.next_turns(lim.line_id, now, KEYS_A_LOOK, after)
            if not turns:
                return None
            heads: list[tuple[int, Sk, Turn, RunRecord]] = []
            for turn in turns:
                if turn.turns in passed:
                    continue
                head = self._head(lim, turn, now)
                if head is not None:
                    heads.append((turn.round, head[1], turn, head[0]))
            if heads:
                _, place, turn, run = min(heads, key=lambda h: (h[0], h[1]))
                return turn, run, place
            if len(turns) < KEYS_A_LOOK:
                return None
            last = turns[-1]
            after = round_sk(last.round, last.turns)
        return None

    def _head(self, lim: Limit, turn: Turn, now: float) -> tuple[RunRecord, Sk] | None:
        """A key's first waiting run still queued (finished ones leave on the way; a
        key with none leaves the turns)."""
        while True:
            waiting = self.control.first_waiting(lim.line_id, turn.turns, now, 5)
            if not waiting:
                self.control.leave_turns(lim.line_id, turn)
                return None
            runs = self.store.runs.get_runs([rid for rid, _ in waiting], now)
            for rid, place in waiting:
                run = runs.get(rid)
                if run is not None and run.status is RunStatus.QUEUED:
                    if run.admit_at is not None and run.admit_at > now + 1.0:
                        break  # its throttle slot is ahead: its timer carries it on
                    return run, place
                self.control.stop_waiting(lim.line_id, turn.turns, place)
            else:
                continue
            return None

    def _take(self, run: RunRecord) -> bool:
        limits = (run.gate or Gate()).limits
        return self.control.take_limits([(lim.line_id, lim.limit) for lim in limits],
                                        run.run_id)

    def _start(self, run: RunRecord, lim: Limit | None, turn: Turn | None,
               place: Sk | None = None) -> RunRecord:
        gate = run.gate or Gate()
        started = self.admit(run, {"group": gate.group, "key": gate.key})
        if started.status is not RunStatus.RUNNING or started.started_at is None:
            # Not started (cancelled meanwhile): what it took goes back.
            for each in gate.limits:
                self.control.let_go_of(each.line_id, [run.run_id])
            if lim is not None and place is not None:
                self.control.stop_waiting(lim.line_id, lim.turns, place)
            return started
        if lim is not None and turn is not None:
            self.control.advance_turns(lim.line_id, turn)
        return started

    def _queue(self, run: RunRecord, lim: Limit, now: float) -> None:
        """Put the run in the limit's line, its turns key joining the turns at the
        current round when it has none."""
        self.control.wait_for_limit(lim.line_id, lim.turns, waiting_place(run), run.run_id)
        first = self.control.next_turns(lim.line_id, now, 1)
        self.control.join_turns(lim.line_id, lim.turns, first[0].round if first else 0, now)

    def _now_or_never(self, run: RunRecord, limits: tuple[Limit, ...]) -> RunRecord:
        """Policy skip: start now, or be refused naming the limit that is full."""
        if self._take(run):
            return self._start(run, None, None)
        now = self.clock()
        for lim in limits:
            self.drop_finished(lim, now)
        if self._take(run):
            return self._start(run, None, None)
        full = next((lim for lim in limits
                     if self.control.holders(lim.line_id, now).count() >= lim.limit),
                    limits[0])
        holders = self.control.holders(full.line_id, now)
        names = sorted(holders.runs | ({holders.legacy} if holders.legacy else set()))
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        what = (f"busy with run {shown}" if full.limit == 1
                else f"at its limit of {full.limit} (runs {shown})")
        return self.refuse(run, Code.CONCURRENCY_BUSY,
                           f"group {full.group!r} key {full.key!r} is {what}")

    def drop_finished(self, lim: Limit, now: float) -> None:
        """Drop the holders of a limit whose run has finished or is gone."""
        holders = self.control.holders(lim.line_id, now)
        ids = sorted(holders.runs | ({holders.legacy} if holders.legacy else set()))
        if not ids:
            return
        runs = self.store.runs.get_runs(ids, now)
        gone = [rid for rid in ids if rid not in runs or runs[rid].status.terminal]
        if gone:
            self.control.let_go_of(lim.line_id, gone)
            log.info("limit %s: dropped finished holders %s", lim.line_id, gone)

    def _replace_others(self, run: RunRecord, limits: tuple[Limit, ...], now: float) -> None:
        """Policy cancel-running: cancel the oldest holders so that this run fits, and
        the runs waiting before it."""
        reason = f"replaced by run {run.run_id}"
        mine = waiting_place(run)
        for lim in limits:
            if lim.policy is not GroupPolicy.CANCEL_RUNNING:
                continue
            self.drop_finished(lim, now)
            holders = self.control.holders(lim.line_id, now)
            ids = sorted(holders.runs | ({holders.legacy} if holders.legacy else set()))
            ids = [rid for rid in ids if rid != run.run_id]
            over = len(ids) - lim.limit + 1
            if over > 0:
                found = self.store.runs.get_runs(ids, now)
                oldest = sorted(ids, key=lambda r: found[r].created_at if r in found else 0)
                for rid in oldest[:over]:
                    self.cancel(rid, reason)
            for rid, place in self.control.first_waiting(lim.line_id, lim.turns, now, 100):
                if rid != run.run_id and place < mine:
                    self.cancel(rid, reason)
