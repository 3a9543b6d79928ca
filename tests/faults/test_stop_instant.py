"""A run's stop instant (DESIGN.md, invariant 5): the commit of a step's final failure
under `halt`, or of a cancel. A step starts at its start check, a strongly consistent
read of its run made after its lease is taken and right before its call; no step whose
check comes after the stop instant is called, whoever makes the stop's pass and however
late, and `step.started` is kept only for attempts that passed their check.

Each interleaving is forced deterministically: the failing worker is held between its
failure's write and its halt pass (a botocore hook on its own clients runs the other
worker's moves there, as if it were SIGSTOPped), or dies there, while another worker,
with clients of its own, claims a ready step."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.records import StepRecord
from orchestrator.runtime import Runtime
from orchestrator.services.execution.tally import Tally
from tests.faults.test_stop_races import claim, retried, setup, stop_instant
from tests.support.harness import Harness, steps_of
from tests.support.testfns import Recorder


class Died(Exception):
    """The failing worker's process ended here."""


def at(h: Harness | Runtime, when: str, operation: str, act: Callable[[], None]) -> list[bool]:
    """Run `act` once, `when` ("before" or "after") this process's next `operation`."""
    rt = h.rt if isinstance(h, Harness) else h
    fired: list[bool] = []

    def hook(**_: Any) -> None:
        if not fired:
            fired.append(True)
            act()

    event = "before-call" if when == "before" else "after-call"
    rt.clients.dynamodb.meta.events.register(f"{event}.dynamodb.{operation}", hook)
    return fired


def entries(h: Harness, run_id: str, step: str) -> list[dict[str, Any]]:
    return [e for e in h.rt.runs.history(run_id) if e.get("step") == step]


def assert_no_start_after_the_stop(h: Harness, run_id: str) -> float:
    history = h.rt.runs.history(run_id)
    stop = stop_instant(history)
    late = [e for e in history if e["type"] == "step.started" and e["at"] > stop]
    assert late == [], late
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert run is not None and run.stop_at == stop
    return stop


def test_a_claim_after_the_failure_commit_is_never_called(
    harness_factory: Any, recorder: Recorder
) -> None:
    """Held after its failure's write, before its pass: another worker takes a ready
    step's message. Its claim is taken, its check finds the run halting."""
    h, other, _sent = setup(harness_factory)
    run_id = h.start("w")
    fired = at(h, "after", "TransactWriteItems", lambda: other.worker(worker_id="w2").handle(
        Dispatch(run_id=run_id, step="slow", attempt=1)))
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert fired
    assert recorder.for_step(run_id, "slow") == []
    assert [e["type"] for e in entries(h, run_id, "slow")] == ["step.ready", "step.skipped"]
    assert_no_start_after_the_stop(h, run_id)
    view = h.rt.runs.view(run_id)
    assert view["status"] == "failed" and view["error"]["step"] == "boom"
    assert steps_of(view)["slow"]["status"] == "skipped"
    assert steps_of(view)["slow"].get("started_at") is None


def test_a_claim_before_the_failure_whose_check_comes_after_is_never_called(
    harness_factory: Any, recorder: Recorder
) -> None:
    """Another worker took slow's lease just before the failure's write, and reaches
    its check only after it (while the halter is held before its pass)."""
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    claimed: list[StepRecord] = []
    at(h, "before", "TransactWriteItems",
       lambda: claimed.append(claim(other, run_id, "slow", "w2")))
    at(h, "after", "TransactWriteItems",
       lambda: other.worker(worker_id="w2").execute(claimed[0], Tally()))
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert claimed and claimed[0].claimed
    assert recorder.for_step(run_id, "slow") == []
    assert not retried(sent, "slow")
    assert [e["type"] for e in entries(h, run_id, "slow")] == ["step.ready", "step.skipped"]
    assert_no_start_after_the_stop(h, run_id)
    view = h.rt.runs.view(run_id)
    assert view["status"] == "failed"
    assert steps_of(view)["slow"]["status"] == "skipped"


def test_a_check_before_the_failure_lands_though_its_call_comes_after(
    harness_factory: Any, recorder: Recorder
) -> None:
    """slow's worker made its check, then stalled: the whole failure and halt happen
    before it calls. Its attempt started before the stop instant, so it is called and
    lands as documented, and is not tried again; what depends on it is skipped."""
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    row = claim(other, run_id, "slow", "w2")
    fired = at(other, "after", "GetItem",
               lambda: h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1)))
    t = Tally()
    other.worker(worker_id="w2").execute(row, t)
    other.executor.flush(t)
    assert fired
    (_call,) = recorder.for_step(run_id, "slow")
    stop = assert_no_start_after_the_stop(h, run_id)
    (started,) = [e for e in entries(h, run_id, "slow") if e["type"] == "step.started"]
    assert started["at"] <= stop
    assert not retried(sent, "slow")
    view = h.rt.runs.view(run_id)
    assert view["status"] == "failed" and view["error"]["step"] == "boom"
    steps = steps_of(view)
    assert (steps["slow"]["status"], steps["after"]["status"]) == ("success", "skipped")


def test_a_halter_that_died_after_its_failure_stops_every_start_until_the_sweep(
    harness_factory: Any, recorder: Recorder
) -> None:
    """The failing worker dies right after its failure's write: no pass, no `run.halted`.
    Every claim made meanwhile (a first attempt, a retry) is given up at its check; the
    sweep that finds the failure halts the run."""
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    w2 = other.worker(worker_id="w2")
    w2.handle(Dispatch(run_id=run_id, step="flaky", attempt=1))  # a retry is due
    retry = [m for m in sent if m.step == "flaky" and m.attempt == 2]
    assert retry

    def die() -> None:
        raise Died

    at(h, "after", "TransactWriteItems", die)
    try:
        h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    except Died:
        pass
    else:
        raise AssertionError("the failing worker did not reach its failure's write")
    assert h.rt.runs.view(run_id)["status"] == "running"
    w2.handle(Dispatch(run_id=run_id, step="slow", attempt=1))
    w2.handle(retry[0].model_copy(update={"due_at": None}))
    assert recorder.for_step(run_id, "slow") == []
    assert len(recorder.for_step(run_id, "flaky")) == 1
    assert_no_start_after_the_stop(h, run_id)
    later = h.rt.sweeper(clock=lambda: time.time() + 60)
    later.sweep()
    later.sweep(since=0)
    view = h.rt.runs.view(run_id)
    assert view["status"] == "failed" and view["error"]["step"] == "boom"
    assert {s["status"] for n, s in steps_of(view).items() if n != "boom"} == {"skipped"}
    assert_no_start_after_the_stop(h, run_id)


def test_a_cancel_is_the_stop_instant_of_a_step_claimed_before_it(
    harness_factory: Any, recorder: Recorder
) -> None:
    """A cancel committed between a claim and its check: the check finds it."""
    h, other, _sent = setup(harness_factory)
    run_id = h.start("w")
    row = claim(other, run_id, "slow", "w2")
    other.store.runs.request_kill(run_id, "stop it", time.time())  # its pass never runs
    other.worker(worker_id="w2").execute(row, Tally())
    assert recorder.for_step(run_id, "slow") == []
    assert [e["type"] for e in entries(h, run_id, "slow")] == ["step.ready", "step.skipped"]
    assert_no_start_after_the_stop(h, run_id)


def test_a_cancel_whose_pass_flags_a_claimed_step_before_its_check_leaves_no_start(
    harness_factory: Any, recorder: Recorder
) -> None:
    """A cancel committed between a claim and its check, and its pass made too: the
    pass flags the claimed row as in flight (`step.stopping`). The check gives the
    attempt up, and the history reads as if the claim had been refused: neither the
    start nor the flag of an attempt that never started is left (the chaos harness's
    seed 101 found the flag left behind, a `step.stopping` of a step only ready)."""
    h, other, _sent = setup(harness_factory)
    run_id = h.start("w")
    row = claim(other, run_id, "slow", "w2")
    other.runs.cancel(run_id, "stop it")  # its pass flags `slow`, claimed
    flagged = [e["type"] for e in entries(h, run_id, "slow")]
    assert flagged == ["step.ready", "step.started", "step.stopping"]
    other.worker(worker_id="w2").execute(row, Tally())
    assert recorder.for_step(run_id, "slow") == []
    assert [e["type"] for e in entries(h, run_id, "slow")] == ["step.ready", "step.skipped"]
    assert_no_start_after_the_stop(h, run_id)


def test_continue_independent_sets_no_stop_instant(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, _, _sent = setup(harness_factory)
    run_id = h.start("joined")
    w = h.rt.worker()
    w.handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    w.handle(Dispatch(run_id=run_id, step="side", attempt=1))
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert run is not None and run.stop_at is None
    assert len(recorder.for_step(run_id, "side")) == 1
    view = h.rt.runs.view(run_id)
    assert steps_of(view)["report"]["status"] == "skipped"
