"""The checks of durable runs (durable_app's workflows), from a Snapshot: the rows (run,
drivers), the journal, the signals and parallel aggregates, the step bodies' executions
(ledger) and what the harness sent (drive). Each violation names its check:

- `driver-transition`, `left-terminal`, `history-incomplete`, `attempt-reused`,
  `retry-budget`, `driver-status`: every driver row (`$run`, `$run/<scope>`) moves along
  engine.states' table (`run.waiting` only while dispatched; a driver's history starts
  at its last wait, which the engine's suspend writes in place of the history), its
  attempts count up between two waits and stay within the budget, and a successful run's
  drivers all succeeded;
- `journal-place`: each scope's places are 0, 1, 2... with no gap, and the op id at
  each is the one the SDK gives the operation there (one entry per place is the store's
  write-once put: what is checked is that it holds the right operation);
- `step-value`, `step-attempt`, `idempotency-key`: a committed step's value is one a
  body execution of that run and step returned (so the body ran at least once), at the
  attempt the entry records, every earlier attempt failed, and every execution of one
  step carried the one key `<run>:<op id>`;
- `signal-wait`, `signal-twice`, `signal-lost`, `signal-payload`, `signal-fifo`,
  `signal-resend`, `signal-unanswered`: each wait resolved once (a signal names the wait
  that took it, and that wait recorded it with its payload; no signal taken twice);
  every signal the harness sent (once per Idempotency-Key) was queued once and taken by
  a wait of a successful run, with the payload of its first send, in the order sent
  (per name); a resend queued nothing;
- `event-missed`, `event-wrong`, `event-late-taken`, `timeout-early`: an event wait
  resolved by the harness's event if it came before the timeout, never by one emitted
  after; a timeout no sooner than declared;
- `sleep-early`: a sleep lasted its length, and nothing after it ran sooner;
- `parallel-peak`, `parallel-aggregate`: at most MAX_PARALLEL branches in flight, by
  the ledger (a branch from its first body's start to the end of the execution whose
  value its last step committed) and by the rows (from its driver row's `step.ready` to
  its result entry's end); the aggregate counts every branch done;
- `output`, `run-status`: the run succeeded, and its output is what its journal (so the
  ledger) says it must be;
- `view`, `history-api`: the API shows the journal, the output and the rows' history."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from functions.sdk.durable.call import RESULT_POS, op_id
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import STEP_TRANSITIONS, RunStatus, StepStatus
from tests.chaos.durable_app import (
    AUDITED,
    BRANCH_SLEEP,
    CHAIN_SLEEP,
    CHAIN_STEPS,
    EVENT_SHORT_TIMEOUT,
    MAX_PARALLEL,
    PARALLEL_BRANCHES,
    SIGNAL_WAITS,
)
from tests.chaos.jsonl import digest
from tests.chaos.snapshot import Body, Snapshot

__all__ = ["DurableChecks", "signal_id"]

S = StepStatus
STEP_EFFECT = {
    "step.ready": S.READY, "step.started": S.DISPATCHED, "step.retrying": S.DISPATCHED,
    "step.succeeded": S.SUCCESS, "step.failed": S.FAILED, "step.skipped": S.SKIPPED,
}
# Entries that change no status, and the statuses they may come in.
STEP_FLAGS = {"step.redispatched": (S.READY, S.DISPATCHED), "step.stopping": (S.DISPATCHED,),
              "run.waiting": (S.DISPATCHED,)}
_VIEW_STATUS = {"ok": "success", "error": "failed", "timeout": "timed_out"}
ACCEPTED = (200, 201, 202)

Bad = Callable[..., None]


def signal_id(key: str) -> str:
    """The id the API gives a signal sent with Idempotency-Key `key` (services/signals)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _sleep_of(workflow: str, scope: str) -> float | None:
    if workflow == "dchain" and not scope:
        return CHAIN_SLEEP
    if workflow == "dparallel" and scope:
        return BRANCH_SLEEP
    return None


class DurableChecks:
    """The checks above; `bad(check, message, run, step, at)` reports a violation,
    `error_doc(doc, where, run, step)` checks an error's form (checker.py's)."""

    def __init__(self, snap: Snapshot, bad: Bad, findings: Counter[str], tol: float,
                 error_doc: Callable[..., None] = lambda *a, **k: None) -> None:
        self.snap = snap
        self.bad = bad
        self.error_doc = error_doc
        self.findings = findings
        self.tol = tol
        self.bodies: dict[tuple[str, str], list[Body]] = defaultdict(list)
        for b in snap.bodies:
            self.bodies[(b.run, b.op)].append(b)
        self.sent: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for d in snap.drive:
            self.sent[str(d.get("run"))].append(d)
        # Figures: the peak of branches in flight per parallel run, how late sleeps
        # ended, how long a signal sent took to be taken.
        self.peaks: dict[str, dict[str, int]] = {}
        self.sleep_over: list[float] = []
        self.signal_to_taken: list[float] = []
        self.stale: int = 0

    # ---- one run -----------------------------------------------------------------------

    def run(self, run: RunRecord, rows: dict[str, StepRecord]) -> None:
        rid = run.run_id
        journal = self.snap.journals.get(rid, [])
        at = {(str(e.get("scope", "")), int(e["pos"])): e for e in journal}
        if run.status.terminal and run.status is not RunStatus.SUCCESS:
            # Every workflow of durable_app succeeds whatever the faults: nothing in them
            # fails for good, and nobody cancels them.
            self.bad("run-status", f"ended {run.status.value}: {run.error}", rid)
        for row in rows.values():
            self.driver(run, row)
        if run.status is RunStatus.SUCCESS:
            for name, row in rows.items():
                if row.status is not S.SUCCESS:
                    self.bad("driver-status", f"the run succeeded, driver {name} is "
                             f"{row.status.value}", rid, name)
        if DRIVER not in rows:
            self.bad("history-incomplete", "no driver row", rid)
        self.places(run, journal)
        for e in journal:
            if e.get("kind") == "step":
                self.step(run, e)
        self.stray_bodies(run, at)
        self.waits(run, journal, at)
        self.parallel(run, journal, at, rows)
        self.output(run, at)

    # ---- driver rows ------------------------------------------------------------------

    def driver(self, run: RunRecord, row: StepRecord) -> None:
        rid, name = run.run_id, row.step
        # A driver keeps its history from its last wait on (the engine replaces it at
        # each wait: the journal holds the run's story); a wait is only ever written
        # while dispatched.
        first = row.history[0].get("type") if row.history else None
        status = S.DISPATCHED if first == "run.waiting" else S.BLOCKED
        segment: list[int] = []
        self.error_doc(row.error, "driver error", rid, name)
        for e in row.history:
            typ, at = e.get("type", ""), float(e.get("at", 0.0))
            self.error_doc(e.get("error"), f"history {typ}", rid, name, full=False)
            if status.terminal:
                self.bad("left-terminal", f"{typ} after {status.value}", rid, name, at)
            if typ in STEP_EFFECT:
                new = STEP_EFFECT[typ]
                if new not in STEP_TRANSITIONS[status]:
                    self.bad("driver-transition", f"{status.value} -> {new.value} ({typ})",
                             rid, name, at)
                status = new
            elif typ in STEP_FLAGS:
                if status not in STEP_FLAGS[typ]:
                    self.bad("driver-transition", f"{typ} while {status.value}", rid, name, at)
            else:
                self.findings[f"unknown driver entry {typ}"] += 1
            attempt = int(e.get("attempt") or 0)
            if typ == "run.waiting":
                segment = []  # a wait starts the count again (the attempt is reset)
            elif typ == "step.started":
                if segment and attempt <= segment[-1]:
                    self.bad("attempt-reused", f"attempt {attempt} started after "
                             f"{segment[-1]} with no wait between", rid, name, at)
                segment.append(attempt)
                if attempt > row.max_attempts:
                    self.bad("retry-budget", f"attempt {attempt} of {row.max_attempts}",
                             rid, name, at)
            elif typ == "step.retrying" and attempt not in segment:
                self.bad("history-incomplete", f"step.retrying of attempt {attempt}, not "
                         "started since the last wait", rid, name, at)
        if status is not row.status:
            self.bad("history-incomplete", f"row is {row.status.value}, history ends "
                     f"{status.value}", rid, name)
        ended = [float(e["at"]) for e in run.history if e.get("type") in (
            "run.success", "run.failed", "run.killed")]
        late = [float(e["at"]) for e in row.history if e.get("type") == "step.started"
                and ended and float(e["at"]) > ended[0] + self.tol]
        if late:
            self.bad("started-after-finish", f"started {late[0] - ended[0]:.3f}s after its run "
                     "finished", rid, name, late[0])

    # ---- the journal ------------------------------------------------------------------

    def places(self, run: RunRecord, journal: list[dict[str, Any]]) -> None:
        rid = run.run_id
        by_scope: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in journal:
            by_scope[str(e.get("scope", ""))].append(e)
        for scope, entries in by_scope.items():
            ops = sorted((e for e in entries if int(e["pos"]) != RESULT_POS),
                         key=lambda e: int(e["pos"]))
            counts: Counter[str] = Counter()
            for i, e in enumerate(ops):
                if int(e["pos"]) != i:
                    self.bad("journal-place", f"scope {scope!r}: place {e['pos']} where {i} "
                             f"was next ({e.get('kind')} {e.get('name')!r})", rid)
                    break
                name = str(e.get("name"))
                want = op_id(scope, name, counts[name])
                counts[name] += 1
                if e.get("id") != want:
                    self.bad("journal-place", f"scope {scope!r} place {i}: op id {e.get('id')}"
                             f" is not {name!r}'s there ({want})", rid)

    def step(self, run: RunRecord, e: dict[str, Any]) -> None:
        """One committed step: its value is an execution's, at the attempt it says."""
        rid, op, name = run.run_id, str(e.get("id")), str(e.get("name"))
        runs = self.bodies.get((rid, op), [])
        if e.get("status") != "ok":
            self.bad("step-value", f"step {name!r} ({e.get('scope')}#{e.get('pos')}) recorded "
                     f"{e.get('status')}: {e.get('error')}", rid, name)
            return
        want = digest(e.get("value"))
        mine = [b for b in runs if b.end is not None and b.end.get("out") == want]
        where = f"step {name!r} ({e.get('scope')}#{e.get('pos')})"
        if not mine:
            self.bad("step-value", f"{where}: committed value {want} is none of the "
                     f"{len(runs)} executions' of its body", rid, name)
            return
        attempt = int(e.get("attempts") or 0)
        if mine[0].attempt != attempt:
            self.bad("step-attempt", f"{where}: the value committed as attempt {attempt} came "
                     f"from attempt {mine[0].attempt}", rid, name)
        for k in range(1, attempt):
            if not any(b.attempt == k and b.end is not None and b.end.get("error")
                       for b in runs):
                self.bad("step-attempt", f"{where}: attempt {attempt} committed, and no "
                         f"execution of attempt {k} failed", rid, name)
        ended = float(e.get("ended") or 0.0)
        for b in runs:
            if b is not mine[0] and b.t > ended + self.tol:
                # A call made with a journal read before this commit (a worker frozen
                # past its lease): at least once, allowed, counted.
                self.stale += 1
                self.findings["step body executed again after its step committed"] += 1

    def stray_bodies(self, run: RunRecord, at: dict[tuple[str, int], dict[str, Any]]) -> None:
        """Every execution of the run's bodies carried its step's one key."""
        rid = run.run_id
        keys: dict[str, set[str]] = defaultdict(set)
        for (r, op), runs in self.bodies.items():
            if r != rid:
                continue
            for b in runs:
                keys[op].add(str(b.start.get("key")))
                if b.start.get("key") != f"{rid}:{op}":
                    self.bad("idempotency-key", f"step {b.start.get('step')!r} attempt "
                             f"{b.attempt} ran with key {b.start.get('key')!r}", rid,
                             str(b.start.get("step")), b.t)
        for op, ks in keys.items():
            if len(ks) > 1:
                self.bad("idempotency-key", f"op {op}: {len(ks)} keys {sorted(ks)}", rid)

    # ---- waits ------------------------------------------------------------------------

    def waits(self, run: RunRecord, journal: list[dict[str, Any]],
              at: dict[tuple[str, int], dict[str, Any]]) -> None:
        for e in journal:
            seconds = _sleep_of(run.workflow, str(e.get("scope", "")))
            if e.get("kind") == "sleep" and seconds is not None:
                self.sleep(run, e, seconds, at)
        if run.workflow == "dsignals":
            self.signals(run, journal)
        elif run.workflow in ("devent", "dtimeout"):
            self.event(run, journal)

    def sleep(self, run: RunRecord, e: dict[str, Any], seconds: float,
              at: dict[tuple[str, int], dict[str, Any]]) -> None:
        rid, scope, pos = run.run_id, str(e.get("scope", "")), int(e["pos"])
        started, ended = float(e["started"]), float(e["ended"])
        if ended < started + seconds - self.tol:
            self.bad("sleep-early", f"sleep at {scope}#{pos} ended {ended - started:.3f}s after "
                     f"it began ({seconds:g}s)", rid, at=ended)
        self.sleep_over.append(ended - started - seconds)
        nxt = at.get((scope, pos + 1))
        if nxt is not None and nxt.get("kind") == "step":
            for b in self.bodies.get((rid, str(nxt.get("id"))), []):
                if b.t < started + seconds - self.tol:
                    self.bad("sleep-early", f"step {nxt.get('name')!r} ran {b.t - started:.3f}s"
                             f" after the {seconds:g}s sleep before it began", rid, at=b.t)

    def signals(self, run: RunRecord, journal: list[dict[str, Any]]) -> None:
        rid = run.run_id
        queued = {s.id: s for s in self.snap.signals.get(rid, [])}
        waits = [e for e in journal if e.get("kind") == "signal"]
        taken: dict[str, dict[str, Any]] = {}
        for e in waits:
            place = f"{e.get('scope', '')}#{e['pos']}"
            if e.get("status") != "ok":
                self.bad("signal-wait", f"wait {e.get('name')!r} at {place} ended "
                         f"{e.get('status')}", rid)
                continue
            sid = str(e.get("signal"))
            if sid in taken:
                self.bad("signal-twice", f"signal {sid} recorded by the waits at {place} and "
                         f"{taken[sid].get('scope', '')}#{taken[sid]['pos']}", rid)
            taken[sid] = e
            sig = queued.get(sid)
            if sig is None:
                self.bad("signal-wait", f"wait at {place} recorded signal {sid}, which was "
                         "never queued", rid)
                continue
            if sig.taken_by != place:
                self.bad("signal-wait", f"wait at {place} recorded signal {sid}, taken by "
                         f"{sig.taken_by!r}", rid)
            if sig.name != e.get("name"):
                self.bad("signal-wait", f"wait {e.get('name')!r} at {place} recorded signal "
                         f"{sid} named {sig.name!r}", rid)
            if digest(sig.payload) != digest(e.get("value")):
                self.bad("signal-payload", f"wait at {place} recorded {e.get('value')!r}, the "
                         f"signal carries {sig.payload!r}", rid)
        for sig in queued.values():
            if sig.taken_by is not None and sig.id not in taken:
                self.bad("signal-lost", f"signal {sig.name} {sig.id} was taken by "
                         f"{sig.taken_by!r}, and no wait recorded it", rid)
        if [e.get("name") for e in waits] != list(SIGNAL_WAITS) and run.status.terminal:
            self.bad("signal-wait", f"waits {[e.get('name') for e in waits]}, the workflow "
                     f"waits for {list(SIGNAL_WAITS)}", rid)
        self.sent_signals(run, queued, waits)

    def sent_signals(self, run: RunRecord, queued: dict[str, Any],
                     waits: list[dict[str, Any]]) -> None:
        """What the harness sent: each key queued once, taken, in order, by the waits of
        a successful run; its resends queued nothing."""
        rid = run.run_id
        order: dict[str, list[str]] = defaultdict(list)
        by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for d in sorted((d for d in self.sent.get(rid, []) if d.get("ev") == "signal"),
                        key=lambda d: float(d["t"])):
            by_key[str(d["key"])].append(d)
        ids = self.snap.signal_ids.get(rid, set())
        for key, sends in by_key.items():
            first = sends[0]
            sid = signal_id(key)
            if not any(d.get("status") in ACCEPTED for d in sends):
                self.bad("signal-unanswered", f"signal {first['signal']} (key {key}) was never "
                         f"answered: {[d.get('status') for d in sends]}", rid)
                continue
            order[str(first["signal"])].append(sid)
            for d in sends[1:]:
                if d.get("status") in ACCEPTED and d.get("duplicate") is not True:
                    self.bad("signal-resend", f"resend {d.get('resend')} of key {key} was "
                             "answered as a new signal", rid)
            if (first["signal"], sid) not in ids:
                self.bad("signal-lost", f"signal {first['signal']} (key {key}) has no id marker",
                         rid)
            sig = queued.get(sid)
            if sig is None:
                self.bad("signal-lost", f"signal {first['signal']} (key {key}) was accepted and "
                         "is not queued", rid)
                continue
            if sig.payload != {"key": key, "n": 0}:
                self.bad("signal-payload", f"signal {key} carries {sig.payload!r}, not its "
                         "first send's", rid)
            if sig.taken_by is None or run.status is not RunStatus.SUCCESS:
                self.bad("signal-lost", f"signal {first['signal']} (key {key}) was "
                         f"{'never taken' if sig.taken_by is None else 'taken'} by a run that "
                         f"ended {run.status.value}", rid)
            else:
                wait = next((e for e in waits if e.get("signal") == sid), None)
                if wait is not None:
                    self.signal_to_taken.append(float(wait["ended"]) - float(first["t"]))
        extra = {s.id for s in queued.values()} - {signal_id(k) for k in by_key}
        if extra:
            self.bad("signal-lost", f"signals {sorted(extra)} queued that the harness never "
                     "sent", rid)
        for name, sids in order.items():
            consumed = [str(e.get("signal")) for e in waits if e.get("name") == name
                        and e.get("status") == "ok"]
            if consumed != sids[:len(consumed)] or (run.status is RunStatus.SUCCESS
                                                    and consumed != sids):
                self.bad("signal-fifo", f"waits for {name!r} took {consumed}, sent in the "
                         f"order {sids}", rid)

    def event(self, run: RunRecord, journal: list[dict[str, Any]]) -> None:
        rid = run.run_id
        waits = [e for e in journal if e.get("kind") == "event"]
        if not waits:
            if run.status.terminal:
                self.bad("event-missed", "the run ended with no event wait recorded", rid)
            return
        e = waits[0]
        emitted = [d for d in self.sent.get(rid, []) if d.get("ev") == "event"
                   and d.get("status") in ACCEPTED]
        started, ended = float(e["started"]), float(e["ended"])
        value = e.get("value") or {}
        if e.get("status") == "ok":
            ids = {d.get("id") for d in emitted}
            if value.get("id") not in ids or value.get("key") != run.input.get("name"):
                self.bad("event-wrong", f"the wait took event {value.get('id')!r} about "
                         f"{value.get('key')!r}; the harness emitted {sorted(map(str, ids))}",
                         rid)
            if any(d.get("late") and d.get("id") == value.get("id") for d in emitted):
                self.bad("event-late-taken", "the wait took the event emitted after it had "
                         "timed out", rid)
        elif e.get("status") == "timeout":
            timeout = EVENT_SHORT_TIMEOUT if run.workflow == "dtimeout" else None
            if timeout is not None and ended < started + timeout - self.tol:
                self.bad("timeout-early", f"timed out {ended - started:.3f}s after it began "
                         f"({timeout:g}s)", rid, at=ended)
            early = [d for d in emitted if not d.get("late") and d.get("answered") is not None
                     and float(d["answered"]) < ended - self.tol]
            if early:
                self.bad("event-missed", f"timed out at {ended:.3f}, the event was emitted "
                         f"{ended - float(early[0]['answered']):.3f}s before", rid, at=ended)
        if run.workflow == "devent" and e.get("status") != "ok" and not emitted:
            self.findings["event never emitted (the harness gave up)"] += 1

    # ---- parallel ---------------------------------------------------------------------

    def parallel(self, run: RunRecord, journal: list[dict[str, Any]],
                 at: dict[tuple[str, int], dict[str, Any]], rows: dict[str, StepRecord]) -> None:
        rid = run.run_id
        for e in journal:
            if e.get("kind") != "parallel":
                continue
            scope, pos = str(e.get("scope", "")), int(e["pos"])
            agg = self.snap.parallels.get(rid, {}).get((scope, pos))
            want = (PARALLEL_BRANCHES, MAX_PARALLEL, list(range(PARALLEL_BRANCHES)))
            got = None if agg is None else (agg["total"], agg["max"], agg["done"])
            if got != want:
                self.bad("parallel-aggregate", f"parallel at {scope}#{pos}: (total, max, done) "
                         f"{got}, want {want}", rid)
            spans: list[tuple[float, float, str]] = []
            lives: list[tuple[float, float, str]] = []
            for i in range(PARALLEL_BRANCHES):
                branch = f"{scope}/{pos}:{i}" if scope else f"{pos}:{i}"
                span = self.branch_span(rid, branch, at)
                if span is not None:
                    spans.append((*span, branch))
                row, result = rows.get(f"{DRIVER}/{branch}"), at.get((branch, RESULT_POS))
                if row is None:
                    self.bad("parallel-aggregate", f"branch {branch} has no driver row", rid)
                elif result is not None:
                    ready = [float(h["at"]) for h in row.history if h.get("type") == "step.ready"]
                    if ready:
                        # The engine's own account: from the branch's row made ready to
                        # its code's end (its result), rounded to the millisecond.
                        lives.append((ready[0] + self.tol, float(result["ended"]), branch))
            for what, found in (("bodies", _peak(spans)), ("rows and results", _peak(lives))):
                self.peaks.setdefault(rid, {})
                self.peaks[rid][what] = max(self.peaks[rid].get(what, 0), found[0])
                if found[0] > MAX_PARALLEL:
                    self.bad("parallel-peak", f"{found[0]} branches in flight at once by their "
                             f"{what} ({found[1]}), max_parallel is {MAX_PARALLEL}", rid)

    def branch_span(self, rid: str, branch: str, at: dict[tuple[str, int], dict[str, Any]]
                    ) -> tuple[float, float] | None:
        """A branch in flight: from its first body's start to the end of the execution
        its last step committed (a stale execution after it is no branch running)."""
        steps = sorted((e for (s, p), e in at.items() if s == branch and p != RESULT_POS
                        and e.get("kind") == "step"), key=lambda e: int(e["pos"]))
        if not steps:
            return None
        runs = [b for e in steps for b in self.bodies.get((rid, str(e.get("id"))), [])]
        last = steps[-1]
        done = [b for b in self.bodies.get((rid, str(last.get("id"))), [])
                if b.end is not None and b.end.get("out") == digest(last.get("value"))]
        if not runs or not done or done[0].ended is None:
            return None
        return min(b.t for b in runs), done[0].ended

    # ---- the result -------------------------------------------------------------------

    def output(self, run: RunRecord, at: dict[tuple[str, int], dict[str, Any]]) -> None:
        rid = run.run_id
        if run.status is not RunStatus.SUCCESS:
            return
        got = self.snap.outputs.get((rid, DRIVER))
        want = expected_output(run.workflow, at)
        if digest(got) != digest(want):
            self.bad("output", f"output {str(got)[:300]} is not what the journal says: "
                     f"{str(want)[:300]}", rid)

    def view(self, run: RunRecord) -> None:
        rid = run.run_id
        view = self.snap.views.get(rid) or {}
        if run.status.terminal and view.get("status") != run.status.value:
            self.bad("view", f"view says {view.get('status')}, row {run.status.value}", rid)
        if view.get("kind") != "durable":
            self.bad("view", f"view kind {view.get('kind')!r}, not durable", rid)
        journal = self.snap.journals.get(rid, [])
        shown = [(s.get("scope", ""), s.get("position"), s.get("id"), s.get("kind"),
                  s.get("status"), digest(s.get("output"))) for s in view.get("steps") or []]
        want = [(e.get("scope", ""), e.get("pos"), e.get("id"), e.get("kind"),
                 _VIEW_STATUS.get(str(e.get("status")), e.get("status")),
                 digest(e.get("value") if e.get("status") != "error" else None))
                for e in journal]
        if run.status.terminal and shown != want:
            self.bad("view", f"the view's steps are not the journal ({len(shown)} shown, "
                     f"{len(want)} recorded)", rid)
        if run.status is RunStatus.SUCCESS and digest(view.get("output")) != digest(
                self.snap.outputs.get((rid, DRIVER))):
            self.bad("view", "the view's output is not the committed one", rid)


def expected_output(workflow: str, at: dict[tuple[str, int], dict[str, Any]]) -> Any:
    """A successful run's output, from its journal (durable_app's workflows; the
    incompatible version's step `audit` at place 1 is in no output)."""
    audited = (at.get(("", 1)) or {}).get("name") == "audit" and workflow in AUDITED

    def value(scope: str, pos: int) -> Any:
        if audited and scope == "" and pos >= 1:
            pos += 1
        return (at.get((scope, pos)) or {}).get("value")

    if workflow == "dchain":
        # s0, then a sleep and a step, then the flaky step
        places = [0] + [2 * i for i in range(1, CHAIN_STEPS)] + [2 * CHAIN_STEPS - 1]
        return {"steps": [value("", p) for p in places]}
    if workflow == "dsignals":
        n = len(SIGNAL_WAITS)
        return {"got": [value("", 1 + i) for i in range(n)],
                "steps": [value("", 0), value("", n + 1)]}
    if workflow == "dparallel":
        return {"branches": [{"a": value(f"0:{i}", 0), "b": value(f"0:{i}", 2)}
                             for i in range(PARALLEL_BRANCHES)], "total": value("", 1)}
    if workflow in ("devent", "dtimeout"):
        return {"event": value("", 1), "steps": [value("", 0), value("", 2)]}
    if workflow == "dclaim":
        return {"won": value("", 0), "step": value("", 1)}
    if workflow == "dlock":  # before, the lock taken, inside, the lock let go
        return {"steps": [value("", 0), value("", 2)]}
    if workflow == "dgate":
        return {"answer": value("", 0), "step": value("", 1)}
    return None


def _peak(spans: list[tuple[float, float, str]]) -> tuple[int, list[str]]:
    """The most spans open at once, and which."""
    best: tuple[int, list[str]] = (0, [])
    for t, _, _ in spans:
        open_ = [name for s, e, name in spans if s <= t < e]
        if len(open_) > best[0]:
            best = (len(open_), open_)
    return best
