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
finished run lets go of its limits and each lets its next run go. The sweeper's look at
a waiting run (`recheck`) drops holders that have finished without letting go (a
release lost with its process), starts a run that took its limits and stopped short of
starting, and mends its key's place in the turns."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Sk, round_sk, waiting_sk
from orchestrator.adapters.store.limit_lines import LAST, Holders, Turn, Waiting
from orchestrator.engine.admission import effective_time
from orchestrator.engine.definition import Gate, Limit
from orchestrator.engine.policies import GroupPolicy
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code
from orchestrator.strict_json import dumps

__all__ = ["Groups", "waiting_place"]

log = logging.getLogger("orchestrator.services.admission")

# Starts a queued run by id (None: it is no longer queued), with the detail its history
# entry gets.
AdmitId = Callable[[str, dict[str, Any]], RunRecord | None]
Refuse = Callable[[RunRecord, Code, str], RunRecord]

# Turns keys a look reads (the first ones in turn order); runs a hand-off starts at
# most; runs it passes over (another of their limits is full) before it stops.
KEYS_A_LOOK = 8
STARTS = 8
PASSES = 3
# Runs a hand-off looks at in all: what it leaves, the next hand-off or the sweeper
# takes up.
TRIES = 24
# Runs waiting before a `cancel-running` run that it cancels at most (per turns key), and
# turns keys it looks in: a line longer than that is cut down by the next arrivals.
REPLACED = 100


def waiting_place(run: RunRecord) -> Sk:
    """A waiting run's place: its arrival moved earlier by its priority, ties broken
    by run id."""
    priority = run.gate.priority if run.gate is not None else 0
    return waiting_sk(effective_time(run.created_at, priority), run.run_id)


def _limits_of(gate_json: str) -> tuple[Limit, ...]:
    return Gate.from_json(json.loads(gate_json)).limits


class Groups:
    """`admit_id(run_id, detail)` starts a queued run its limits let go; `refuse(run,
    code, why)` ends one they refuse; `reread(run)` reads a run again; `cancel(run_id,
    why)` cancels a replaced one."""

    def __init__(self, store: Store, control: Control, clock: Callable[[], float], *,
                 admit_id: AdmitId, refuse: Refuse, reread: Callable[[RunRecord], RunRecord],
                 cancel: Callable[[str, str], object]) -> None:
        self.store = store
        self.control = control
        self.clock = clock
        self.admit_id = admit_id
        self.refuse = refuse
        self.reread = reread
        self.cancel = cancel

    # ---- a run arrives (or is looked at again) -----------------------------------------

    def arrive(self, run: RunRecord, gate: Gate, now: float, *,
               repair: bool = False) -> RunRecord:
        limits = gate.limits
        if any(lim.policy is GroupPolicy.SKIP for lim in limits):
            return self._now_or_never(run, limits)
        doc = dumps(gate.to_json())
        for lim in limits:
            place = waiting_place(run)
            self.control.wait_for_limit(lim.line_id, lim.turns, place, run.run_id, doc)
            self.control.join_turns(lim.line_id, lim.turns, place, now, repair=repair)
        if any(lim.policy is GroupPolicy.CANCEL_RUNNING for lim in limits):
            self._replace_others(run, limits, now)
        for lim in limits:
            for started in self.next(lim):
                if started.run_id == run.run_id:
                    return started
        return run

    def recheck(self, run: RunRecord, gate: Gate, now: float) -> RunRecord:
        """The sweeper's look at a waiting run (see the module's docstring)."""
        limits = gate.limits
        held = 0
        for lim in limits:
            holders = self.drop_finished(lim, now)
            held += run.run_id in holders
        if held == len(limits) and not self._take(run.run_id, limits):
            started = self._start(run.run_id, limits, None, None)
            if started is not None:
                return started
        return self.arrive(run, gate, now, repair=True)

    def rejoin(self, run: RunRecord, gate: Gate, now: float) -> None:
        """A sweep's look at a waiting run whose limit it has looked at already: its
        place in each line is written again (a start that died before it wrote them),
        and its key joins the turns if it is not in them."""
        doc = dumps(gate.to_json())
        for lim in gate.limits:
            place = waiting_place(run)
            self.control.wait_for_limit(lim.line_id, lim.turns, place, run.run_id, doc)
            self.control.join_turns(lim.line_id, lim.turns, place, now)

    def admitted(self, run: RunRecord) -> None:
        """The run was admitted: its places in line go."""
        for lim in (run.gate or Gate()).limits:
            self.control.stop_waiting(lim.line_id, lim.turns, waiting_place(run))

    def release(self, run: RunRecord, *, looked: bool = True) -> None:
        """A run finished: let go of its limits, and let each one's next run go.
        `looked=False` (a repeat is likely: the sweeper's) reads each limit's holders
        first, and writes only to one the run still holds."""
        limits = (run.gate or Gate()).limits
        left = []
        for lim in limits:
            if run.started_at is None:  # it never started: its place in line goes
                self.control.stop_waiting(lim.line_id, lim.turns, waiting_place(run))
            if not looked:
                holders = self.control.holders(lim.line_id, self.clock())
                if run.run_id not in holders.runs and run.run_id != holders.legacy:
                    # Let go already; a hand-off lost with its process is made here
                    # when the limit has room.
                    left.append((holders.count() < lim.limit, holders))
                    continue
            left.append(self.control.let_go_of(lim.line_id, [run.run_id]))
        full: set[str] = set()
        for lim, (freed, holders) in zip(limits, left, strict=True):
            # Released before (a repeat, the sweeper's): the next run went then, or the
            # sweeper's look at a waiting run lets it go.
            if freed:
                started = self.next(lim, holders, frozenset(full))
                if holders.count() + len(started) >= lim.limit:
                    full.add(lim.line_id)

    # ---- the next run of a limit ---------------------------------------------------------

    def next(self, lim: Limit, holders: Holders | None = None,
             full: frozenset[str] = frozenset()) -> list[RunRecord]:
        """While the limit has room, start its next waiting run: keys in turns, then
        place. A run another of its limits holds back (or one of `full`, the limits a
        hand-off found full) is passed over this time; one that holds the limit
        already is being started by another process."""
        passed: set[str] = set()
        started: list[RunRecord] = []
        fails = tries = 0
        whole: list[Turn] | None = None  # the line's keys, when one look read them all
        while len(started) < STARTS and fails < PASSES and tries < TRIES:
            now = self.clock()
            if holders is None:
                holders = self.control.holders(lim.line_id, now)
            if holders.count() >= lim.limit:
                break
            if whole is not None and {t.turns for t in whole} <= passed:
                break  # every waiting key was passed over
            chosen, whole = self._choose(lim, now, passed, whole)
            if chosen is None:
                break
            turn, first, then = chosen
            tries += 1
            limits = _limits_of(first.gate)
            if first.run_id in holders.runs:
                # It took its limits and has not started: another process is starting
                # it, or one died doing so. Carrying it on is safe either way.
                passed.add(turn.turns)
                run = self._carry(first, limits, lim, turn, then)
                if run is not None:
                    started.append(run)
                holders = None
                continue
            if any(each.line_id in full for each in limits):
                passed.add(turn.turns)  # a limit of its is full, as this hand-off found
                continue
            refused = self._take(first.run_id, limits, fresh=True)
            if refused:
                passed.add(turn.turns)
                if lim.line_id in refused:  # this limit filled meanwhile (or took it)
                    fails += 1
                    holders = None
                else:  # another of its limits is full: the next key may fit
                    full = full | set(refused)
                continue
            run = self._start(first.run_id, limits, lim, turn, then)
            whole = None  # the turns moved
            if run is not None:
                started.append(run)
                holders = Holders(holders.runs | {first.run_id}, holders.legacy)
        return started

    def _choose(self, lim: Limit, now: float, passed: set[str], whole: list[Turn] | None
                ) -> tuple[tuple[Turn, Waiting, Sk] | None, list[Turn] | None]:
        """The next run of a limit, the place of the one after it in its key; from the
        first keys in turn order, the one of the lowest round whose first run has the
        best place. `whole`: every key of the line, as a look just read them (and the
        second value, when this look read them all)."""
        after: Sk | None = None
        while True:
            page = (whole if whole is not None and after is None
                    else self.control.next_turns(lim.line_id, now, KEYS_A_LOOK, after))
            more = len(page) >= KEYS_A_LOOK and (whole is None or after is not None)
            last = page[-1] if page else None
            keys = [t for t in page if t.turns not in passed]
            while keys:
                low = min(t.round for t in keys)
                turn = min((t for t in keys if t.round == low), key=lambda t: (t.best, t.turns))
                waiting = self.control.first_waiting(lim.line_id, turn.turns, now, 2)
                if waiting:
                    then = waiting[1].place if len(waiting) > 1 else LAST
                    return ((Turn(low, turn.turns), waiting[0], then),
                            None if more or after is not None else page)
                self._leave(lim, Turn(low, turn.turns))
                keys = [t for t in keys if t.turns != turn.turns]
                page = [t for t in page if t.turns != turn.turns]
            if not more or last is None:
                return None, None
            after = round_sk(last.round, last.turns)

    def _take(self, run_id: str, limits: tuple[Limit, ...], *,
              fresh: bool = False) -> list[str]:
        """Take every limit of the run: [] when taken, else the lines without room."""
        return self.control.take_limits([(lim.line_id, lim.limit) for lim in limits], run_id,
                                        fresh=fresh)

    def _carry(self, first: Waiting, limits: tuple[Limit, ...], lim: Limit, turn: Turn,
               then: Sk) -> RunRecord | None:
        """A waiting run that holds its limits: start it if it is still queued; else
        its place in line is left over (it started, or ended): it goes."""
        current = self.store.runs.get_run(first.run_id, self.clock())
        if current is not None and current.status is RunStatus.QUEUED:
            return self._start(first.run_id, limits, lim, turn, then)
        if current is None or current.status.terminal:
            for each in limits:
                self.control.let_go_of(each.line_id, [first.run_id])
        self.control.stop_waiting(lim.line_id, turn.turns, first.place)
        if current is not None:
            self.admitted(current)
        return None

    def _leave(self, lim: Limit, turn: Turn) -> None:
        """The key has no run waiting: it leaves the turns; a run that came meanwhile
        (its join found the key still in them) brings it back."""
        self.control.leave_turns(lim.line_id, turn)
        for w in self.control.first_waiting(lim.line_id, turn.turns, self.clock(), 1):
            self.control.join_turns(lim.line_id, turn.turns, w.place, self.clock())

    def _start(self, run_id: str, limits: tuple[Limit, ...], lim: Limit | None,
               turn: Turn | None, then: Sk | None = None) -> RunRecord | None:
        """Start a run that took its limits (None: it was no longer queued, and what it
        took goes back, with its places in line)."""
        started = self.admit_id(run_id, {"group": limits[0].group, "key": limits[0].key})
        if started is None:
            current = self.store.runs.get_run(run_id, self.clock())
            if current is not None and current.status is RunStatus.RUNNING:
                return None  # another process started it: what it holds is its own
            for each in limits:
                self.control.let_go_of(each.line_id, [run_id])  # what it took goes back
            if current is not None:
                self.admitted(current)
            elif current is None and lim is not None and turn is not None:
                for w in self.control.first_waiting(lim.line_id, turn.turns, self.clock(), 1):
                    if w.run_id == run_id:
                        self.control.stop_waiting(lim.line_id, turn.turns, w.place)
            return None
        if lim is not None and turn is not None:
            if then == LAST:  # its key has no other run waiting: it leaves the turns
                self._leave(lim, turn)
            else:
                self.control.advance_turns(lim.line_id, turn, then or LAST)
        return started

    def _now_or_never(self, run: RunRecord, limits: tuple[Limit, ...]) -> RunRecord:
        """Policy skip: start now, or be refused naming the limit that is full."""
        now = self.clock()
        for attempt in range(2):
            if not self._take(run.run_id, limits):
                started = self._start(run.run_id, limits, None, None)
                return started if started is not None else self.reread(run)
            if attempt == 0:
                for lim in limits:
                    self.drop_finished(lim, now)
        full = next((lim for lim in limits
                     if self.control.holders(lim.line_id, now).count() >= lim.limit),
                    limits[0])
        names = self.control.holders(full.line_id, now).all()
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        what = (f"busy with run {shown}" if full.limit == 1
                else f"at its limit of {full.limit} (runs {shown})")
        return self.refuse(run, Code.CONCURRENCY_BUSY,
                           f"group {full.group!r} key {full.key!r} is {what}")

    def drop_finished(self, lim: Limit, now: float) -> frozenset[str]:
        """Drop the holders of a full limit whose run has finished or is gone, and
        start those still queued (a start that died between taking its limits and
        starting); the holders left."""
        holders = self.control.holders(lim.line_id, now)
        ids = holders.all()
        if len(ids) < lim.limit:
            return frozenset(ids)
        runs = self.store.runs.get_runs(ids, now)
        gone = [rid for rid in ids if rid not in runs or runs[rid].status.terminal]
        if gone:
            self.control.let_go_of(lim.line_id, gone)
            log.info("limit %s: dropped finished holders %s", lim.line_id, gone)
        for rid in ids:
            run = runs.get(rid)
            if run is not None and run.status is RunStatus.QUEUED and run.gate is not None:
                self._start(rid, run.gate.limits, None, None)
        return frozenset(ids) - set(gone)

    def _replace_others(self, run: RunRecord, limits: tuple[Limit, ...], now: float) -> None:
        """Policy cancel-running: cancel the oldest holders so that this run fits, and
        the runs waiting before it."""
        reason = f"replaced by run {run.run_id}"
        mine = waiting_place(run)
        for lim in limits:
            if lim.policy is not GroupPolicy.CANCEL_RUNNING:
                continue
            ids = [rid for rid in self.drop_finished(lim, now) if rid != run.run_id]
            over = len(ids) - lim.limit + 1
            if over > 0:
                found = self.store.runs.get_runs(ids, now)
                oldest = sorted(ids, key=lambda r: (found[r].created_at, r) if r in found
                                else (0.0, r))
                for rid in oldest[:over]:
                    self.cancel(rid, reason)
            for turns in self._turns_keys(lim, now):
                for w in self.control.first_waiting(lim.line_id, turns, now, REPLACED):
                    if w.place >= mine:
                        break  # by place: the rest of this key came after it
                    if w.run_id != run.run_id:
                        self.cancel(w.run_id, reason)

    def _turns_keys(self, lim: Limit, now: float) -> list[str]:
        """Every turns key waiting for the limit (its own, and the others'): a limit
        without a key takes turns by another limit's, so runs of many keys wait."""
        keys = [lim.turns]
        after: Sk | None = None
        while len(keys) < REPLACED:
            page = self.control.next_turns(lim.line_id, now, KEYS_A_LOOK, after)
            keys += [t.turns for t in page if t.turns not in keys]
            if len(page) < KEYS_A_LOOK:
                break
            after = round_sk(page[-1].round, page[-1].turns)
        return keys
