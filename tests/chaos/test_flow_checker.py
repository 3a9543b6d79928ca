"""The flow-control checks find what they promise (each planted violation is reported,
and a sound snapshot reports nothing): a run admitted twice, a queued run that succeeded
unadmitted, more pooled runs in flight than the limit (and of one tenant), a call
before admission, more calls to backend `lim` in flight than its limit, and slots left
held (a limit's holder, a queue item of an ended run, a backend slot of a live worker)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.engine.definition import Definition, StepSpec
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from tests.chaos.flow_checks import FlowChecks
from tests.chaos.snapshot import Call, Snapshot

POOLED = (StepSpec("a", "fn", "/work"), StepSpec("h1", "fn", "/hold", ("a",)),
          StepSpec("h2", "fn", "/hold", ("h1",)))
LIMITED = (StepSpec("a", "fn", "/work"),
           *(StepSpec(f"l{i}", "lim", "/hold", ("a",)) for i in (1, 2, 3)))


def run(rid: str, workflow: str = "pooled", *, tenant: str = "acme", started: float = 0.0,
        finished: float | None = 100.0, status: RunStatus = RunStatus.SUCCESS,
        starts: int = 1) -> RunRecord:
    steps = POOLED if workflow == "pooled" else LIMITED
    history: list[dict[str, Any]] = [{"type": "run.queued", "at": 0.0}]
    history += [{"type": "run.started", "at": started + i} for i in range(starts)]
    if status.terminal:
        history.append({"type": f"run.{status.value}", "at": finished})
    return RunRecord(rid, workflow, status, {"name": rid, "tenant": tenant},
                     Definition(steps), 0.0, len(steps), 0, finished_at=finished,
                     history=tuple(history))


def call(rid: str, step: str, t: float, done: float | None, n: int = 0) -> Call:
    return Call({"id": f"{rid}-{step}-{n}", "t": t, "route": "/hold", "run": rid,
                 "step": step}, None if done is None else {"t": done, "status": 200})


def found(snap: Snapshot) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    FlowChecks(snap, lambda check, msg, *a, **k: out.append((check, msg)), Counter(),
               0.011).all()
    return out


def snapshot(runs: list[RunRecord], calls: list[Call]) -> Snapshot:
    snap = Snapshot()
    snap.runs = {r.run_id: r for r in runs}
    snap.calls = calls
    return snap


def test_a_run_is_admitted_once() -> None:
    assert found(snapshot([run("p0")], [])) == []
    twice = found(snapshot([run("p0", starts=2)], []))
    assert [c for c, _ in twice] == ["admitted-once"] and "admitted 2 times" in twice[0][1]
    never = found(snapshot([run("p0", starts=0)], []))
    assert [c for c, _ in never] == ["admitted-once"] and "no run.started" in never[0][1]
    # A queued run that was killed before its turn never started: nothing to say.
    assert found(snapshot([run("p0", starts=0, status=RunStatus.KILLED)], [])) == []


def test_no_more_pooled_runs_in_flight_than_the_limits() -> None:
    tenants = ["acme", "globex", "initech", "acme"]
    runs = [run(f"p{i}", tenant=tenants[i]) for i in range(4)]
    # Three at once (two of acme), the fourth once one has ended: sound.
    ok = [call("p0", "h1", 1.0, 2.0), call("p1", "h1", 1.1, 2.0), call("p2", "h1", 1.2, 2.5),
          call("p3", "h1", 2.0, 3.0)]
    assert found(snapshot(runs, ok)) == []
    # A call retried after its worker died (the first still in flight) is the same run.
    retried = [*ok[:3], call("p0", "h1", 1.5, 2.0, n=1)]
    assert found(snapshot(runs, retried)) == []
    four = found(snapshot(runs, [*ok[:3], call("p3", "h1", 1.5, 2.2)]))
    assert [c for c, _ in four] == ["limit-exceeded"]
    assert "4 runs of pooled with a call in flight" in four[0][1]
    acme = [run(f"a{i}", tenant="acme") for i in range(3)]
    three = found(snapshot(acme, [call(f"a{i}", "h1", 1.0 + i / 10, 2.0) for i in range(3)]))
    assert [c for c, _ in three] == ["limit-exceeded"] and "of tenant acme" in three[0][1]
    # Calls touching within the clocks' tolerance are not at once.
    edge = [call("a0", "h1", 1.0, 2.0), call("a1", "h1", 1.0, 2.0), call("a2", "h1", 1.995, 3.0)]
    assert found(snapshot(acme, edge)) == []


def test_a_call_before_admission_and_a_stale_one_after_the_end() -> None:
    early = found(snapshot([run("p0", started=5.0)], [call("p0", "h1", 4.0, 4.4)]))
    assert [c for c, _ in early] == ["limit-exceeded"] and "before the run was admitted" in \
        early[0][1]
    # A stale attempt's call in flight after its run ended (a zombie resumed past its
    # lease) does not hold the run's place: the next ones run meanwhile.
    runs = [run("p0", finished=2.0), *(run(f"p{i}", tenant=f"t{i}", started=2.1)
                                       for i in (1, 2, 3))]
    calls = [call("p0", "h2", 1.0, 1.4), call("p0", "h2", 2.5, 2.9, n=1),
             *(call(f"p{i}", "h1", 2.2, 3.0) for i in (1, 2, 3))]
    assert found(snapshot(runs, calls)) == []


def test_no_more_calls_to_the_backend_in_flight_than_its_limit() -> None:
    runs = [run("l0", "limited"), run("l1", "limited")]
    two = [call("l0", "l1", 1.0, 1.4), call("l0", "l2", 1.0, 1.4), call("l1", "l1", 1.4, 1.8)]
    assert found(snapshot(runs, two)) == []
    three = found(snapshot(runs, [*two, call("l1", "l2", 1.2, 1.6)]))
    assert [c for c, _ in three] == ["limit-exceeded"]
    assert "3 calls to backend lim in flight" in three[0][1]
    # A call the function server's death cut off ends at that death.
    cut = snapshot(runs, [call("l0", "l1", 1.0, None), call("l0", "l2", 1.1, 1.5),
                          call("l1", "l1", 1.3, 1.7)])
    cut.faults = [{"t": 1.2, "kind": "restart-all", "procs": ["fn", "worker-1"], "pids": {}}]
    assert found(cut) == []
    cut.faults = []
    assert [c for c, _ in found(cut)] == ["limit-exceeded"]


def test_no_slot_is_left_held_once_every_run_ended() -> None:
    runs = [run("p0"), run("p1", tenant="globex"), run("l0", "limited")]
    sound = snapshot(runs, [])
    sound.control = {"lock#workflow:pooled#/-": {"holders": {"SS": []}},
                     "lock#workflow:pooled#acme/-": {}}
    assert found(sound) == []
    held = snapshot(runs, [])
    held.control = {"lock#workflow:pooled#acme/-": {"holders": {"SS": ["p0"]}}}
    assert [c for c, _ in found(held)] == ["slot-leaked"]
    queued = snapshot(runs, [])
    queued.control = {"queue#16#workflow:pooled##globex/000000000001000#p1": {
        "run_id": {"S": "p1"}}}
    assert "still queues p1" in found(queued)[0][1]
    # While a pooled run is open, its holders are its own business.
    open_ = snapshot([run("p0", status=RunStatus.RUNNING, finished=None)], [])
    open_.control = held.control
    assert found(open_) == []


@pytest.mark.parametrize("holder", [
    "l0/l1#host:4242:abcd1234",
    # A worker's lease owner carries its claim's number (worker.py), a fan-out item
    # its index: the pid is found in both.
    "l0/l1#host:4242:abcd1234#235",
    "l0/l1[3]#host:4242:abcd1234#7",
])
def test_a_backend_slot_left_is_a_dead_workers(holder: str) -> None:
    def left(holder: str, until: float, faults: list[dict[str, Any]]) -> list[tuple[str, str]]:
        snap = snapshot([run("l0", "limited")], [])
        snap.control = {"blimit#lim/-": {"holders": {"M": {holder: {"N": str(until)}}}}}
        snap.faults = faults
        return found(snap)

    killed = [{"t": 10.0, "kind": "sigkill", "proc": "worker-1#1", "pid": 4242}]
    assert left(holder, 14.0, killed) == []
    everyone = [{"t": 10.0, "kind": "restart-all", "procs": ["worker-1"],
                 "pids": {"worker-1": 4242}}]
    assert left(holder, 14.0, everyone) == []
    alive = left(holder, 14.0, [])
    assert [c for c, _ in alive] == ["slot-leaked"] and "never died" in alive[0][1]
    long_lease = left(holder, 30.0, killed)
    assert [c for c, _ in long_lease] == ["slot-leaked"] and "after its worker died" in \
        long_lease[0][1]
