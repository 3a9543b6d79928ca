"""The checker's durable checks on snapshots built by hand (no cluster, a second): one run
of each durable_app workflow that went right must show no violation, and each check
must report the violation it claims to catch."""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from functions.sdk.durable.call import RESULT_POS, op_id
from orchestrator.engine.definition import DRIVER, Definition, StepSpec, Trigger
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.services.reads.views import durable_steps
from tests.chaos.checker import check
from tests.chaos.durable_app import (
    BRANCH_SLEEP,
    CHAIN_SLEEP,
    CHAIN_STEPS,
    EVENT_SHORT_TIMEOUT,
    MAX_PARALLEL,
    PARALLEL_BRANCHES,
    SIGNAL_WAITS,
)
from tests.chaos.durable_checks import expected_output, signal_id
from tests.chaos.jsonl import digest
from tests.chaos.snapshot import Body, Signal, Snapshot

T0 = 1_800_000_000.0
HOLD = 0.15


class Build:
    """One durable run as it would be found after going right: its journal, its step
    bodies' executions (ledger), its driver rows, its view and history."""

    def __init__(self, snap: Snapshot, workflow: str, start: float) -> None:
        self.snap = snap
        self.workflow = workflow
        self.name = f"{workflow}-0"
        self.rid = f"{workflow}-run"
        self.t = start
        self.created = start
        self.entries: list[dict[str, Any]] = []
        self.pos: Counter[str] = Counter()
        self.counts: dict[str, Counter[str]] = {}
        self.drivers: dict[str, list[dict[str, Any]]] = {DRIVER: [
            {"at": start, "type": "step.ready"},
            {"at": start + 0.01, "type": "step.started", "attempt": 1}]}
        self.t += 0.02

    def place(self, scope: str, kind: str, name: str) -> dict[str, Any]:
        counts = self.counts.setdefault(scope, Counter())
        doc = {"scope": scope, "pos": self.pos[scope], "kind": kind, "name": name,
               "id": op_id(scope, name, counts[name])}
        counts[name] += 1
        self.pos[scope] += 1
        return doc

    def body(self, place: dict[str, Any], attempt: int, value: Any, error: str | None = None
             ) -> Body:
        start = {"ev": "bstart", "id": f"{place['id']}-{attempt}-{self.t}", "t": self.t,
                 "run": self.rid, "name": self.name, "wf": self.workflow,
                 "scope": place["scope"], "pos": place["pos"], "op": place["id"],
                 "step": place["name"], "attempt": attempt,
                 "key": f"{self.rid}:{place['id']}"}
        self.t += HOLD
        end = {"ev": "bend", "id": start["id"], "t": self.t, "value": value,
               "out": None if value is None else digest(value), "error": error}
        b = Body(start, end)
        self.snap.bodies.append(b)
        return b

    def step(self, name: str, scope: str = "", *, attempts: int = 1) -> Any:
        place = self.place(scope, "step", name)
        started = self.t
        for k in range(1, attempts):
            self.body(place, k, None, "retryable")
            self.t += 0.2
        value = {"nonce": f"{place['id']}-{self.t}", "step": name, "attempt": attempts}
        self.body(place, attempts, value)
        self.entries.append({**place, "status": "ok", "value": value, "attempts": attempts,
                             "started": started, "ended": round(self.t, 3)})
        self.t += 0.01
        return value

    def wait(self, kind: str, name: str, scope: str = "", *, lasts: float = 0.05,
             status: str = "ok", value: Any = None, **extra: Any) -> dict[str, Any]:
        place = self.place(scope, kind, name)
        entry = {**place, "status": status, "value": value, "started": self.t,
                 "ended": round(self.t + lasts, 3), **extra}
        self.entries.append(entry)
        self.t += lasts + 0.01
        return entry

    def finish(self, output: Any, status: RunStatus = RunStatus.SUCCESS) -> RunRecord:
        end = self.t + 0.01
        self.drivers[DRIVER].append({"at": end, "type": "step.succeeded", "attempt": 1})
        spec = StepSpec(DRIVER, "fn", f"/durable/{self.workflow}", retry_max=16)
        run = RunRecord(
            self.rid, self.workflow, status, {"name": self.name, "seed": 1},
            Definition((spec,), durable=self.workflow), self.created, 1, 0,
            trigger=Trigger("api", {"idempotency_key": f"k-{self.name}"}),
            started_at=self.created, finished_at=end + 0.01,
            history=({"at": self.created, "type": "run.running"},
                     {"at": end + 0.01, "type": f"run.{status.value}"}))
        rows = {}
        for step, hist in self.drivers.items():
            rows[step] = StepRecord(
                self.rid, step, StepStatus.SUCCESS, "fn", f"/durable/{self.workflow}",
                attempt=1, max_attempts=17, has_output=step == DRIVER,
                output=output if step == DRIVER else None, finished_at=hist[-1]["at"],
                history=tuple(hist))
        snap = self.snap
        snap.runs[self.rid] = run
        snap.steps[self.rid] = rows
        snap.outputs[(self.rid, DRIVER)] = output
        snap.journals[self.rid] = sorted(self.entries, key=lambda e: (e["scope"], e["pos"]))
        snap.submitted[self.name] = (f"k-{self.name}", self.rid)
        snap.views[self.rid] = {"status": status.value, "kind": "durable", "output": output,
                                "error": None,
                                "steps": durable_steps(snap.journals[self.rid], rows[DRIVER])}
        snap.events[self.rid] = list(heapq.merge(
            [dict(e) for e in run.history],
            *([{**e, "step": name} for e in r.history] for name, r in rows.items()),
            key=lambda e: float(e["at"])))
        self.t = end + 0.05
        return run

    def at(self) -> dict[tuple[str, int], dict[str, Any]]:
        return {(e["scope"], e["pos"]): e for e in self.entries}


def chain(snap: Snapshot) -> None:
    b = Build(snap, "dchain", T0)
    for i in range(CHAIN_STEPS):
        if i:
            b.wait("sleep", "sleep", lasts=CHAIN_SLEEP + 0.02)
        b.step(f"s{i}")
    b.step("flaky", attempts=2)
    b.finish(expected_output("dchain", b.at()))


def signals(snap: Snapshot) -> None:
    b = Build(snap, "dsignals", T0 + 10)
    b.step("prepare")
    sent: Counter[str] = Counter()
    queued: list[Signal] = []
    for name in SIGNAL_WAITS:
        sent[name] += 1
        key = f"{b.name}-{name}-{sent[name]}"
        sid, payload = signal_id(key), {"key": key, "n": 0}
        late = sent[name] > 1
        for n in range(2 if late else 1):  # the late ones are sent twice
            snap.drive.append({"ev": "signal", "run": b.rid, "name": b.name, "signal": name,
                               "key": key, "late": late, "registered": late, "resend": n,
                               "t": b.t, "answered": b.t + 0.01, "tries": 1,
                               "status": 200 if n else 202, "duplicate": bool(n),
                               "answer_id": sid})
        entry = b.wait("signal", name, value=payload, signal=sid)
        queued.append(Signal(name, sid, payload, entry["started"] - 0.005,
                             f"#{entry['pos']}", f"~s#{name}#{entry['pos']:015d}#{sid}"))
        snap.signal_ids.setdefault(b.rid, set()).add((name, sid))
    snap.signals[b.rid] = sorted(queued, key=lambda s: s.sk)
    b.step("finish")
    b.finish(expected_output("dsignals", b.at()))


def parallel(snap: Snapshot) -> None:
    b = Build(snap, "dparallel", T0 + 20)
    par = b.place("", "parallel", "parallel")
    b.drivers[DRIVER].append({"at": b.t, "type": "run.waiting", "waits": "parallel"})
    opened = b.t
    # Branch i + MAX_PARALLEL starts once branch i has ended: MAX_PARALLEL at a time.
    ends: dict[int, float] = {}
    for i in range(PARALLEL_BRANCHES):
        scope = f"0:{i}"
        b.t = opened + 0.01 if i < MAX_PARALLEL else ends[i - MAX_PARALLEL] + 0.02
        ready = b.t
        a = b.step("a", scope)
        b.wait("sleep", "sleep", scope, lasts=BRANCH_SLEEP + 0.02)
        v = b.step("b", scope)
        b.entries.append({"scope": scope, "pos": RESULT_POS, "id": f"{scope}#result",
                          "kind": "result", "name": "result", "status": "ok",
                          "value": {"a": a, "b": v}, "error": None, "started": opened,
                          "ended": round(b.t, 3)})
        ends[i] = b.t
        b.drivers[f"{DRIVER}/{scope}"] = [
            {"at": ready, "type": "step.ready"},
            {"at": ready + 0.001, "type": "step.started", "attempt": 1},
            {"at": b.t + 0.01, "type": "step.succeeded", "attempt": 1}]
    b.t = max(ends.values()) + 0.05
    b.entries.append({**par, "status": "ok", "value": None, "started": opened, "ended": b.t})
    b.drivers[DRIVER].append({"at": b.t, "type": "step.started", "attempt": 1})
    b.t += 0.01
    b.step("total")
    snap.parallels[b.rid] = {("", 0): {"total": PARALLEL_BRANCHES, "max": MAX_PARALLEL,
                                       "done": list(range(PARALLEL_BRANCHES))}}
    b.finish(expected_output("dparallel", b.at()))


def events(snap: Snapshot) -> None:
    b = Build(snap, "devent", T0 + 40)
    b.step("open")
    eid = f"{b.name}-ping"
    snap.drive.append({"ev": "event", "run": b.rid, "name": b.name, "subject": b.name,
                       "id": eid, "late": False, "resend": 0, "t": b.t, "answered": b.t + 0.01,
                       "tries": 1, "status": 201, "duplicate": False})
    b.wait("event", "chaos.ping", lasts=0.3, event=eid, value={
        "name": "chaos.ping", "key": b.name, "id": eid, "data": {"n": 0},
        "received_at": b.t})
    b.step("close")
    b.finish(expected_output("devent", b.at()))
    t = Build(snap, "dtimeout", T0 + 50)
    t.step("open")
    t.wait("event", "chaos.ping", lasts=EVENT_SHORT_TIMEOUT + 0.05, status="timeout")
    late = f"{t.name}-late"
    snap.drive.append({"ev": "event", "run": t.rid, "name": t.name, "subject": t.name,
                       "id": late, "late": True, "resend": 0, "t": t.t, "answered": t.t + 0.01,
                       "tries": 1, "status": 201, "duplicate": False})
    t.step("close")
    t.finish(expected_output("dtimeout", t.at()))


def clean() -> Snapshot:
    snap = Snapshot(calm_at=T0)
    for make in (chain, signals, parallel, events):
        make(snap)
    snap.bodies.sort(key=lambda b: b.t)
    return snap


def found(snap: Snapshot) -> set[str]:
    return {v.check for v in check(snap, bound=600).violations}


def entry(snap: Snapshot, run: str, name: str, scope: str = "") -> dict[str, Any]:
    return next(e for e in snap.journals[run] if e["name"] == name and e["scope"] == scope)


def test_clean_durable_runs_have_no_violation() -> None:
    report = check(clean(), bound=600)
    assert report.violations == [], [(v.check, v.message) for v in report.violations]
    durable = report.figures["durable"]
    assert durable["parallel_peak"] == {"bodies": MAX_PARALLEL,
                                        "rows and results": MAX_PARALLEL}
    assert durable["signals"]["keys"] == len(SIGNAL_WAITS)
    assert durable["bodies"]["reexecutions"] == 1  # the flaky step's second attempt


def test_a_committed_value_no_body_returned_is_caught() -> None:
    snap = clean()
    entry(snap, "dchain-run", "s1")["value"] = {"nonce": "forged"}
    assert {"step-value", "output"} <= found(snap)


def test_an_execution_with_another_key_is_caught() -> None:
    snap = clean()
    body = next(b for b in snap.bodies if b.run == "dchain-run" and b.attempt == 1
                and b.start["step"] == "flaky")
    body.start["key"] = "dchain-run:other"
    assert "idempotency-key" in found(snap)


def test_an_attempt_committed_with_no_failed_attempt_before_is_caught() -> None:
    snap = clean()
    snap.bodies = [b for b in snap.bodies if not (b.run == "dchain-run" and b.end
                                                  and b.end.get("error"))]
    assert "step-attempt" in found(snap)


def test_an_operation_at_the_wrong_place_is_caught() -> None:
    snap = clean()
    entry(snap, "dchain-run", "s2")["id"] = op_id("", "s2", 1)
    assert "journal-place" in found(snap)


def test_a_sleep_cut_short_is_caught() -> None:
    snap = clean()
    sleep = next(e for e in snap.journals["dchain-run"] if e["kind"] == "sleep")
    sleep["ended"] = sleep["started"] + CHAIN_SLEEP / 2
    assert "sleep-early" in found(snap)
    snap = clean()
    nxt = entry(snap, "dchain-run", "s1")
    body = next(b for b in snap.bodies if b.op == nxt["id"])
    body.start["t"] -= CHAIN_SLEEP  # the step after the sleep ran during it
    assert "sleep-early" in found(snap)


@pytest.mark.parametrize("what", ["twice", "wrong-wait", "payload"])
def test_a_wait_resolved_wrongly_is_caught(what: str) -> None:
    snap = clean()
    waits = [e for e in snap.journals["dsignals-run"] if e["kind"] == "signal"]
    if what == "twice":  # two waits recorded one signal
        waits[1]["signal"] = waits[0]["signal"]
        assert {"signal-twice", "signal-lost"} <= found(snap)
    elif what == "wrong-wait":  # the signal names another wait as its taker
        snap.signals["dsignals-run"][0].taken_by = "#9"
        assert "signal-wait" in found(snap)
    else:
        waits[0]["value"] = {"key": "else", "n": 0}
        assert "signal-payload" in found(snap)


def test_a_signal_lost_is_caught() -> None:
    snap = clean()
    # A signal taken by a wait that then recorded a timeout: consumed, and lost.
    waits = [e for e in snap.journals["dsignals-run"] if e["kind"] == "signal"]
    waits[-1].update(status="timeout", value=None, signal=None)
    assert {"signal-lost", "signal-wait"} <= found(snap)
    snap = clean()
    # A signal the API accepted that was never queued.
    gone = snap.signals["dsignals-run"].pop()
    waits = [e for e in snap.journals["dsignals-run"] if e.get("signal") == gone.id]
    snap.journals["dsignals-run"] = [e for e in snap.journals["dsignals-run"]
                                     if e not in waits]
    assert "signal-lost" in found(snap)


def test_signals_taken_out_of_order_are_caught() -> None:
    snap = clean()
    approve = [e for e in snap.journals["dsignals-run"] if e["name"] == "approve"]
    one, two = approve[0], approve[1]
    one["signal"], two["signal"] = two["signal"], one["signal"]
    one["value"], two["value"] = two["value"], one["value"]
    by_id = {s.id: s for s in snap.signals["dsignals-run"]}
    by_id[one["signal"]].taken_by, by_id[two["signal"]].taken_by = (
        f"#{one['pos']}", f"#{two['pos']}")
    assert "signal-fifo" in found(snap)


def test_a_resend_that_queued_a_second_signal_is_caught() -> None:
    snap = clean()
    resend = next(d for d in snap.drive if d.get("ev") == "signal" and d["resend"] == 1)
    resend.update(status=202, duplicate=False)
    assert "signal-resend" in found(snap)


def test_a_signal_never_answered_is_caught() -> None:
    snap = clean()
    for d in snap.drive:
        if d.get("key") == "dsignals-0-note-1":
            d.update(status=None, answered=None)
    assert "signal-unanswered" in found(snap)


def test_an_event_missed_taken_late_or_a_timeout_too_soon_is_caught() -> None:
    snap = clean()
    wait = entry(snap, "devent-run", "chaos.ping")
    wait["value"] = {**wait["value"], "id": "someone-else", "key": "someone"}
    assert "event-wrong" in found(snap)
    snap = clean()
    wait = entry(snap, "devent-run", "chaos.ping")
    wait.update(status="timeout", value=None, event=None)
    assert "event-missed" in found(snap)
    snap = clean()
    wait = entry(snap, "dtimeout-run", "chaos.ping")
    wait.update(status="ok", value={"name": "chaos.ping", "key": "dtimeout-0",
                                    "id": "dtimeout-0-late", "data": None})
    assert "event-late-taken" in found(snap)
    snap = clean()
    wait = entry(snap, "dtimeout-run", "chaos.ping")
    wait["ended"] = wait["started"] + EVENT_SHORT_TIMEOUT / 2
    assert "timeout-early" in found(snap)


def test_more_branches_in_flight_than_max_parallel_are_caught() -> None:
    snap = clean()
    # Branch 2 ran at once, not after branch 0: its bodies and its row moved to the start.
    rid = "dparallel-run"
    first = min(b.t for b in snap.bodies if b.run == rid and b.scope == "0:0")
    shift = min(b.t for b in snap.bodies if b.run == rid and b.scope == "0:2") - first
    for b in snap.bodies:
        if b.run == rid and b.scope == "0:2":
            b.start["t"] -= shift
            assert b.end is not None
            b.end["t"] -= shift
    for e in snap.journals[rid]:
        if e["scope"] == "0:2":
            e["started"] -= shift
            e["ended"] -= shift
    row = snap.steps[rid][f"{DRIVER}/0:2"]
    snap.steps[rid][f"{DRIVER}/0:2"] = replace(row, history=tuple(
        {**h, "at": h["at"] - shift} for h in row.history))
    violations = [v.message for v in check(snap, bound=600).violations
                  if v.check == "parallel-peak"]
    assert len(violations) == 2, violations  # by the bodies and by the rows


def test_an_aggregate_missing_a_branch_is_caught() -> None:
    snap = clean()
    snap.parallels["dparallel-run"][("", 0)]["done"] = [0, 1, 2, 3]
    assert "parallel-aggregate" in found(snap)


def test_an_output_the_journal_does_not_say_is_caught() -> None:
    snap = clean()
    out = dict(snap.outputs[("dsignals-run", DRIVER)])
    out["got"] = list(reversed(out["got"]))
    snap.outputs[("dsignals-run", DRIVER)] = out
    assert {"output", "view"} <= found(snap)


def test_a_driver_moving_illegally_or_a_run_failing_is_caught() -> None:
    snap = clean()
    row = snap.steps["dchain-run"][DRIVER]
    snap.steps["dchain-run"][DRIVER] = replace(row, history=(
        *row.history, {"at": row.history[-1]["at"] + 1, "type": "step.started", "attempt": 1}))
    assert {"left-terminal", "driver-transition", "attempt-reused"} <= found(snap)
    snap = clean()
    rid = "dparallel-run"
    run = snap.runs[rid]
    snap.runs[rid] = replace(run, status=RunStatus.FAILED, history=(
        run.history[0], {**run.history[1], "type": "run.failed"}))
    snap.views[rid]["status"] = "failed"
    branch = snap.steps[rid][f"{DRIVER}/0:4"]
    snap.steps[rid][f"{DRIVER}/0:4"] = replace(branch, status=StepStatus.FAILED, history=(
        *branch.history[:-1], {**branch.history[-1], "type": "step.failed"}))
    assert "run-status" in found(snap)
    snap = clean()  # a successful run whose branch driver failed
    branch = snap.steps[rid][f"{DRIVER}/0:4"]
    snap.steps[rid][f"{DRIVER}/0:4"] = replace(branch, status=StepStatus.FAILED, history=(
        *branch.history[:-1], {**branch.history[-1], "type": "step.failed"}))
    assert "driver-status" in found(snap)


def test_the_view_must_show_the_journal() -> None:
    snap = clean()
    snap.views["devent-run"]["steps"].pop()
    assert "view" in found(snap)
