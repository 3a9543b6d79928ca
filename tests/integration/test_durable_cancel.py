"""A stop reaches a durable call (DESIGN invariant 5, README "Cancel and rerun"): while a
call streams, the worker holding it learns of the stop within a second and hangs up, and
the SDK starts no operation once its caller is gone. So a step that was running when the
stop was committed ends, and nothing after it starts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_durable import until
from tests.support.durable_fns import LEDGER
from tests.support.harness import Harness
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
  fn: { url: "${FN}", timeout: 10s }
workflows:
  slowstep: { backend: app, timeout: 30s }
  fanout: { backend: app, timeout: 30s }
  waves:
    steps:
      each:
        backend: fn
        route: /item
        payload: { seconds: 1.5 }
        fanOut: { items: "input.items", maxParallel: 1 }
"""


@pytest.fixture
def h(build_harness: Any, tmp_path: Any, app_url: str, testfns: str) -> Iterator[Harness]:
    harness = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns})
    harness.start_workers(1, threads=4)
    harness.start_sweeper()
    yield harness
    harness.close()


def test_a_cancel_while_a_step_runs_starts_nothing_after_it(h: Harness) -> None:
    run_id = h.start("slowstep", {"seconds": 2})
    until(lambda: "slow" in LEDGER.bodies(run_id))
    h.rt.runs.kill(run_id, "stop")
    assert h.wait(run_id)["status"] == "killed"
    # `slow` ends about 2 s after the cancel: its next step must not start, neither in
    # the call that ran `slow` nor in another.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # the call could only start it within its budget
        assert "after" not in LEDGER.bodies(run_id), LEDGER.bodies(run_id)
        time.sleep(0.05)
    assert LEDGER.bodies(run_id) == ["slow"]


def test_a_cancel_while_a_parallel_branch_runs_starts_no_other_branch(h: Harness) -> None:
    # One branch at a time, each 2 s: the cancel lands while the first runs.
    run_id = h.start("fanout", {"n": 4, "max": 1, "hold": 2.0})
    until(lambda: LEDGER.bodies(run_id))
    h.rt.runs.kill(run_id, "stop")
    assert h.wait(run_id)["status"] == "killed"
    deadline = time.monotonic() + 2.5  # past the first branch's end
    while time.monotonic() < deadline:
        assert LEDGER.bodies(run_id) == ["probe-0"], LEDGER.bodies(run_id)
        time.sleep(0.05)


def test_a_cancel_during_a_fan_out_wave_starts_no_next_wave(
        h: Harness, recorder: Recorder) -> None:
    run_id = h.start("waves", {"items": ["a", "b", "c", "d"]})

    def calls() -> list[Any]:
        return [c for c in recorder.calls if c.body["run"]["run_id"] == run_id]

    until(calls)
    h.rt.runs.kill(run_id, "stop")
    view = h.wait(run_id)
    assert view["status"] == "killed"
    # The wave in flight ends; the step then ends without another.
    until(lambda: h.rt.store.steps.get_step(run_id, "each").status.terminal)
    assert [c.body["item"] for c in calls()] == ["a"]
