"""The chaos harness in the test suite: three fixed seeds and every seed that once failed
(regressions.txt), each on a cluster of real processes, must show no violation; and the
checker itself, on small snapshots built by hand, must catch what it claims to catch (a
checker that cannot fail proves nothing).

`-m "not chaos"` skips the seeds (the checker's own tests take a second).
`CHAOS_SEEDS=5,6` runs other seeds instead of the fixed ones; `CHAOS_SOAK=1` also runs
the regressions found at soak size (minutes each)."""

from __future__ import annotations

import heapq
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.definition import Definition, StepSpec, Trigger
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from tests.chaos.checker import check, looks_like_printout
from tests.chaos.jsonl import digest
from tests.chaos.snapshot import Call, Snapshot

CI_SEEDS = (101, 202, 303)
REGRESSIONS = Path(__file__).with_name("regressions.txt")


def regression_seeds() -> list[tuple[int, bool]]:
    """(seed, soak) of each line of regressions.txt: `SEED [soak]  # what it found`."""
    seeds = []
    for line in REGRESSIONS.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            seeds.append((int(words[0]), words[1:] == ["soak"]))
    return seeds


def seeds() -> list[tuple[int, bool]]:
    chosen = os.environ.get("CHAOS_SEEDS")
    if chosen:
        return [(int(s), False) for s in chosen.split(",") if s.strip()]
    soak = os.environ.get("CHAOS_SOAK") == "1"
    found = [(seed, big) for seed, big in regression_seeds() if soak or not big]
    return list(dict.fromkeys([*((seed, False) for seed in CI_SEEDS), *found]))


@pytest.mark.chaos
@pytest.mark.timeout(3600)
def test_every_seed_holds_every_invariant() -> None:
    from tests.chaos.run import render, run_seed

    # One after the other in one test: each seed loads both cores on its own.
    results = [run_seed(seed, soak=soak) for seed, soak in seeds()]
    report = "\n\n".join(render(r) for r in results)
    print(report)
    assert all(r.ok for r in results), report


# ---- the checker, on snapshots built by hand -------------------------------------------

T0 = 1_800_000_000.0
RUN = "diamond-1"


def _spec(name: str, deps: tuple[str, ...] = (), retry_max: int = 2) -> StepSpec:
    return StepSpec(name, "fn", "/work", deps, {}, retry_max, "linear", 1.0, 10.0, 3.0)


def clean(on_failure: OnFailure = OnFailure.HALT) -> Snapshot:
    """A run of a -> b that went right: b failed its first attempt (503) and was
    retried after its backoff."""
    out_a, out_b = {"nonce": "a1"}, {"nonce": "b2"}
    definition = Definition((_spec("a"), _spec("b", ("a",))), on_failure)
    run = RunRecord(
        RUN, "diamond", RunStatus.SUCCESS, {"name": "diamond-1"}, definition, T0, 2, 0,
        on_failure=on_failure, trigger=Trigger("api", {"idempotency_key": "k-1"}),
        started_at=T0, finished_at=T0 + 5,
        history=({"at": T0, "type": "run.running"}, {"at": T0 + 5, "type": "run.success"}),
    )
    a = StepRecord(
        RUN, "a", StepStatus.SUCCESS, "fn", "/work", dependants=("b",), attempt=1,
        max_attempts=3, has_output=True, output=out_a, finished_at=T0 + 1,
        retry_delay=1.0, retry_max_delay=10.0,
        history=({"at": T0, "type": "step.ready"},
                 {"at": T0 + 0.1, "type": "step.started", "attempt": 1},
                 {"at": T0 + 1, "type": "step.succeeded", "attempt": 1, "bytes": 15}),
    )
    b = StepRecord(
        RUN, "b", StepStatus.SUCCESS, "fn", "/work", deps=("a",), attempt=2, max_attempts=3,
        has_output=True, output=out_b, finished_at=T0 + 4, retry_delay=1.0,
        retry_max_delay=10.0,
        history=({"at": T0 + 1, "type": "step.ready"},
                 {"at": T0 + 1, "type": "step.started", "attempt": 1},
                 {"at": T0 + 1.5, "type": "step.retrying", "attempt": 1, "due_at": T0 + 2.5,
                  "error": {"code": "http_error", "message": "injected 503"}},
                 {"at": T0 + 2.6, "type": "step.started", "attempt": 2},
                 {"at": T0 + 4, "type": "step.succeeded", "attempt": 2, "bytes": 15}),
    )

    def call(step: str, attempt: int, t: float, status: int, out: Any,
             steps: dict[str, Any] | None) -> Call:
        recv = {"ev": "recv", "id": f"{step}{attempt}", "t": t, "route": "/work", "run": RUN,
                "step": step, "attempt": attempt, "key": f"{RUN}/{step}", "hdr_run": RUN,
                "hdr_step": step, "hdr_attempt": str(attempt), "sig": True,
                "steps": None if steps is None else {k: digest(v) for k, v in steps.items()}}
        done = {"ev": "done", "id": recv["id"], "t": t + 0.2, "status": status, "fault": None,
                "out": None if out is None else digest(out), "retry_after": None}
        return Call(recv, done)

    snap = Snapshot(
        runs={RUN: run}, steps={RUN: {"a": a, "b": b}},
        outputs={(RUN, "a"): out_a, (RUN, "b"): out_b},
        calls=[call("a", 1, T0 + 0.2, 200, out_a, None),
               call("b", 1, T0 + 1.1, 503, None, {"a": out_a}),
               call("b", 2, T0 + 2.7, 200, out_b, {"a": out_a})],
        submitted={"diamond-1": ("k-1", RUN)}, calm_at=T0,
    )
    snap.views[RUN] = {"status": "success", "error": None, "steps": [
        {"step": "a", "status": "success", "output": out_a, "error": None},
        {"step": "b", "status": "success", "output": out_b, "error": None}]}
    snap.events[RUN] = sorted(
        [dict(e) for e in run.history]
        + [{**e, "step": s.step} for s in (a, b) for e in s.history],
        key=lambda e: float(e["at"]))
    return snap


def found(snap: Snapshot) -> set[str]:
    return {v.check for v in check(snap, bound=60).violations}


def with_step(snap: Snapshot, name: str, **changes: Any) -> Snapshot:
    snap.steps[RUN][name] = replace(snap.steps[RUN][name], **changes)
    return snap


def test_a_clean_snapshot_has_no_violation() -> None:
    report = check(clean(), bound=60)
    assert report.violations == []
    assert report.figures["duplicate_calls"] == 1  # b was called twice, one key
    assert report.figures["due_to_call"]["n"] == 1


def test_two_commits_of_one_step_are_caught() -> None:
    snap = clean()
    b = snap.steps[RUN]["b"]
    snap = with_step(snap, "b", history=(*b.history, b.history[-1]))
    assert {"double-commit", "left-terminal", "step-transition"} <= found(snap)


def test_an_output_the_function_never_returned_is_caught() -> None:
    snap = clean()
    snap.outputs[(RUN, "b")] = {"nonce": "forged"}
    assert "commit-unknown-output" in found(snap)


def test_a_dropped_answer_committed_is_caught() -> None:
    snap = clean()
    assert snap.calls[2].done is not None
    snap.calls[2].done["fault"] = "drop"
    assert "commit-undelivered-output" in found(snap)


def test_a_join_sent_another_output_is_caught() -> None:
    snap = clean()
    snap.calls[2].recv["steps"] = {"a": digest({"nonce": "other"})}
    assert "join-inputs" in found(snap)


def test_a_step_called_before_its_dependency_committed_is_caught() -> None:
    snap = clean()
    snap = with_step(snap, "a", finished_at=T0 + 3.0)
    assert "join-early" in found(snap)


def test_a_call_nobody_claimed_and_a_wrong_key_are_caught() -> None:
    snap = clean()
    snap.calls.append(Call({**snap.calls[2].recv, "id": "x", "attempt": 3, "hdr_attempt": "3",
                            "key": "other/b"}))
    assert {"call-without-claim", "idempotency-key", "retry-budget"} - found(snap) == {
        "retry-budget"}


def test_a_retry_sooner_than_its_backoff_is_caught() -> None:
    snap = clean()
    b = snap.steps[RUN]["b"]
    hist = list(b.history)
    hist[2] = {**hist[2], "due_at": T0 + 1.2}  # linear 1 s: due at least 0.5 s after the call
    snap = with_step(snap, "b", history=tuple(hist))
    snap.calls[2].recv["t"] = T0 + 1.0  # and the next attempt called before it was due
    assert {"backoff", "backoff-early"} <= found(snap)


def test_a_step_started_after_the_halt_is_caught() -> None:
    snap = clean()
    run = snap.runs[RUN]
    snap.runs[RUN] = replace(run, status=RunStatus.FAILED, history=(
        run.history[0], {"at": T0 + 2.0, "type": "run.halted",
                         "error": {"code": "step_failed", "message": "step x failed"}},
        {"at": T0 + 5, "type": "run.failed"}))
    assert {"halt-started-after", "halt-called-after", "run-status"} <= found(snap)


def test_continue_independent_skipping_too_much_is_caught() -> None:
    snap = clean(OnFailure.CONTINUE_INDEPENDENT)
    b = snap.steps[RUN]["b"]
    snap = with_step(snap, "b", status=StepStatus.SKIPPED,
                     history=(*b.history[:3], {"at": T0 + 2, "type": "step.skipped"}))
    assert "independent-skipped" in found(snap)


def test_an_illegal_transition_and_a_lost_run_are_caught() -> None:
    snap = clean()
    a = snap.steps[RUN]["a"]
    snap = with_step(snap, "a", history=(a.history[0], a.history[2]))  # ready -> succeeded
    snap.submitted["lost-1"] = ("k-2", "lost-run-id")
    assert {"step-transition", "lost-run", "history-incomplete"} <= found(snap)


def test_a_run_still_going_after_the_bound_is_caught() -> None:
    snap = clean()
    snap.runs[RUN] = replace(snap.runs[RUN], finished_at=T0 + 90)
    assert "progress" in found(snap)


def test_errors_that_are_python_printouts_are_caught() -> None:
    snap = clean()
    b = snap.steps[RUN]["b"]
    hist = list(b.history)
    hist[2] = {**hist[2], "error": {"code": "http_error",
                                    "message": "{'code': 'retryable', 'message': 'x'}"}}
    snap = with_step(snap, "b", history=tuple(hist))
    snap.views[RUN]["error"] = {"code": "made_up", "message": 3}
    violations = [v for v in check(snap, bound=60).violations if v.check == "error-format"]
    assert len(violations) == 3, violations


def test_printouts_are_told_from_text_and_json() -> None:
    assert looks_like_printout("{'error': 'upstream 503'}")
    assert looks_like_printout("step boom failed: {'code': 'terminal', 'retryable': False}")
    assert looks_like_printout("<Response object at 0x7f3a2b>")
    assert not looks_like_printout('{"error": "upstream 503"}')
    assert not looks_like_printout("step boom failed: this step always fails")
    assert not looks_like_printout("no answer within 3s [timeout]")


def test_an_item_over_400_kb_is_caught() -> None:
    snap = clean()
    snap.item_sizes["steps/x/y"] = 401 * 1024
    assert "item-size" in found(snap)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_schedule_is_a_function_of_its_seed(seed: int) -> None:
    from tests.chaos.schedule import make_schedule
    from tests.chaos.workloads import CI_SIZE, plan

    one = make_schedule(seed, 24, workers=3, sweepers=2, lease=5)
    assert one == make_schedule(seed, 24, workers=3, sweepers=2, lease=5)
    assert one != make_schedule(seed + 1, 24, workers=3, sweepers=2, lease=5)
    assert sum(e.kind == "restart-all" for e in one) == 1
    assert plan(seed, CI_SIZE, 12) == plan(seed, CI_SIZE, 12)


def test_the_apis_history_must_keep_each_rows_order_and_be_oldest_first() -> None:
    snap = clean()
    events = snap.events[RUN]
    i, j = (k for k, e in enumerate(events) if e.get("step") == "b"
            and e["type"] in ("step.retrying", "step.started") and e.get("attempt") == 1)
    events[i], events[j] = events[j], events[i]  # b's started after its retrying
    assert "history-api" in found(snap)
    snap = clean()
    events = snap.events[RUN]
    events.append(events.pop(0))  # the run's first entry listed last: not oldest first
    assert "history-api" in found(snap)


def test_a_late_write_timed_before_the_entry_it_follows_is_counted_not_failed() -> None:
    snap = clean()
    b = snap.steps[RUN]["b"]
    hist = list(b.history)
    # b's last write landed late: its time is before the retry's start it follows
    hist[-1] = {**hist[-1], "at": T0 + 2.55}
    snap = with_step(snap, "b", history=tuple(hist), finished_at=T0 + 2.55)
    run = snap.runs[RUN]
    snap.events[RUN] = list(heapq.merge(
        [dict(e) for e in run.history], *([{**e, "step": s.step} for e in s.history]
                                          for s in snap.steps[RUN].values()),
        key=lambda e: float(e["at"])))
    report = check(snap, bound=60)
    assert report.violations == [], report.violations
    assert report.figures["findings"] == {
        "history entry timed before the one it follows (late write)": 1}


def test_a_run_is_timed_from_when_its_last_step_landed_not_from_its_stamp() -> None:
    snap = clean()
    run = snap.runs[RUN]
    last = max(snap.steps[RUN].values(), key=lambda s: s.finished_at or 0.0)
    assert run.finished_at is not None and last.finished_at is not None
    stamped = run.finished_at - last.finished_at
    assert check(snap, bound=60).figures["last_step_to_run_finished"]["max"] == round(stamped, 3)
    # The harness held the last step's own write back: it landed later than its stamp.
    held = {"kind": "ddb-delay", "write": "succeed", "run": RUN, "step": last.step,
            "t": last.finished_at + 0.01, "seconds": stamped / 2}
    # ... whereas a delay of another step's write, or of a later write, changes nothing.
    other = {**held, "step": "a" if last.step != "a" else "b"}
    late = {**held, "t": last.finished_at + 0.9}
    snap.faults.extend([held, other, late])
    figures = check(snap, bound=60).figures
    assert figures["last_step_to_run_finished"]["max"] == round(stamped / 2 - 0.01, 3)
