"""Locks: reference 002's "a lock per customer" as the demo declares it, in Python
(`customer-sync`: `async with ctx.lock(...)`) and in YAML (`customer-update`: `lock:` on
a step), on the demo app over real HTTP with four worker threads. Three runs for one
customer: their locked sections never overlap and run in the order the runs reached the
lock (made certain: each run is started once the one before waits in line); a run for
another customer proceeds meanwhile; waiting holds no worker. A run killed while it
holds the lock hands it over; a lock left by a run that vanished is recovered."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.examples import monthly_report
from functions.examples.durable.store import Log
from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.control_keys import lock_item_key
from tests.support.harness import BuildHarness, Harness
from tests.support.polling import until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(build_harness: BuildHarness, tmp_path: Path) -> Iterator[tuple[Harness, Path]]:
    work = tmp_path / "work"
    with BackgroundServer(monthly_report.create_app(work_dir=work)) as server:
        h = build_harness((ROOT / "orchestrator.yml").read_text(), ROOT,
                          {"FUNCTIONS_URL": server.url})
        h.start_workers(threads=4)
        h.start_sweeper()
        try:
            yield h, work
        finally:
            h.close()


def waits_in_line(h: Harness, run_id: str, row: str) -> Callable[[], bool]:
    def check() -> bool:
        r = h.rt.store.steps.get_step(run_id, row)
        return bool(r is not None and r.lease_owner is None and r.waiting
                    and r.waiting.get("kind") == "lock")
    return check


def sections(log: Log, customer: str) -> list[tuple[str, float, float]]:
    starts = {e["run"]: e["at"] for e in log.entries(event="start", customer=customer)}
    ends = {e["run"]: e["at"] for e in log.entries(event="end", customer=customer)}
    return sorted(((r, starts[r], ends[r]) for r in starts if r in ends),
                  key=lambda s: s[1])


def check_one_at_a_time(h: Harness, log: Log, workflow: str, row: str) -> None:
    first = h.start(workflow, {"customer": "acme", "seconds": 3.0})
    until("holding", lambda: log.entries(event="start", run=first))
    second = h.start(workflow, {"customer": "acme", "seconds": 0.2})
    until("in line", waits_in_line(h, second, row))
    if row == "$run":  # a durable run: its view without steps says what it waits for
        alone = json.loads(h.rt.runs.view_body(second, steps=False))
        assert "steps" not in alone and alone["waiting"]["kind"] == "lock", alone
        assert alone["waiting"]["detail"]["key"] == "customer-acme"
    third = h.start(workflow, {"customer": "acme", "seconds": 0.2})
    until("in line", waits_in_line(h, third, row))
    other = h.start(workflow, {"customer": "globex", "seconds": 0.1})
    # Another customer's run goes ahead while acme's wait: it is done before the first
    # acme section is (3 s: a margin for a loaded machine, not a sleep of the test's).
    assert h.wait(other)["status"] == "success"
    assert not log.entries(event="end", run=first)
    views = [h.wait(r) for r in (first, second, third)]
    assert [v["status"] for v in views] == ["success"] * 3
    done = sections(log, "acme")
    assert [r for r, _, _ in done] == [first, second, third]  # arrival order
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(done)), done
    # The last run lets the lock go as it ends (just after its status is written).
    until("the lock let go",
          lambda: h.rt.store.locks.holder("customer-acme", time.time()) is None)


def test_a_lock_per_customer_in_python(demo: tuple[Harness, Path]) -> None:
    h, work = demo
    check_one_at_a_time(h, Log(work / "durable" / "customers" / "sections.jsonl"),
                        "customer-sync", "$run")


def test_a_lock_per_customer_in_yaml(demo: tuple[Harness, Path]) -> None:
    h, work = demo
    check_one_at_a_time(h, Log(work / "flow" / "customers.jsonl"), "customer-update",
                        "update")


def test_a_killed_holder_hands_the_lock_over(demo: tuple[Harness, Path]) -> None:
    h, work = demo
    log = Log(work / "flow" / "customers.jsonl")
    first = h.start("customer-update", {"customer": "acme", "seconds": 2})
    until("holding", lambda: log.entries(event="start", run=first))
    second = h.start("customer-update", {"customer": "acme", "seconds": 0.1})
    until("in line", waits_in_line(h, second, "update"))
    h.rt.runs.cancel(first, "no longer needed")
    assert h.wait(second)["status"] == "success"
    assert h.wait(first)["status"] == "killed"


def test_a_lock_left_by_a_vanished_run_is_recovered(demo: tuple[Harness, Path]) -> None:
    h, _ = demo
    now = time.time()
    # A holder whose run is gone (its row expired and deleted): nobody will release it.
    assert h.rt.store.control.put_new(lock_item_key("customer-zed"), now=now, attrs={
        "holder": {"S": "ghost#update"}, "run_id": {"S": "ghost"}, "since": {"N": str(now)}})
    assert h.rt.store.locks.holder("customer-zed", now) is not None
    run_id = h.start("customer-update", {"customer": "zed", "seconds": 0.1})
    assert h.wait(run_id)["status"] == "success"
    assert h.rt.store.locks.holder("customer-zed", time.time()) is None


def test_a_lock_is_handed_over_when_its_holders_worker_is_sigkilled(
        build_harness: BuildHarness, emulator: Any, tmp_path: Path) -> None:
    """The holder's worker (a process of its own) is SIGKILLed while the locked step's
    call is under way. Its run keeps the lock (the step is not over): once the lease
    ends another worker runs the step again, still holding it, and then hands it to the
    run waiting in line. At no instant do two runs hold it."""
    work = tmp_path / "work"
    with BackgroundServer(monthly_report.create_app(work_dir=work)) as server:
        h = build_harness((ROOT / "orchestrator.yml").read_text(), ROOT,
                          {"FUNCTIONS_URL": server.url}, default_step_timeout=3.0,
                          lease_margin=1.0)
        env = {**os.environ, "AWS_ENDPOINT_URL": emulator.url,
               "ORCH_PREFIX": h.rt.settings.prefix, "ORCH_LEASE_MARGIN": "1",
               "FUNCTIONS_URL": server.url, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "worker", "--manifest",
             str(ROOT / "orchestrator.yml")],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        log = Log(work / "flow" / "customers.jsonl")
        holders: list[str | None] = []
        try:
            first = h.start("customer-update", {"customer": "acme", "seconds": 1.0})
            until("holding", lambda: log.entries(event="start", run=first), timeout=30)
            second = h.start("customer-update", {"customer": "acme", "seconds": 0.1})
            until("in line", waits_in_line(h, second, "update"), timeout=30)
            proc.send_signal(signal.SIGKILL)  # mid-call: the locked section is under way
            proc.wait(timeout=10)
            h.start_workers(threads=4)
            h.start_sweeper()

            def watch() -> bool:
                held = h.rt.store.locks.holder("customer-acme", time.time())
                holders.append(None if held is None else held.run_id)
                return h.rt.runs.get(second).status.terminal  # type: ignore[union-attr]
            until("handed over and done", watch, timeout=40)
            assert h.wait(first)["status"] == "success"
            assert h.wait(second)["status"] == "success"
        finally:
            if proc.poll() is None:
                proc.kill()
            h.close()
    done = sections(log, "acme")
    # The holder's section ran again (at least once), all before the next run's.
    assert [r for r, _, _ in done].count(first) >= 1 and done[-1][0] == second
    assert all(end <= done[-1][1] for r, _, end in done if r == first)
    # The lock went from the first run to the second, never back, never to two.
    seen = [r for i, r in enumerate(holders) if r is not None and (i == 0 or holders[i - 1] != r)]
    assert seen in ([first, second], [second], [first]), seen
