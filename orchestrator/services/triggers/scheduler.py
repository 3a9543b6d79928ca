"""Schedules: workflows that fire by themselves (`schedule: {cron | every, timezone}`).

Each scheduled workflow has one control item, `schedule#<workflow>`, holding the next
tick due (`next_fire`), a pause flag and what the last fire did. Any number of sweepers
tick at once, safely: a fire's run ids are derived from the workflow and the tick (and
the forEach key), so two schedulers firing the same tick create each run once, and the
cursor moves on with a conditional write that names the tick it read.

Missed fires: a tick is fired while it is at most ORCH_SCHEDULE_GRACE (5 minutes by
default) late. After longer downtime the missed ticks are not replayed: the schedule
records how many it missed and resumes at the next future tick. Pausing works the same
way: `resume` starts again from the next tick after now.

forEach: a fire fetches the rows (a static `items` list, or a signed POST to the
backend + route, which must answer a JSON array) and starts one run per row, with the
row as the run's input. `concurrency: skip | allow | replace` then applies per row key
(`forEach.key`), so one tenant's slow run blocks nobody else's. A fire whose rows
cannot be fetched is retried by the next sweep until it is past the grace, then counted
as missed, with the error shown by `orchestrator schedules list`."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from orchestrator.adapters.invoker import Call, Invoker
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import schedule_key
from orchestrator.engine.attempts import OutcomeKind
from orchestrator.engine.ticks import describe, next_tick, ticks_between
from orchestrator.errors import Code, NotFound, OrchestratorError, UsageError
from orchestrator.services.runs import RunService
from orchestrator.strict_json import dumps

__all__ = ["Scheduler", "fire_run_id"]

log = logging.getLogger(__name__)

MAX_ROWS = 10_000
# A forEach fire starts its runs this many at a time: each start is a few requests in
# turn (the run's row, its first steps, its dispatch), so 10,000 rows one after another
# took minutes against AWS's latencies (tests/bench/aws_scale.py, issue 39), past an API's
# and a sweep's time. Each start stays idempotent (its run id is the tick's and the key's).
# Only for a workflow without a gate shared across rows (see `_parallel_starts`).
FIRE_STARTS = 16
# The run ids a schedule's item keeps of its last fire (and `last_run_count`, all of
# them): 10,000 ids are over DynamoDB's 400 KB item, and a cursor that cannot be written
# fires its tick again on every sweep.
LAST_RUNS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def fire_run_id(workflow: str, tick: float, key: str | None, source: str = "") -> str:
    base = f"{workflow[:120]}-{source}{int(tick * 1000)}"
    if key is None:
        return base
    slug = _UNSAFE.sub("_", key)[:40]
    if slug != key or len(key) > 40:
        slug += "-" + hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{base}-{slug}"


class FireFailed(OrchestratorError):
    """The forEach rows could not be fetched (the backend failed): worth retrying."""

    code = Code.FIRE_FAILED
    retryable = True


@dataclass
class Scheduler:
    control: Control
    runs: RunService
    clock: Callable[[], float]
    _: KW_ONLY
    grace: float  # how late a tick may still fire
    max_body: int  # the largest forEach row answer read
    # Made on the first forEach row fetch (most schedules never need one).
    _invoker: Invoker | None = field(default=None, init=False, repr=False)

    @property
    def scheduled(self) -> dict[str, Any]:
        return {n: wf for n, wf in self.runs.manifest.workflows.items() if wf.schedule}

    def _workflow(self, name: str) -> Any:
        wf = self.scheduled.get(name)
        if wf is None:
            known = ", ".join(sorted(self.scheduled)) or "none"
            raise NotFound(f"no schedule for workflow {name!r} (scheduled: {known})")
        return wf

    # ---- the tick ----------------------------------------------------------------------

    def tick(self) -> list[str]:
        """Fire every schedule that is due; returns the run ids started."""
        started: list[str] = []
        for name, wf in self.scheduled.items():
            try:
                started += self.tick_one(name, wf)
            except OrchestratorError as exc:
                log.warning("schedule %s: %s", name, exc)
        return started

    def tick_one(self, name: str, wf: Any) -> list[str]:
        now = self.clock()
        state = self._state(name, wf, now)
        if state["paused"] or state["next_fire"] > now:
            return []
        due = state["next_fire"]
        following = next_tick(wf.schedule, max(due, now))
        if now - due > self.grace:
            missed = 1 + len(_between(wf, due, now))
            self._advance(name, state, following, missed=missed, runs=None)
            log.warning("schedule %s: %d tick(s) missed (due %.0f), next at %.0f",
                        name, missed, due, following)
            return []
        try:
            runs = self.fire(name, wf, due)
        except OrchestratorError as exc:
            self._record_error(name, state, str(exc))
            raise
        self._advance(name, state, following, missed=0, runs=runs)
        return runs

    def fire(self, name: str, wf: Any, tick: float, *, source: str = "") -> list[str]:
        """Start the runs of one fire: one, or one per forEach row."""
        trigger = {"source": "schedule" if not source else "manual", "tick": tick}
        if wf.for_each is None:
            run, _ = self.runs.start(
                name, None, fire_run_id(name, tick, None, source), trigger=trigger,
                overlap=_overlap(wf),
            )
            return [run.run_id]
        rows = self.rows(name, wf, tick)
        keys = [_row_key(row, wf.for_each.key) for row in rows]  # every row checked first

        def start(row: Any, key: str) -> str:
            run, _ = self.runs.start(
                name, row, fire_run_id(name, tick, key, source), trigger={**trigger, "key": key},
                overlap=_overlap(wf), fire_key=key,
            )
            return run.run_id

        if len(rows) <= 1 or not _parallel_starts(wf):
            return [start(row, key) for row, key in zip(rows, keys, strict=True)]
        with ThreadPoolExecutor(min(FIRE_STARTS, len(rows)), "fire") as pool:
            # In row order. The first failure is raised once the starts under way have
            # ended, those not begun are dropped: the tick's next fire (the cursor has not
            # moved) makes them, and finds the others made.
            # Each start in a copy of this thread's context: its log fields and its trace
            # (logs.py, telemetry.py) are the fire's (a context runs on one thread at once).
            contexts = [contextvars.copy_context() for _ in rows]
            return list(pool.map(lambda c, row, key: c.run(start, row, key),
                                 contexts, rows, keys))

    def rows(self, name: str, wf: Any, tick: float) -> list[Any]:
        fe = wf.for_each
        if fe.items is not None:
            return list(fe.items)
        if fe.backend is None or fe.route is None:
            raise FireFailed(f"workflow {name!r}: forEach has no row source this engine can "
                             "read (use items, or backend + route)")
        backend = self.runs.manifest.backends[fe.backend]
        if self._invoker is None:
            self._invoker = Invoker(max_body=self.max_body, clock=self.clock)
        result = self._invoker.invoke(Call(
            url=backend.url + fe.route, secret=backend.secret, run_id=f"{name}-rows",
            workflow=name, step="forEach", attempt=1, timeout=backend.timeout or 30.0,
            input={"tick": tick}, steps=None, payload={},
        ))
        outcome = result.outcome
        if outcome.kind is not OutcomeKind.SUCCESS:
            raise FireFailed(f"workflow {name!r}: forEach rows from {fe.backend}{fe.route}"
                             f" failed: {dumps(outcome.error)}")
        rows = outcome.output
        if not isinstance(rows, list):
            raise FireFailed(f"workflow {name!r}: forEach rows from {fe.backend}{fe.route}"
                             " must be a JSON array")
        if len(rows) > MAX_ROWS:
            raise FireFailed(f"workflow {name!r}: {len(rows)} forEach rows, more than "
                             f"{MAX_ROWS}")
        return rows

    # ---- commands ----------------------------------------------------------------------

    def list_all(self) -> list[dict[str, Any]]:
        return [self.show(name) for name in self.scheduled]

    def show(self, name: str) -> dict[str, Any]:
        wf = self._workflow(name)
        state = self._state(name, wf, self.clock())
        return {
            "workflow": name,
            "schedule": describe(wf.schedule),
            "paused": state["paused"],
            "next_fire": None if state["paused"] else state["next_fire"],
            "last_fire": state.get("last_fire"),
            "last_runs": state.get("last_runs") or [],
            "last_run_count": state.get("last_run_count", len(state.get("last_runs") or [])),
            "missed": state.get("missed", 0),
            "last_error": state.get("last_error"),
            "concurrency": _overlap(wf) if wf.group is None else "group",
            "for_each": wf.for_each is not None,
        }

    def pause(self, name: str) -> dict[str, Any]:
        wf = self._workflow(name)
        self._state(name, wf, self.clock())
        self.control.pause_schedule(schedule_key(name))
        return self.show(name)

    def resume(self, name: str) -> dict[str, Any]:
        wf = self._workflow(name)
        now = self.clock()
        self._state(name, wf, now)
        self.control.resume_schedule(schedule_key(name), next_tick(wf.schedule, now))
        return self.show(name)

    def trigger(self, name: str) -> dict[str, Any]:
        """Fire now, out of schedule (the cursor does not move)."""
        wf = self._workflow(name)
        runs = self.fire(name, wf, self.clock(), source="manual-")
        return {"workflow": name, "runs": runs}

    # ---- the cursor --------------------------------------------------------------------

    def _state(self, name: str, wf: Any, now: float) -> dict[str, Any]:
        """The schedule's item, created (or reset after a change of cadence) first."""
        spec = describe(wf.schedule)
        pk = schedule_key(name)
        cursor = self.control.schedule(pk, now)
        if cursor is None or cursor.spec != spec:
            old = None if cursor is None else cursor.spec
            # False: another scheduler set it up first; read theirs.
            self.control.reset_schedule(pk, spec, next_tick(wf.schedule, now), old_spec=old)
            cursor = self.control.schedule(pk, now)
        if cursor is None:  # expired or deleted at once: as an empty item reads
            return {"next_fire": float("inf"), "paused": False}
        return {"next_fire": cursor.next_fire, "paused": cursor.paused, **cursor.doc}

    def _advance(
        self, name: str, state: dict[str, Any], following: float, *, missed: int,
        runs: list[str] | None,
    ) -> None:
        """Move the cursor from the tick `state` read to `following` (once: guarded)."""
        due = state["next_fire"]
        doc = {
            "last_fire": due if runs is not None else state.get("last_fire"),
            "last_runs": runs[:LAST_RUNS] if runs is not None else state.get("last_runs", []),
            "last_run_count": len(runs) if runs is not None else state.get(
                "last_run_count", len(state.get("last_runs") or [])),
            "missed": int(state.get("missed", 0)) + missed,
            "last_error": None,
        }
        # False: another scheduler moved it on; the runs were the same ones.
        self.control.advance_schedule(schedule_key(name), due, following, doc)

    def _record_error(self, name: str, state: dict[str, Any], error: str) -> None:
        doc = {k: v for k, v in state.items() if k not in ("next_fire", "paused")}
        doc["last_error"] = {"tick": state["next_fire"], "message": error[:500]}
        self.control.record_schedule(schedule_key(name), doc)


def _overlap(wf: Any) -> str:
    overlap = getattr(wf, "overlap", None) or "skip"
    return str(overlap)


def _parallel_starts(wf: Any) -> bool:
    """Whether a fire may start its rows' runs several at a time: only when no admission
    gate is shared across rows. A throttle, a debounce or a concurrency group admits
    through one conditional item (a throttle's `tat`, a burst, a group's lock) that
    parallel starts would contend on (a throttle gives up after a bounded number of
    rounds, a burst with StoreError "is contended", failing the tick), and the row that
    wins a slot or a queue place would be the fastest thread's, not the first row's. The
    `concurrency: skip | allow | replace` string is checked per row key: no contention."""
    return (getattr(wf, "throttle", None) is None and getattr(wf, "debounce", None) is None
            and getattr(wf, "group", None) is None)


def _row_key(row: Any, field: str) -> str:
    if isinstance(row, Mapping):
        if field not in row:
            raise UsageError(f"forEach row {dumps(row)[:200]} has no key field {field!r}")
        value = row[field]
    else:
        value = row
    return value if isinstance(value, str) else dumps(value)


def _between(wf: Any, start: float, end: float) -> list[float]:
    return ticks_between(wf.schedule, start, end, limit=100_000)
