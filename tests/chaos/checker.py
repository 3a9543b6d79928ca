"""The checker: what must hold of every run and step, proven from a Snapshot (the rows,
the API, the ledger), and the figures of a seed. Each violation names its check:

- `lost-run`, `duplicate-run`, `unexpected-run`, `start`: one run per Idempotency-Key,
  the one the API answered;
- `progress`: every run terminal, within the bound after the faults stopped;
- `run-transition`, `step-transition`, `left-terminal`: every status change in the
  rows' history is in engine.states' tables; nothing follows a terminal entry;
- `history-incomplete`, `history-api`: every transition present
  (attempts, commits, calls), in order, and the API's history is the rows' (oldest
  first, each row's entries in the order they were written);
- `double-commit`, `attempt-reused`, `attempt-called-twice`, `call-without-claim`:
  single commit; each attempt claimed once and called at most once, by its claimer;
- `idempotency-key`, `signature`: every call of a step carried its one key (and a
  valid signature);
- `commit-unknown-output`, `commit-undelivered-output`: the committed output is one the
  function returned, and delivered, for that attempt;
- `join-inputs`, `join-early`: a step's `steps` are exactly its dependencies' committed
  outputs, sent after they committed;
- `retry-budget`, `backoff`, `backoff-early`: attempts within `retry.max`; each retry
  due no sooner than its policy (or `Retry-After`) says, called no sooner than due;
- `halt-*`, `independent-*`, `run-status`: `onFailure` exactly as documented, and the
  run's status follows from its steps;
- `stop-*`: a run's stop instant (the commit of its first final failure under `halt`, or
  of its cancel) is on its row (`stop_at`), and no step starts after it: no
  `step.started` later, and no call of an attempt not started by then, whatever
  `run.halted` says (DESIGN.md, invariant 5);
- `item-size`: no item over 400 KB;
- `error-format`, `view`: every error is a JSON object with a stable `code`
  (orchestrator.errors.Code) and a text `message`, never a printout (issue 8, section
  5); the API's view matches the rows.

A durable run gets the run-level checks above (one run per key, progress, its row's
transitions and history, errors, the API's history) and, for its driver rows, journal,
signals, step bodies and waits, durable_checks.py's; for the versions of its code it
was pinned to and moved between during the deploy in the middle (`version-*`,
`deploy`), version_checks.py's. A `run.migrated` entry comes only while the run is
queued or running.

The flow-control workflows (`pooled`'s concurrency limits of N, `limited`'s backend
limit) get flow_checks.py's: `admitted-once`, `limit-exceeded` (counted at the function,
by the ledger) and `slot-leaked`."""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RUN_TRANSITIONS, STEP_TRANSITIONS, RunStatus, StepStatus
from orchestrator.errors import Code
from orchestrator.manifest.retries import retry_delay
from tests.chaos.coordination_checks import CoordinationChecks
from tests.chaos.durable_checks import DurableChecks
from tests.chaos.figures import durable_figures, figures
from tests.chaos.flow_checks import FlowChecks
from tests.chaos.jsonl import digest
from tests.chaos.snapshot import Call, Snapshot
from tests.chaos.version_checks import VersionChecks

__all__ = ["Report", "Violation", "check", "looks_like_printout"]

TOL = 0.011  # times are stored to the millisecond
MAX_ITEM = 400 * 1024
CODES = frozenset(c.value for c in Code)

S = StepStatus
STEP_EFFECT = {
    "step.ready": S.READY, "step.started": S.DISPATCHED, "step.retrying": S.DISPATCHED,
    "step.succeeded": S.SUCCESS, "step.failed": S.FAILED, "step.skipped": S.SKIPPED,
    "step.reused": S.SUCCESS,
}
STEP_FLAGS = {"step.redispatched": (S.READY, S.DISPATCHED), "step.stopping": (S.DISPATCHED,),
              # A claimed step released to wait (a lock, its backend's limits).
              "step.waiting": (S.DISPATCHED,)}
R = RunStatus
RUN_EFFECT = {
    "run.queued": R.QUEUED, "run.running": R.RUNNING, "run.started": R.RUNNING,
    "run.success": R.SUCCESS, "run.failed": R.FAILED, "run.killed": R.KILLED,
    "run.skipped": R.SKIPPED,
}
RUN_FLAGS = {"run.halted", "run.cancel_requested"}


@dataclass
class Violation:
    check: str
    message: str
    run: str | None = None
    step: str | None = None
    at: float | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    rows: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"figures": self.figures, "violations": [asdict(v) for v in self.violations]}


_BRACKETS = {"{": "}", "[": "]", "(": ")"}


def looks_like_printout(text: str) -> bool:
    """Does `text` hold a language's printout of a value (a Python dict or list repr,
    a traceback, an object address) rather than text or JSON?"""
    if "Traceback (most recent call last)" in text or re.search(r" object at 0x[0-9a-f]+", text):
        return True
    for i, ch in enumerate(text):
        if ch not in _BRACKETS:
            continue
        depth, end = 0, -1
        for j in range(i, len(text)):
            if text[j] in _BRACKETS:
                depth += 1
            elif text[j] in _BRACKETS.values():
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end < 0:
            continue
        chunk = text[i:end + 1]
        try:
            json.loads(chunk)
            continue
        except ValueError:
            pass
        try:
            value = ast.literal_eval(chunk)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict | list | tuple) and value:
            return True
    return False


class _Check:
    def __init__(self, snap: Snapshot, bound: float) -> None:
        self.snap = snap
        self.bound = bound
        self.out: list[Violation] = []
        self.calls: dict[tuple[str, str], list[Call]] = defaultdict(list)
        for c in snap.calls:
            self.calls[(str(c.recv.get("run")), str(c.recv.get("step")))].append(c)
        self.findings: Counter[str] = Counter()
        self.start_before_due: list[float] = []
        self.durable = DurableChecks(snap, self.bad, self.findings, TOL, self.error_doc)
        self.coordination = CoordinationChecks(snap, self.bad, TOL)
        self.flow = FlowChecks(snap, self.bad, self.findings, TOL)
        self.versions = VersionChecks(snap, self.bad, self.findings, TOL)

    def bad(self, check: str, message: str, run: str | None = None, step: str | None = None,
            at: float | None = None) -> None:
        self.out.append(Violation(check, message, run, step, at))

    # ---- errors are data (issue 8, section 5) -----------------------------------------

    def error_doc(self, doc: Any, where: str, run: str | None, step: str | None,
                  *, full: bool = True) -> None:
        """An error of a row, a view or a history entry: a JSON object with a stable
        code and a text message that is not a printout (`reason`s checked too)."""
        if doc is None:
            return
        if not isinstance(doc, dict):
            self.bad("error-format", f"{where}: error is {type(doc).__name__}, not an object: "
                     f"{str(doc)[:200]}", run, step)
            return
        code, message = doc.get("code"), doc.get("message")
        if code not in CODES:
            self.bad("error-format", f"{where}: code {code!r} is not an orchestrator code",
                     run, step)
        if not isinstance(message, str):
            self.bad("error-format", f"{where}: message is {type(message).__name__}, not text",
                     run, step)
        elif looks_like_printout(message):
            self.bad("error-format", f"{where}: message is a printout: {message[:200]!r}",
                     run, step)
        reason = doc.get("reason")
        if full and isinstance(reason, dict) and reason.get("code") in CODES:
            self.error_doc(reason, f"{where}.reason", run, step)

    # ---- runs ------------------------------------------------------------------------

    def runs(self) -> None:
        by_key: dict[str, list[str]] = defaultdict(list)
        for run in self.snap.runs.values():
            key = (run.trigger.to_json() if run.trigger else {}).get("idempotency_key")
            by_key[str(key)].append(run.run_id)
        known = {key for key, _ in self.snap.submitted.values()}
        for name, (key, answered) in self.snap.submitted.items():
            found = by_key.get(key, [])
            if answered is None:
                self.bad("start", f"start of {name} (key {key}) was never answered")
            if not found and answered is not None:
                self.bad("lost-run", f"{name}: the API answered run {answered}, no row has "
                         f"key {key}", answered)
            elif len(found) > 1:
                self.bad("duplicate-run", f"{name}: {len(found)} runs for key {key}: {found}",
                         found[0])
            elif found and answered is not None and found[0] != answered:
                self.bad("duplicate-run", f"{name}: the API answered {answered}, the row for "
                         f"key {key} is {found[0]}", found[0])
        for key, ids in by_key.items():
            if key not in known:
                self.bad("unexpected-run", f"runs {ids} with key {key} were never started",
                         ids[0])
        for run in self.snap.runs.values():
            self.run(run)

    def run(self, run: RunRecord) -> None:
        rid = run.run_id
        rows = self.snap.steps.get(rid, {})
        self.finished_in_bound(run)
        self.run_history(run)
        self.error_doc(run.error, "run.error", rid, None)
        if run.definition.durable is not None:
            self.durable.run(run, rows)
            self.durable.view(run)
            self.versions.run(run)
            self.error_doc((self.snap.views.get(rid) or {}).get("error"), "view error", rid,
                           None)
            self.history_api(run, rows)
            return
        names = [s.name for s in run.definition.steps]
        if set(rows) != set(names):
            self.bad("history-incomplete", f"rows {sorted(set(rows) ^ set(names))} differ "
                     "from the definition", rid)
        for row in rows.values():
            self.step(run, row)
        self.policy(run, rows)
        self.view(run, rows)

    def finished_in_bound(self, run: RunRecord) -> None:
        rid = run.run_id
        if not run.status.terminal:
            self.bad("progress", f"still {run.status.value} {self.bound:g}s after the faults "
                     "stopped", rid, at=self.snap.calm_at + self.bound)
        elif (run.finished_at or 0) > self.snap.calm_at + self.bound:
            self.bad("progress", f"finished {run.finished_at - self.snap.calm_at:.1f}s after "  # type: ignore[operator]
                     f"the faults stopped (bound {self.bound:g}s)", rid, at=run.finished_at)

    def run_history(self, run: RunRecord) -> None:
        status: RunStatus | None = None
        for i, e in enumerate(run.history):
            typ = e.get("type", "")
            self.error_doc(e.get("error"), f"history {typ}", run.run_id, None, full=False)
            if status is not None and status.terminal:
                self.bad("left-terminal", f"entry {typ} after terminal {status.value}",
                         run.run_id, at=e.get("at"))
            if typ in RUN_EFFECT:
                new = RUN_EFFECT[typ]
                if status is None:
                    if i != 0 or new not in (R.QUEUED, R.RUNNING):
                        self.bad("run-transition", f"first entry is {typ}", run.run_id)
                elif new not in RUN_TRANSITIONS[status]:
                    self.bad("run-transition", f"{status.value} -> {new.value} ({typ})",
                             run.run_id, at=e.get("at"))
                status = new
            elif typ in RUN_FLAGS:
                if status is not R.RUNNING:
                    self.bad("run-transition", f"{typ} while {status}", run.run_id)
            elif typ == "run.migrated":
                if status not in (R.QUEUED, R.RUNNING):
                    self.bad("run-transition", f"{typ} while {status}", run.run_id,
                             at=e.get("at"))
            else:
                self.findings[f"unknown run entry {typ}"] += 1
        if status is not run.status:
            self.bad("history-incomplete", f"row is {run.status.value}, its history ends "
                     f"{status}", run.run_id)
        if sum(e.get("type") == "run.halted" for e in run.history) > 1:
            self.bad("run-transition", "halted twice", run.run_id)

    # ---- steps -----------------------------------------------------------------------

    def step(self, run: RunRecord, row: StepRecord) -> None:
        rid, name = run.run_id, row.step
        hist = row.history
        self.error_doc(row.error, "step.error", rid, name)
        status = S.BLOCKED
        started: list[int] = []
        seen_started: set[int] = set()
        retried: set[int] = set()
        prev_at = 0.0
        waited = False
        for e in hist:
            typ, at = e.get("type", ""), float(e.get("at", 0.0))
            self.error_doc(e.get("error"), f"history {typ}", rid, name, full=False)
            if at < prev_at - TOL:
                # Entries are in the order their writes landed (list_append in guarded
                # writes); each carries the time its writer read before sending. A write
                # that landed late (its process stalled) has an earlier time than the
                # entry before it: counted, not a violation (the order is the truth).
                self.findings["history entry timed before the one it follows (late write)"] += 1
            prev_at = max(prev_at, at)
            if status.terminal:
                self.bad("left-terminal", f"{typ} after {status.value}", rid, name, at)
            attempt = e.get("attempt")
            if typ in STEP_EFFECT:
                new = STEP_EFFECT[typ]
                if new not in STEP_TRANSITIONS[status]:
                    self.bad("step-transition", f"{status.value} -> {new.value} ({typ})",
                             rid, name, at)
                status = new
            elif typ in STEP_FLAGS:
                if status not in STEP_FLAGS[typ]:
                    self.bad("step-transition", f"{typ} while {status.value}", rid, name, at)
            else:
                self.findings[f"unknown step entry {typ}"] += 1
            if typ == "step.waiting":
                # Released to wait (a lock, its backend's limits): the same attempt is
                # claimed again when the wait is over, and counts once.
                waited = True
            if typ == "step.started":
                if waited and started and started[-1] == int(attempt or 0):
                    waited = False
                    continue
                waited = False
                started.append(int(attempt or 0))
                seen_started.add(int(attempt or 0))
            elif typ in ("step.retrying", "step.succeeded", "step.failed") and attempt:
                if int(attempt) not in seen_started:
                    self.bad("history-incomplete", f"{typ} of attempt {attempt}, never started",
                             rid, name, at)
                if typ == "step.retrying":
                    retried.add(int(attempt))
        if status is not row.status:
            self.bad("history-incomplete", f"row is {row.status.value}, history ends "
                     f"{status.value}", rid, name)
        if len(started) != len(set(started)) or started != sorted(started):
            self.bad("attempt-reused", f"attempts started: {started}", rid, name)
        if max(started, default=0) > row.max_attempts or row.attempt > row.max_attempts:
            self.bad("retry-budget", f"attempt {max([*started, row.attempt])} of "
                     f"{row.max_attempts}", rid, name)
        missing = [k for k in range(1, row.attempt) if k not in retried]
        if missing:
            self.bad("history-incomplete", f"attempts {missing} ended without step.retrying "
                     f"(row at attempt {row.attempt})", rid, name)
        commits = sum(e.get("type") == "step.succeeded" for e in hist)
        if commits > 1:
            self.bad("double-commit", f"{commits} step.succeeded entries", rid, name)
        self.step_calls(run, row)

    def step_calls(self, run: RunRecord, row: StepRecord) -> None:
        rid, name = run.run_id, row.step
        calls = self.calls.get((rid, name), [])
        started_at = {int(e.get("attempt") or 0): float(e["at"]) for e in row.history
                      if e.get("type") == "step.started"}
        spec = {s.name: s for s in run.definition.steps}[name] if name in {
            s.name for s in run.definition.steps} else None
        deps = list(spec.deps) if spec else list(row.deps)
        per_attempt = Counter(c.attempt for c in calls)
        for a, n in per_attempt.items():
            if n > 1:
                self.bad("attempt-called-twice", f"attempt {a} called {n} times", rid, name)
        for c in calls:
            r = c.recv
            if r.get("key") != f"{rid}/{name}":
                self.bad("idempotency-key", f"attempt {c.attempt} sent key {r.get('key')!r}",
                         rid, name, c.t)
            if (r.get("hdr_attempt") != str(c.attempt) or r.get("hdr_run") != rid
                    or r.get("hdr_step") != name):
                self.bad("idempotency-key", f"headers {r.get('hdr_run')}/{r.get('hdr_step')}"
                         f"#{r.get('hdr_attempt')} disagree with the body", rid, name, c.t)
            if not r.get("sig", True):
                self.bad("signature", f"attempt {c.attempt}: bad signature", rid, name, c.t)
            if c.attempt not in started_at:
                self.bad("call-without-claim", f"attempt {c.attempt} called, never claimed",
                         rid, name, c.t)
            self.join(run, name, deps, c)
        if row.status is S.SUCCESS:
            out = self.snap.outputs.get((rid, name), None)
            d = digest(out)
            same = [c for c in calls if c.attempt == row.attempt and c.done is not None
                    and c.done.get("out") == d]
            if not same:
                self.bad("commit-unknown-output", f"committed output {d} (attempt "
                         f"{row.attempt}) is none the function returned for it", rid, name)
            elif not any(c.delivered_2xx for c in same):
                self.bad("commit-undelivered-output", f"committed output {d} was answered "
                         f"{[c.done.get('fault') for c in same if c.done]}: never delivered",
                         rid, name)
            elif any(c.done is not None and c.done.get("fault") == "hang" for c in same):
                self.findings["committed an answer sent after the step's timeout"] += 1
        self.backoff(row, calls)

    def join(self, run: RunRecord, name: str, deps: list[str], c: Call) -> None:
        rid = run.run_id
        got = c.recv.get("steps")
        if not deps:
            if got is not None:
                self.bad("join-inputs", f"a root was sent steps {sorted(got)}", rid, name, c.t)
            return
        if got is None or set(got) != set(deps):
            self.bad("join-inputs", f"attempt {c.attempt} got steps "
                     f"{None if got is None else sorted(got)}, deps are {sorted(deps)}",
                     rid, name, c.t)
            return
        rows = self.snap.steps.get(rid, {})
        for d in deps:
            dep = rows.get(d)
            if dep is None or dep.status is not S.SUCCESS:
                self.bad("join-early", f"attempt {c.attempt} called while {d} is "
                         f"{None if dep is None else dep.status.value} (final)", rid, name, c.t)
                continue
            if got[d] != digest(self.snap.outputs.get((rid, d))):
                self.bad("join-inputs", f"attempt {c.attempt} got {d} = {got[d]}, its committed"
                         f" output is {digest(self.snap.outputs.get((rid, d)))}", rid, name, c.t)
            if (dep.finished_at or 0) > c.t + TOL:
                self.bad("join-early", f"attempt {c.attempt} called at {c.t:.3f}, before {d} "
                         f"committed at {dep.finished_at:.3f}", rid, name, c.t)

    def backoff(self, row: StepRecord, calls: list[Call]) -> None:
        by_attempt = {c.attempt: c for c in calls}
        started = {int(e.get("attempt") or 0): float(e["at"]) for e in row.history
                   if e.get("type") == "step.started"}
        for e in row.history:
            if e.get("type") != "step.retrying" or e.get("due_at") is None:
                continue
            a, due = int(e.get("attempt") or 0), float(e["due_at"])
            code = (e.get("error") or {}).get("code")
            call = by_attempt.get(a)
            if call is not None and code != Code.LEASE_EXPIRED.value:
                after = call.done.get("retry_after") if call.done else None
                if after is not None and code == Code.HTTP_ERROR.value:
                    floor, since, what = float(after), float(call.done["t"]), "Retry-After"  # type: ignore[index]
                else:
                    floor = retry_delay(row.retry_strategy, row.retry_delay,
                                        row.retry_max_delay, a) / 2
                    since, what = call.t, f"{row.retry_strategy} backoff"
                if due < since + floor - TOL:
                    self.bad("backoff", f"attempt {a + 1} due {due - since:.3f}s after attempt "
                             f"{a}, {what} says at least {floor:.3f}s", row.run_id, row.step,
                             due)
            nxt = by_attempt.get(a + 1)
            if nxt is not None and nxt.t < due - TOL:
                self.bad("backoff-early", f"attempt {a + 1} called {due - nxt.t:.3f}s before "
                         "its due time", row.run_id, row.step, nxt.t)
            if a + 1 in started and started[a + 1] < due - TOL:
                self.start_before_due.append(due - started[a + 1])

    # ---- failure policies ------------------------------------------------------------

    def policy(self, run: RunRecord, rows: dict[str, StepRecord]) -> None:
        rid = run.run_id
        failed = {n for n, r in rows.items() if r.status is S.FAILED}
        halted = [float(e["at"]) for e in run.history if e.get("type") == "run.halted"]
        if run.status is R.KILLED:
            self.bad("run-status", "killed, and nobody cancelled it", rid)
        elif run.status is R.SUCCESS and any(r.status is not S.SUCCESS for r in rows.values()):
            self.bad("run-status", "success with steps "
                     f"{sorted(n for n, r in rows.items() if r.status is not S.SUCCESS)}", rid)
        elif run.status is R.FAILED and not failed:
            self.bad("run-status", "failed with no failed step", rid)
        ended = [float(e["at"]) for e in run.history if e.get("type") in RUN_EFFECT
                 and RUN_EFFECT[e["type"]].terminal]
        for n, r in rows.items():
            late = [float(e["at"]) for e in r.history if e.get("type") == "step.started"
                    and ended and float(e["at"]) > ended[0] + TOL]
            if late:
                self.bad("started-after-finish", f"started {late[0] - ended[0]:.3f}s after "
                         f"its run finished", rid, n, late[0])
        self.stop_instant(run, rows, failed)
        if run.on_failure is OnFailure.HALT:
            if failed and not halted and run.status.terminal:
                self.bad("halt-missing", f"steps {sorted(failed)} failed, the run ended "
                         f"{run.status.value} with no run.halted entry", rid,
                         at=ended[0] if ended else None)
            if not halted:
                return
            h = halted[0]
            for n, r in rows.items():
                starts = [float(e["at"]) for e in r.history if e.get("type") == "step.started"]
                late = [t for t in starts if t > h + TOL]
                if late:
                    self.bad("halt-started-after", f"started {late[0] - h:.3f}s after "
                             "run.halted", rid, n, late[0])
                early = [t for t in starts if t <= h + TOL]
                claimed = {int(e.get("attempt") or 0) for e in r.history
                           if e.get("type") == "step.started" and float(e["at"]) <= h + TOL}
                for c in self.calls.get((rid, n), []):
                    if c.t > h and c.attempt not in claimed:
                        self.bad("halt-called-after", f"attempt {c.attempt} called "
                                 f"{c.t - h:.3f}s after run.halted, not started before it",
                                 rid, n, c.t)
                done_before = r.finished_at is not None and r.finished_at <= h + TOL
                if not early and not done_before and r.status is not S.SKIPPED:
                    self.bad("halt-not-skipped", f"not started at the halt, ended "
                             f"{r.status.value}", rid, n)
        else:
            if halted:
                self.bad("independent-halted", "run.halted under continue-independent", rid)
            below = _descendants(run, failed)
            for n, r in rows.items():
                if n in below:
                    if r.status is not S.SKIPPED or any(
                            e.get("type") == "step.started" for e in r.history):
                        self.bad("independent-branch", f"below failed {sorted(failed)} but "
                                 f"{r.status.value}", rid, n)
                elif r.status is S.SKIPPED:
                    self.bad("independent-skipped", f"skipped, not below a failed step "
                             f"({sorted(failed)})", rid, n)

    def stop_instant(self, run: RunRecord, rows: dict[str, StepRecord],
                     failed: set[str]) -> None:
        """The stop instant: the run's `stop_at` is the first final failure's (under
        halt) or the first cancel's time, and nothing starts after it."""
        rid = run.run_id
        stops = [float(e["at"]) for e in run.history if e.get("type") == "run.cancel_requested"]
        if run.on_failure is OnFailure.HALT:
            stops += [float(e["at"]) for n in failed for e in rows[n].history
                      if e.get("type") == "step.failed"]
        if not stops:
            if getattr(run, "stop_at", None) is not None:
                self.bad("stop-unexplained", f"stop_at {run.stop_at} with no failure under "
                         "halt and no cancel", rid)
            return
        # The instant as the histories tell it, whatever the row says.
        stop = min(stops)
        # A history's time is read before its write is sent, and a DynamoDB write the
        # faults paused lands that much later: a start checked before the stop's write
        # landed is rightly started though stamped after it (seed 303: a failure paused
        # 1.1 s, a start 0.028 s after its stamp). So the stop is only sure by the
        # longest pause of a write sent around it.
        slack = max((float(f.get("seconds") or 0.0) for f in self.snap.faults
                     if f.get("kind") == "ddb-delay" and stop - TOL <= float(f.get("t", 0))
                     <= stop + 2.0), default=0.0)
        stop_at = getattr(run, "stop_at", None)
        if stop_at is None or abs(stop_at - stop) > TOL:
            self.bad("stop-missing", f"stop_at {stop_at}, first stop {stop:.3f}", rid)
        for n, r in rows.items():
            self.findings["attempts given up at their start check (run stopping)"] += sum(
                e.get("type") == "step.skipped"
                and e.get("reason") == "run stopped before the step started"
                for e in r.history)
            started = {int(e.get("attempt") or 0): float(e["at"]) for e in r.history
                       if e.get("type") == "step.started"}
            late = sorted(t for t in started.values() if t > stop + TOL + slack)
            if late:
                self.bad("stop-started-after", f"started {late[0] - stop:.3f}s after the "
                         "run's stop instant", rid, n, late[0])
            for c in self.calls.get((rid, n), []):
                if c.t > stop + TOL + slack and started.get(c.attempt,
                                                            float("inf")) > stop + TOL + slack:
                    self.bad("stop-called-after", f"attempt {c.attempt} called "
                             f"{c.t - stop:.3f}s after the stop instant, not started before",
                             rid, n, c.t)

    # ---- the API ---------------------------------------------------------------------

    def view(self, run: RunRecord, rows: dict[str, StepRecord]) -> None:
        rid = run.run_id
        view = self.snap.views.get(rid)
        if view is None:
            self.bad("view", "GET /runs/{id} gave nothing", rid)
            return
        if view.get("status") != run.status.value:
            self.bad("view", f"view says {view.get('status')}, row {run.status.value}", rid)
        self.error_doc(view.get("error"), "view error", rid, None)
        for s in view.get("steps") or []:
            name = s.get("step")
            self.error_doc(s.get("error"), "view step error", rid, name)
            row = rows.get(name)
            if row is None or s.get("status") != row.status.value:
                self.bad("view", f"view says {s.get('status')}, row "
                         f"{None if row is None else row.status.value}", rid, name)
            elif row.status is S.SUCCESS and digest(s.get("output")) != digest(
                    self.snap.outputs.get((rid, name))):
                self.bad("view", "view's output is not the committed one", rid, name)
        self.history_api(run, rows)

    def history_api(self, run: RunRecord, rows: dict[str, StepRecord]) -> None:
        """The API's history is the rows': every entry, oldest first, each row's in the
        order it was written."""
        rid = run.run_id
        want = Counter(_entry_key(e, None) for e in run.history)
        for name, row in rows.items():
            want.update(_entry_key(e, name) for e in row.history)
        events = self.snap.events.get(rid, [])
        got = Counter(_entry_key(e, e.get("step")) for e in events)
        if got != want:
            self.bad("history-api", f"the API's history lacks {sum((want - got).values())} and "
                     f"adds {sum((got - want).values())} entries of the rows'", rid)
        # Oldest first, each row's entries in the order they were written: a time
        # inversion is only ever between two entries of one row (a late write).
        for a, b in itertools.pairwise(events):
            if float(b.get("at", 0.0)) < float(a.get("at", 0.0)) and a.get("step") != b.get(
                    "step"):
                self.bad("history-api", "GET /runs/{id}/events is not oldest first", rid)
                break
        each: list[tuple[str | None, StepRecord | None]] = [(None, None), *rows.items()]
        for who, held in each:
            mine = [_entry_key(e, who) for e in events if e.get("step") == who]
            written = [_entry_key(e, who) for e in (run.history if held is None
                                                    else held.history)]
            if mine != written:
                self.bad("history-api", "the API's history does not keep the row's order",
                         rid, who)

    def items(self) -> None:
        for key, size in self.snap.item_sizes.items():
            if size > MAX_ITEM:
                self.bad("item-size", f"item {key} is {size} bytes")


def _entry_key(e: dict[str, Any], step: str | None) -> str:
    return json.dumps({**{k: v for k, v in e.items() if k != "step"}, "step": step},
                      sort_keys=True)


def _descendants(run: RunRecord, roots: set[str]) -> set[str]:
    below: dict[str, list[str]] = defaultdict(list)
    for s in run.definition.steps:
        for d in s.deps:
            below[d].append(s.name)
    out: set[str] = set()
    frontier = [n for r in roots for n in below[r]]
    while frontier:
        n = frontier.pop()
        if n not in out:
            out.add(n)
            frontier.extend(below[n])
    return out


def _near(snap: Snapshot, v: Violation, rows: dict[str, Any]) -> list[dict[str, Any]]:
    """Faults injected around a violation: those naming its run, and process faults,
    within 8 s before and 2 s after its time (or the run's life)."""
    run = snap.runs.get(v.run or "")
    if v.at is not None:
        lo, hi = v.at - 8.0, v.at + 2.0
    elif run is not None:
        lo, hi = run.created_at - 1.0, (run.finished_at or run.created_at + 600) + 1.0
    else:
        return []
    near = [f for f in snap.faults if lo <= float(f.get("t", 0)) <= hi
            and (f.get("run") in (None, v.run))]
    near.sort(key=lambda f: (f.get("run") != v.run, abs(float(f["t"]) - (v.at or lo))))
    return near[:12]


def _rows(snap: Snapshot, v: Violation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    run = snap.runs.get(v.run or "")
    if run is not None:
        out["run"] = {"status": run.status.value, "halted": run.halted, "error": run.error,
                      "created_at": run.created_at, "finished_at": run.finished_at,
                      "history": list(run.history)}
    if run is not None and v.step is None:
        out["steps"] = {
            n: [r.status.value, r.attempt,
                [[e.get("type"), e.get("at"), e.get("attempt")] for e in r.history]]
            for n, r in snap.steps.get(run.run_id, {}).items()}
    if run is not None and run.definition.durable is not None:
        out["journal"] = [[e.get("scope"), e.get("pos"), e.get("kind"), e.get("name"),
                           e.get("status"), e.get("started"), e.get("ended")]
                          for e in snap.journals.get(run.run_id, [])]
    row = snap.steps.get(v.run or "", {}).get(v.step or "")
    if row is not None:
        out["step"] = {"status": row.status.value, "attempt": row.attempt,
                       "max_attempts": row.max_attempts, "lease_owner": row.lease_owner,
                       "lease_until": row.lease_until, "stopping": row.stopping,
                       "finished_at": row.finished_at, "error": row.error,
                       "history": list(row.history)}
        out["calls"] = [{**c.recv, "done": c.done} for c in snap.calls
                        if c.recv.get("run") == v.run and c.recv.get("step") == v.step]
    return out


def check(snap: Snapshot, *, bound: float) -> Report:
    """Every check over `snap`, and the figures; violations carry their nearby faults
    and rows."""
    c = _Check(snap, bound)
    c.runs()
    c.coordination.all()
    c.flow.all()
    c.versions.deploy()
    c.items()
    for v in c.out:
        v.rows = _rows(snap, v)
        v.faults = _near(snap, v, v.rows)
    figs = figures(snap, c.calls, c.findings, c.start_before_due,
                   Counter(v.check for v in c.out))
    figs["durable"] = durable_figures(snap, c.durable)
    figs["versions"] = c.versions.figures()
    figs["flow"] = c.flow.figures()
    return Report(c.out, figs)
