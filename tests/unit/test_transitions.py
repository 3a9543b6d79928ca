"""The run's transitions, rerun planning and admission as pure decisions: no moto."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.engine.admission import gate_of, throttle_slot
from orchestrator.engine.commands import HaltRun, SkipBranch, SkipStep, StopInFlight
from orchestrator.engine.definition import Definition, Gate, StepSpec, Throttle, Trigger
from orchestrator.engine.plan import plan_steps
from orchestrator.engine.policies import GroupPolicy, OnFailure, ThrottlePolicy
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.rerun import with_reused
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.transitions import (
    NOT_STARTED,
    RESTAMP_AFTER,
    after_failure,
    finish,
    stop_pass,
)
from orchestrator.errors import UsageError

NOW = 1_800_000_000.0
S = StepStatus
DAY = 24 * 3600.0


def diamond() -> list[StepRecord]:
    return plan_steps("r1", [
        StepSpec("a", "fn", "/a"),
        StepSpec("b", "fn", "/b", deps=("a",)),
        StepSpec("c", "fn", "/c", deps=("a",)),
        StepSpec("d", "fn", "/d", deps=("b", "c")),
    ], NOW)


def by(rows: list[StepRecord], **changes: dict[str, Any]) -> list[StepRecord]:
    return [replace(r, **changes[r.step]) if r.step in changes else r for r in rows]


def run(**kw: Any) -> RunRecord:
    return replace(RunRecord("r1", "wf", RunStatus.RUNNING, None, Definition(()), NOW, 4, 1), **kw)


def test_a_failure_halts_or_skips_its_branch_by_policy() -> None:
    failed = by(diamond(), b={"status": S.FAILED, "error": {"code": "http_error",
                                                            "message": "boom"}})[1]
    halt = after_failure(OnFailure.HALT, failed)
    assert isinstance(halt, HaltRun)
    assert halt.error["code"] == "step_failed" and halt.error["step"] == "b"
    assert halt.error["message"] == "step b failed: boom"
    assert halt.error["reason"] == {"code": "http_error", "message": "boom"}
    branch = after_failure(OnFailure.CONTINUE_INDEPENDENT, failed)
    assert branch == SkipBranch("b", ("d",), "dependency b did not succeed")


def test_the_stop_pass_skips_what_has_not_started_and_flags_what_is_in_flight() -> None:
    rows = by(
        diamond(),
        a={"status": S.SUCCESS},
        b={"status": S.DISPATCHED, "lease_owner": "w1"},  # running
        c={"status": S.DISPATCHED, "due_at": NOW + 5},  # waiting for its retry
    )
    cmds = stop_pass(rows, "run halted")
    assert cmds == [
        StopInFlight("b"),
        SkipStep("c", NOT_STARTED, "run halted"),
        SkipStep("d", NOT_STARTED, "run halted"),
    ]
    # A step already flagged is not flagged again; terminal steps are left alone.
    again = by(rows, b={"stopping": True})
    assert [c.step for c in stop_pass(again, "run halted")] == ["c", "d"]


def test_the_finish_status_and_error() -> None:
    done = [replace(r, status=S.SUCCESS, expires_at=NOW + 30 * DAY) for r in diamond()]
    ok = finish(run(), done, NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert ok is not None and ok.status is RunStatus.SUCCESS and ok.error is None
    assert ok.expires_at == NOW + DAY and ok.restamp == ()
    assert finish(run(), by(done, d={"status": S.BLOCKED}), NOW, ttl_success=DAY,
                  ttl_failed=30 * DAY) is None
    killed = finish(run(kill_requested=True, kill_reason="by hand"),
                    by(done, d={"status": S.SKIPPED}), NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert killed is not None and killed.status is RunStatus.KILLED
    assert killed.error == {"code": "killed", "message": "cancelled: by hand",
                            "reason": "by hand"}
    failed = by(done, b={"status": S.FAILED, "error": {"code": "timeout", "message": "slow"}},
                c={"status": S.FAILED, "error": {"code": "timeout", "message": "slow"}},
                d={"status": S.SKIPPED})
    out = finish(run(), failed, NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert out is not None and out.status is RunStatus.FAILED and out.error is not None
    assert out.error["step"] == "b" and out.error["steps"] == ["b", "c"]
    assert out.error["message"] == "step b failed (and 1 more): slow"
    halted = finish(run(halted=True), by(done, d={"status": S.SKIPPED}), NOW, ttl_success=DAY,
                    ttl_failed=30 * DAY)
    assert halted is not None and halted.status is RunStatus.FAILED


def test_a_failed_run_expires_with_its_first_row_unless_it_ran_long() -> None:
    # Rows stamped their expiry (finish + 30 d) when they finished, 10 s apart.
    rows = [replace(r, status=S.FAILED if r.step == "d" else S.SUCCESS,
                    expires_at=NOW - 40 + 10 * i + 30 * DAY) for i, r in enumerate(diamond())]
    out = finish(run(), rows, NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert out is not None and out.expires_at == NOW - 40 + 30 * DAY and out.restamp == ()
    long = by(rows, a={"expires_at": NOW - RESTAMP_AFTER - 1 + 30 * DAY})
    out = finish(run(), long, NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert out is not None and out.expires_at == NOW + 30 * DAY
    assert set(out.restamp) == {"a", "b", "c", "d"}  # every row that would go first
    reused = by(rows, a={"expires_at": None})  # a row that never stamped one
    out = finish(run(), reused, NOW, ttl_success=DAY, ttl_failed=30 * DAY)
    assert out is not None and "a" in out.restamp


def test_rerun_rows_reuse_what_succeeded() -> None:
    old = {
        "a": replace(diamond()[0], status=S.SUCCESS, has_output=True, output={"x": 1},
                     output_size=7),
        "b": replace(diamond()[1], status=S.FAILED),
    }
    rows = with_reused(diamond(), {"a": "old-run", "b": "old-run"}, old, NOW)
    got = {r.step: r for r in rows}
    assert got["a"].status is S.SUCCESS and got["a"].output == {"x": 1}
    assert got["a"].history[0] == {"at": NOW, "type": "step.reused", "from_run": "old-run"}
    assert got["b"].status is S.READY and got["b"].satisfied == {"a"}  # runs again
    assert got["c"].status is S.READY
    assert got["d"].status is S.BLOCKED and got["d"].satisfied == frozenset()


def workflow(**kw: Any) -> Any:
    group = kw.get("group")
    return SimpleNamespace(limits=kw.get("limits", [group] if group else []),
                           throttle=kw.get("throttle"), priority=kw.get("priority", 0))


def test_the_gate_is_rendered_from_the_input() -> None:
    grp = SimpleNamespace(group="deploy-${{ input.tenant }}", key="", policy="queue", limit=1)
    gate = gate_of(workflow(group=grp), "wf", {"tenant": "acme"}, None, "")
    assert gate == Gate("deploy-acme", "", GroupPolicy.QUEUE, None)
    assert gate_of(workflow(), "wf", None, None, "") is None
    fire = gate_of(workflow(), "nightly", None, "replace", "tenant-1")
    assert fire == Gate("schedule:nightly", "tenant-1", GroupPolicy.CANCEL_RUNNING)
    thr = SimpleNamespace(key="crm-${{ input.tenant }}", limit=4, period=2.0, burst=1,
                          policy="drop")
    gated = gate_of(workflow(throttle=thr), "wf", {"tenant": "acme"}, None, "")
    assert gated == Gate(None, "", GroupPolicy.QUEUE,
                         Throttle("crm-acme", 4, 2.0, 1, ThrottlePolicy.DROP))
    assert Gate.from_json(gated.to_json()) == gated  # the run row's JSON round-trips
    long = SimpleNamespace(group="${{ input.name }}", key="", policy="skip", limit=1)
    with pytest.raises(UsageError, match="longer than 200"):
        gate_of(workflow(group=long), "wf", {"name": "x" * 201}, None, "")


def test_throttle_slots_are_evenly_spaced_after_a_burst() -> None:
    tat, starts = 0.0, []
    for _ in range(5):
        start, tat = throttle_slot(tat, NOW, limit=2, period=2.0, burst=3)
        starts.append(start - NOW)
    assert starts == [0.0, 0.0, 0.0, 1.0, 2.0]


def test_definition_and_trigger_round_trip_their_stored_json() -> None:
    doc = {"steps": {"a": {"backend": "fn", "route": "/a", "dependsOn": [], "payload": {"k": 1},
                           "retry": {"max": 2, "strategy": "exponential", "delay": 0.5,
                                     "maxDelay": 9.0}, "timeout": 12.0},
                     "b": {"backend": "fn", "route": "/b", "dependsOn": ["a"], "payload": {},
                           "retry": {"max": 3, "strategy": "linear", "delay": 1.0,
                                     "maxDelay": 300.0}, "timeout": 60.0}},
           "onFailure": "continue-independent"}
    d = Definition.from_json(doc)
    assert d.to_json() == doc and d.on_failure is OnFailure.CONTINUE_INDEPENDENT
    assert d.order() == ["a", "b"] and d.sinks == {"b"} and d.ndeps == {"a": 0, "b": 1}
    assert d.reusing({"a": "old"}).to_json()["reused"] == {"a": "old"}
    t = Trigger.from_json({"source": "webhook", "webhook": "gh", "delivery_id": "d1"})
    assert t == {"source": "webhook", "webhook": "gh", "delivery_id": "d1"}
    assert t["source"] == "webhook" and t.to_json()["delivery_id"] == "d1"


def test_a_finish_never_expires_the_run_before_now() -> None:
    # A short retention (30 min) and a row that finished 2000 s ago: its expiry has
    # passed; the run keeps its full retention and the row is stamped again.
    rows = [replace(r, status=S.FAILED if r.step == "a" else S.SKIPPED,
                    expires_at=NOW - 2000 + 1800) for r in diamond()]
    out = finish(run(), rows, NOW, ttl_success=1800, ttl_failed=1800)
    assert out is not None and out.expires_at == NOW + 1800
    assert set(out.restamp) == {"a", "b", "c", "d"}


def test_the_sweeper_renews_the_rows_of_a_run_that_runs_long() -> None:
    from orchestrator.engine.commands import Restamp
    from orchestrator.engine.reconcile import SweepPolicy, reconcile

    policy = SweepPolicy(redispatch_after=10.0, settle=2.0, step_retention=30 * DAY)
    rows = by(diamond(), a={"status": S.SUCCESS, "expires_at": NOW + 30 * DAY},
              b={"status": S.DISPATCHED, "lease_owner": "w", "lease_until": NOW + 20 * DAY})
    assert [c for c in reconcile(run(), rows, rows, NOW, policy) if isinstance(c, Restamp)] == []
    later = NOW + 16 * DAY  # a's row would go within half the retention
    cmds = reconcile(run(), rows, rows, later, policy)
    assert Restamp("a", later + 30 * DAY) in cmds
