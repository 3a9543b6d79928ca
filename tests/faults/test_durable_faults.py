"""Durable runs under the faults DAG runs face: every message sent twice, a dispatch
lost, a worker SIGKILLed while a step body runs; and those of version 2's checkpoint
streams: a stream cut after k checkpoints, every checkpoint sent twice, a worker
SIGKILLed mid-stream. Each step's result is committed once, a committed step never runs
again, and every execution of a step carries the same idempotency key."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.queue import Dispatch
from tests.support.durable_fns import CONCURRENCY, LEDGER
from tests.support.harness import Harness
from tests.support.proxy import CheckpointProxy

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  chain: { backend: app }
  sleeper: { backend: app }
  approval: { backend: app }
  fanout: { backend: app, timeout: 2s }
  branches: { backend: app, timeout: 2s }
  slowstep: { backend: app, timeout: 3s }
  slowchain: { backend: app, timeout: 3s }
"""


def build(build_harness: Any, app_url: str, tmp_path: Path, **settings: Any) -> Harness:
    h: Harness = build_harness(MANIFEST, tmp_path, {"APP": app_url}, **settings)
    return h


def committed_once(h: Harness, run_id: str) -> Counter[tuple[str, int]]:
    places = Counter((e.get("scope", ""), e["pos"])
                     for e in h.rt.store.journal.read_journal(run_id))
    assert all(n == 1 for n in places.values()), places
    return places


def test_every_message_sent_twice_runs_each_step_body_once(
        build_harness: Any, app_url: str, tmp_path: Path) -> None:
    h = build(build_harness, app_url, tmp_path)
    sent: list[Dispatch] = []

    def twice(msgs: list[Dispatch]) -> list[Dispatch]:
        sent.extend(msgs)
        return [m for m in msgs for _ in range(2)]

    h.rt.queues.tamper = twice
    h.start_workers(n=2, threads=4)
    try:
        runs = [h.start("chain", {"steps": 4}), h.start("sleeper", {"sleep": "1s"}),
                h.start("fanout", {"n": 6, "max": 2}), h.start("branches", {"sleep": "1s"}),
                h.start("approval", {})]
        h.rt.signals.send(runs[-1], "approve", {"ok": True})
        for run_id in runs:
            assert h.wait(run_id)["status"] == "success", h.rt.runs.view(run_id)
            committed_once(h, run_id)
            bodies = Counter(LEDGER.bodies(run_id))
            assert all(n == 1 for n in bodies.values()), (run_id, bodies)
        assert len(sent) >= 10  # starts, timers, branches and wakes went through SQS
        assert CONCURRENCY.peak[runs[2]] <= 2
    finally:
        h.close()


def test_a_lost_dispatch_of_a_waiting_run_is_repaired_by_the_sweep(
        build_harness: Any, app_url: str, tmp_path: Path) -> None:
    h = build(build_harness, app_url, tmp_path, redispatch_after=1.0)
    dropped: list[Dispatch] = []

    def drop_wakes(msgs: list[Dispatch]) -> list[Dispatch]:
        keep = []
        for m in msgs:
            # The dispatch a signal sends a waiting run: lost (the poke's wake stays).
            if m.step == "$run" and m.due_at is None and m.attempt == 1 and not dropped \
                    and (driver := h.rt.store.drivers.get_driver(m.run_id)) is not None \
                    and (driver.waiting or {}).get("kind") == "signal":
                dropped.append(m)
                continue
            keep.append(m)
        return keep

    h.start_workers(n=1, threads=2)
    h.start_sweeper()
    try:
        run_id = h.start("approval", {})
        deadline = time.monotonic() + 15
        while not (h.rt.store.drivers.get_driver(run_id) or _Nothing()).waiting:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        h.rt.queues.tamper = drop_wakes
        h.rt.signals.send(run_id, "approve", {"late": True})
        assert h.wait(run_id)["output"] == {"decision": {"late": True}}
        assert dropped, "the signal's dispatch was not the one dropped"
    finally:
        h.close()


class _Nothing:
    waiting = None


def worker_process(h: Harness, app_url: str, tmp_path: Path, emulator: Any
                   ) -> subprocess.Popen[bytes]:
    """`orchestrator worker` in a process of its own on the harness's tables (a lease
    margin of 1 s), to be SIGKILLed."""
    manifest = tmp_path / "durable.yml"
    manifest.write_text(MANIFEST)
    env = {**os.environ, "AWS_ENDPOINT_URL": emulator.url, "ORCH_PREFIX": h.rt.settings.prefix,
           "ORCH_LEASE_MARGIN": "1", "APP": app_url, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "worker", "--manifest", str(manifest)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_worker_sigkilled_mid_step_leaves_one_commit_and_one_key(
        build_harness: Any, app_url: str, tmp_path: Path, emulator: Any) -> None:
    h = build(build_harness, app_url, tmp_path, lease_margin=1.0)
    proc = worker_process(h, app_url, tmp_path, emulator)
    try:
        run_id = h.start("slowstep", {"seconds": 2})
        deadline = time.monotonic() + 30
        while "slow" not in LEDGER.bodies(run_id):
            assert time.monotonic() < deadline, "the subprocess worker never called the step"
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # mid-call: the step body is sleeping
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    h.start_workers()
    h.start_sweeper()
    try:
        view = h.wait(run_id, timeout=30)
        assert view["status"] == "success", view
        assert view["output"] == {"first": "slept", "after": "done"}
        assert LEDGER.bodies(run_id).count("slow") == 2  # at least once: it ran again
        assert len(LEDGER.keys(run_id, "slow")) == 1  # with the same key
        places = committed_once(h, run_id)
        assert len(places) == 2
    finally:
        h.close()


class FailOnce:
    """A fault at the AWS boundary (botocore's own event hook, as the chaos harness
    injects them): the first DynamoDB request `matches` picks fails, as a worker dying
    right there would leave things."""

    def __init__(self, h: Harness, matches: Any) -> None:
        self.matches = matches
        self.fired = 0
        h.rt.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb", self)

    def __call__(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if not self.fired and self.matches(model.name, params):
            self.fired += 1
            raise RuntimeError("injected: the worker died here")


# Branches advanced by drivers of their own: in version 1 every branch; in version 2
# (which runs branches inside the parent's call) those that wait.
BRANCHED = {
    "v1": ("fanout", {"n": 3, "max": 2, "hold": 0.01}, {"results": [0, 1, 4]}),
    "v2": ("branches", {"sleep": "10ms"}, {"results": [0, 11, 22], "total": 33}),
}


@pytest.fixture(params=sorted(BRANCHED))
def branched(request: Any, app_url: str, app_url_v1: str
             ) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    workflow, payload, output = BRANCHED[request.param]
    return (app_url_v1 if request.param == "v1" else app_url), workflow, payload, output


def test_a_branch_whose_result_was_never_counted_is_counted_by_its_next_holder(
        build_harness: Any, branched: Any, tmp_path: Path) -> None:
    url, workflow, payload, output = branched
    h = build(build_harness, url, tmp_path, lease_margin=1.0, redispatch_after=1.0)
    fault = FailOnce(h, lambda op, p: op == "UpdateItem"
                     and p.get("Key", {}).get("step", {}).get("S", "").startswith("~p#"))
    h.start_workers(1, threads=4)
    h.start_sweeper()
    try:
        run_id = h.start(workflow, payload)
        view = h.wait(run_id, timeout=40)
        assert view["status"] == "success", view
        assert fault.fired == 1
        assert view["output"] == output
        calls = Counter(LEDGER.bodies(run_id))
        assert all(n == 1 for n in calls.values()), calls  # no branch ran its step again
    finally:
        h.close()


def test_a_branch_row_its_holder_left_in_flight_is_ended_before_the_run(
        build_harness: Any, branched: Any, tmp_path: Path) -> None:
    url, workflow, payload, output = branched
    h = build(build_harness, url, tmp_path, lease_margin=30.0)

    def branch_success(op: str, p: dict[str, Any]) -> bool:
        step = p.get("Key", {}).get("step", {}).get("S", "")
        return (op == "UpdateItem" and step.startswith("$run/")
                and ":out" in p.get("ExpressionAttributeValues", {}))

    fault = FailOnce(h, branch_success)
    h.start_workers(1, threads=4)
    try:
        run_id = h.start(workflow, payload)
        view = h.wait(run_id, timeout=30)
        assert view["status"] == "success", view
        assert fault.fired == 1
        assert view["output"] == output
        rows = h.rt.store.drivers.all(run_id)
        assert rows and all(r.status.terminal for r in rows), [(r.step, r.status) for r in rows]
    finally:
        h.close()


def one_key_each(run_id: str) -> Counter[str]:
    bodies = Counter(LEDGER.bodies(run_id))
    for name in bodies:
        assert len(LEDGER.keys(run_id, name)) == 1, (name, LEDGER.keys(run_id, name))
    return bodies


@pytest.mark.slow  # version 2's stream faults (CI's slow phase runs them)
def test_a_stream_cut_after_k_checkpoints_goes_on_from_them(
        build_harness: Any, app_url: str, tmp_path: Path) -> None:
    proxy = CheckpointProxy(app_url, cut_after=3)
    with BackgroundServer(proxy.app()) as server:
        h = build(build_harness, server.url, tmp_path)
        h.start_workers(1, threads=4)
        try:
            run_id = h.start("chain", {"steps": 8})
            view = h.wait(run_id, timeout=30)
        finally:
            h.close()
    assert view["status"] == "success" and view["output"] == {"total": 28}, view
    assert proxy.cut_at == [3]
    # The three checkpoints that went through were committed as they came, before the
    # cut: the next call replayed them and never ran their bodies again.
    places = committed_once(h, run_id)
    assert len(places) == 8
    bodies = one_key_each(run_id)
    assert [bodies[f"add-{i}"] for i in range(3)] == [1, 1, 1], bodies
    assert all(bodies[f"add-{i}"] in (1, 2) for i in range(3, 8)), bodies
    history = h.rt.runs.history(run_id)
    assert any(e.get("error", {}).get("code") == "connection_error" for e in history), history


@pytest.mark.slow  # version 2's stream faults (CI's slow phase runs them)
def test_every_checkpoint_sent_twice_is_committed_once(
        build_harness: Any, app_url: str, tmp_path: Path) -> None:
    proxy = CheckpointProxy(app_url, twice=True)
    with BackgroundServer(proxy.app()) as server:
        h = build(build_harness, server.url, tmp_path)
        h.start_workers(1, threads=4)
        try:
            runs = {h.start("chain", {"steps": 6}): {"total": 15},
                    h.start("branches", {"sleep": "10ms"}): {"results": [0, 11, 22],
                                                            "total": 33}}
            views = {r: h.wait(r, timeout=30) for r in runs}
        finally:
            h.close()
    assert proxy.passed  # the lines went through the proxy, twice each
    for run_id, output in runs.items():
        assert views[run_id]["status"] == "success", views[run_id]
        assert views[run_id]["output"] == output
        committed_once(h, run_id)
        bodies = one_key_each(run_id)
        assert all(n == 1 for n in bodies.values()), bodies


@pytest.mark.slow  # version 2's stream faults (CI's slow phase runs them)
def test_a_worker_sigkilled_mid_stream_leaves_a_prefix_the_run_goes_on_from(
        build_harness: Any, app_url: str, tmp_path: Path, emulator: Any) -> None:
    h = build(build_harness, app_url, tmp_path, lease_margin=1.0)
    proc = worker_process(h, app_url, tmp_path, emulator)
    try:
        run_id = h.start("slowchain", {"steps": 60})
        deadline = time.monotonic() + 30
        while len(h.rt.store.journal.read_journal(run_id)) < 10:
            assert time.monotonic() < deadline, "the subprocess worker committed nothing"
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # mid-stream: a step body runs, lines in flight
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    at_kill = len(h.rt.store.journal.read_journal(run_id))
    h.start_workers()
    h.start_sweeper()
    try:
        view = h.wait(run_id, timeout=60)
    finally:
        h.close()
    assert view["status"] == "success" and view["output"] == {"done": True}, view
    assert len(committed_once(h, run_id)) == 60
    bodies = one_key_each(run_id)
    # What was committed before the kill never ran again; the rest ran at least once.
    assert [bodies[f"slow-{i}"] for i in range(at_kill)] == [1] * at_kill, bodies
    assert all(bodies[f"slow-{i}"] >= 1 for i in range(60)), bodies


def test_a_branch_row_never_taken_is_settled_through_dispatched(
        build_harness: Any, app_url: str, tmp_path: Path) -> None:
    # Another call ran the branch to its end before anyone took the row's dispatch: the
    # parent settles it, by moves the transition table allows (ready, dispatched, success).
    from orchestrator.engine.records import StepRecord
    from orchestrator.engine.states import STEP_TRANSITIONS, StepStatus

    h = build(build_harness, app_url, tmp_path)
    try:
        run_id = h.start("branches", {"sleep": "10ms"})
        now = time.time()
        row = StepRecord(run_id=run_id, step="$run/9:0", status=StepStatus.READY,
                         backend="app", route="/", dependants=("$run",), attempt=1,
                         max_attempts=3, timeout=2.0, ready_at=now, wake_at=now + 60,
                         history=({"at": round(now, 3), "type": "step.ready"},))
        h.rt.store.steps.create_step_if_absent(row)
        h.rt.store.drivers.settle_branch(run_id, "$run/9:0", time.time())
        settled = h.rt.store.drivers.get_driver(run_id, "$run/9:0")
        assert settled is not None and settled.status is StepStatus.SUCCESS
        kinds = [e["type"] for e in settled.history]
        assert kinds == ["step.ready", "step.started", "step.succeeded"], kinds
        statuses = [StepStatus.READY, StepStatus.DISPATCHED, StepStatus.SUCCESS]
        assert all(b in STEP_TRANSITIONS[a] for a, b in itertools.pairwise(statuses))
        # Settling again changes nothing.
        h.rt.store.drivers.settle_branch(run_id, "$run/9:0", time.time())
        again = h.rt.store.drivers.get_driver(run_id, "$run/9:0")
        assert again is not None and len(again.history) == 3
    finally:
        h.close()
