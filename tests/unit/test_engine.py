"""The engine's pure decisions: no I/O, no clock but the one passed in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.engine.attempts import (
    Fail,
    Outcome,
    OutcomeKind,
    Retry,
    Succeed,
    after_attempt,
    backoff,
    classify_response,
    parse_retry_after,
)
from orchestrator.engine.commands import (
    CreateStep,
    ExpireLease,
    Finalize,
    HaltRun,
    Promote,
    Redispatch,
    SkipStep,
    StopInFlight,
)
from orchestrator.engine.definition import StepSpec
from orchestrator.engine.plan import plan_steps
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.reconcile import SweepPolicy, reconcile
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    RunStatus,
    StepStatus,
    can_move,
)
from orchestrator.engine.transitions import final_status

NOW = 1_800_000_000.0
POLICY = SweepPolicy(redispatch_after=10.0, settle=2.0)


def diamond() -> list[StepRecord]:
    return plan_steps(
        "r1",
        [
            StepSpec("a", "fn", "/a"),
            StepSpec("b", "fn", "/b", deps=("a",)),
            StepSpec("c", "fn", "/c", deps=("a",)),
            StepSpec("d", "fn", "/d", deps=("b", "c")),
        ],
        NOW,
    )


def run(**kw: object) -> RunRecord:
    base = RunRecord("r1", "wf", RunStatus.RUNNING, None, {}, NOW, 4, 4)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_transition_table_is_closed_and_terminals_are_final() -> None:
    for src, dests in STEP_TRANSITIONS.items():
        assert dests <= set(StepStatus)
        if src.terminal:
            assert not dests
    for src, dests in RUN_TRANSITIONS.items():
        assert bool(dests) == (not src.terminal)
    # every status is reachable from blocked
    reach, frontier = {StepStatus.BLOCKED}, [StepStatus.BLOCKED]
    while frontier:
        for nxt in STEP_TRANSITIONS[frontier.pop()]:
            if nxt not in reach:
                reach.add(nxt)
                frontier.append(nxt)
    assert reach == set(StepStatus)
    assert can_move(StepStatus.BLOCKED, StepStatus.READY)
    assert not can_move(StepStatus.SUCCESS, StepStatus.DISPATCHED)


def test_plan_roots_ready_others_blocked_with_reverse_edges() -> None:
    rows = {r.step: r for r in diamond()}
    assert rows["a"].status is StepStatus.READY and rows["a"].attempt == 1
    assert rows["b"].status is StepStatus.BLOCKED and rows["b"].attempt == 0
    assert rows["a"].dependants == ("b", "c")
    assert rows["d"].deps == ("b", "c")
    assert rows["a"].max_attempts == 4  # retry.max 3 → 4 attempts


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, OutcomeKind.SUCCESS),
        (201, OutcomeKind.SUCCESS),
        (400, OutcomeKind.PERMANENT),
        (404, OutcomeKind.PERMANENT),
        (422, OutcomeKind.PERMANENT),
        (408, OutcomeKind.RETRYABLE),
        (409, OutcomeKind.RETRYABLE),
        (425, OutcomeKind.RETRYABLE),
        (429, OutcomeKind.RETRYABLE),
        (500, OutcomeKind.RETRYABLE),
        (503, OutcomeKind.RETRYABLE),
    ],
)
def test_classify_status_codes(status: int, kind: OutcomeKind) -> None:
    out = classify_response(status, {"x": 1}, retry_after=None, now=NOW, body_is_json=True)
    assert out.kind is kind


def test_2xx_without_json_is_a_permanent_failure() -> None:
    out = classify_response(200, "<html>", retry_after=None, now=NOW, body_is_json=False)
    assert out.kind is OutcomeKind.PERMANENT
    assert out.error is not None and out.error["code"] == "invalid_output"


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("7", NOW) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2027 00:00:10 GMT", 1798761600.0) == 10.0
    assert parse_retry_after("garbage", NOW) is None
    assert parse_retry_after("-5", NOW) == 0.0


def test_backoff_shapes_with_bounded_jitter() -> None:
    # rand=1.0 gives the full delay, rand=0 half of it
    assert [backoff("linear", 1.0, 100, n, 1.0) for n in (1, 2, 3)] == [1.0, 2.0, 3.0]
    assert [backoff("exponential", 1.0, 100, n, 1.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert backoff("exponential", 1.0, 5.0, 10, 1.0) == 5.0  # capped
    assert backoff("exponential", 2.0, 100, 3, 0.0) == 4.0  # half of 8
    for r in (0.0, 0.3, 0.99):
        assert 4.0 <= backoff("exponential", 2.0, 100, 3, r) <= 8.0


def test_after_attempt_retries_until_exhausted() -> None:
    row = replace(diamond()[0], attempt=1, max_attempts=3)
    boom = Outcome(OutcomeKind.RETRYABLE, error={"code": "http_error", "status": 503})
    d = after_attempt(row, boom, NOW, 1.0)
    assert isinstance(d, Retry) and d.next_attempt == 2 and d.due_at == NOW + 1.0
    d = after_attempt(replace(row, attempt=3), boom, NOW, 1.0)
    assert isinstance(d, Fail) and d.error["exhausted"] is True and d.error["attempt"] == 3
    perm = Outcome(OutcomeKind.PERMANENT, error={"code": "http_error", "status": 400})
    assert isinstance(after_attempt(row, perm, NOW, 1.0), Fail)
    ok = after_attempt(row, Outcome(OutcomeKind.SUCCESS, output={"v": 1}), NOW, 1.0)
    assert ok == Succeed({"v": 1})
    hinted = Outcome(OutcomeKind.RETRYABLE, error={}, retry_after=30.0)
    d = after_attempt(row, hinted, NOW, 0.0)
    assert isinstance(d, Retry) and d.due_at == NOW + 30.0


def test_final_status() -> None:
    rows = diamond()
    assert final_status(run(), rows) is None
    done = [replace(r, status=StepStatus.SUCCESS) for r in rows]
    assert final_status(run(), done) is RunStatus.SUCCESS
    failed = [*done[:3], replace(done[3], status=StepStatus.FAILED)]
    assert final_status(run(), failed) is RunStatus.FAILED
    assert final_status(run(kill_requested=True), done) is RunStatus.KILLED
    assert final_status(run(halted=True), done) is RunStatus.FAILED


def by(rows: list[StepRecord], **changes: dict[str, object]) -> list[StepRecord]:
    return [
        replace(r, **changes[r.step]) if r.step in changes else r  # type: ignore[arg-type]
        for r in rows
    ]


def test_reconcile_recreates_missing_rows_first() -> None:
    rows = diamond()
    # A start may still be writing rows: nothing is rebuilt before the run settles.
    young = reconcile(run(), rows[:2], rows, NOW + 1.0, POLICY)
    assert not [c for c in young if isinstance(c, CreateStep)]
    cmds = reconcile(run(), rows[:2], rows, NOW + 2.0, POLICY)
    assert [c.record.step for c in cmds if isinstance(c, CreateStep)] == ["c", "d"]
    assert all(isinstance(c, CreateStep) for c in cmds)
    # A queued run counts from its admission, not its arrival.
    late = reconcile(run(started_at=NOW + 5.0), rows[:2], rows, NOW + 6.0, POLICY)
    assert not [c for c in late if isinstance(c, CreateStep)]


def test_a_start_that_died_before_its_rows_gets_its_joins_and_its_roots_dispatch() -> None:
    """The join's row is missing, and the root, which the start leaves out, is ready as
    planned: the start that died before writing one died before dispatching the other.
    One pass rebuilds the join and sends the root again, once it counts as lost."""
    rows = diamond()  # the root `a` as its run's reader sees it: ready since NOW
    seen = [r for r in rows if r.step != "d"]
    early = reconcile(run(), seen, rows, NOW + 2.0, POLICY)
    assert [type(c) for c in early] == [CreateStep]
    cmds = reconcile(run(), seen, rows, NOW + 11.0, POLICY)
    assert [c.record.step for c in cmds if isinstance(c, CreateStep)] == ["d"]
    assert [c for c in cmds if isinstance(c, Redispatch)] == [Redispatch("a", 1, None)]


def test_reconcile_redispatches_a_lost_message_after_the_grace() -> None:
    rows = diamond()
    assert reconcile(run(), rows, rows, NOW + 5, POLICY) == []
    cmds = reconcile(run(), rows, rows, NOW + 11, POLICY)
    assert cmds == [Redispatch("a", 1, None)]


def test_reconcile_finishes_an_interrupted_promotion() -> None:
    rows = by(diamond(), a={"status": StepStatus.SUCCESS, "finished_at": NOW})
    assert reconcile(run(), rows, rows, NOW + 1, POLICY) == []  # leave it to the worker
    cmds = reconcile(run(), rows, rows, NOW + 3, POLICY)
    assert cmds == [Promote("b", 1), Promote("c", 1)]


def test_reconcile_expires_a_dead_workers_lease() -> None:
    rows = by(
        diamond(), a={"status": StepStatus.DISPATCHED, "lease_owner": "w1", "lease_until": NOW + 60}
    )
    assert reconcile(run(), rows, rows, NOW + 30, POLICY) == []
    (cmd,) = reconcile(run(), rows, rows, NOW + 61, POLICY, rand=1.0)
    assert isinstance(cmd, ExpireLease) and cmd.owner == "w1"
    assert isinstance(cmd.decision, Retry) and cmd.decision.next_attempt == 2
    assert cmd.decision.error["code"] == "lease_expired"


def test_reconcile_skips_below_a_failure_and_stops_halted_runs() -> None:
    rows = by(diamond(), a={"status": StepStatus.FAILED})
    cmds = reconcile(run(on_failure=OnFailure.CONTINUE_INDEPENDENT), rows, rows, NOW, POLICY)
    assert {c.step for c in cmds if isinstance(c, SkipStep)} == {"b", "c"}
    # Under halt, a failure its worker did not live to act on halts the run.
    (halt,) = reconcile(run(), rows, rows, NOW, POLICY)
    assert isinstance(halt, HaltRun) and halt.error["step"] == "a"
    rows = by(
        diamond(), a={"status": StepStatus.DISPATCHED, "lease_owner": "w", "lease_until": NOW + 100}
    )
    cmds = reconcile(run(halted=True), rows, rows, NOW, POLICY)
    assert {c.step for c in cmds if isinstance(c, SkipStep)} == {"b", "c", "d"}  # not a
    assert [c for c in cmds if isinstance(c, StopInFlight)] == [StopInFlight("a")]  # flagged


def test_reconcile_finalizes_and_fixes_the_counter() -> None:
    done = [replace(r, status=StepStatus.SUCCESS, finished_at=NOW) for r in diamond()]
    assert reconcile(run(remaining=2), done, done, NOW + 9, POLICY) == [Finalize(RunStatus.SUCCESS)]
    rows = by(
        diamond(), a={"status": StepStatus.DISPATCHED, "lease_owner": "w", "lease_until": NOW + 100}
    )
    assert reconcile(run(remaining=1), rows, rows, NOW, POLICY) == []
    assert reconcile(run(status=RunStatus.SUCCESS), rows, rows, NOW, POLICY) == []


def test_wakes_say_when_each_row_must_have_moved_on() -> None:
    from orchestrator.engine.wakes import WAKE_SHARDS, WakeTimes, resend_wake, shard_of, step_wake

    t = WakeTimes(redispatch_after=10.0, settle=5.0, ceiling=100.0)
    a, b, c, d = by(
        diamond(),
        a={"status": StepStatus.SUCCESS, "finished_at": NOW},  # follow-ups: next sweep
        b={"status": StepStatus.DISPATCHED, "due_at": NOW + 60, "ready_at": NOW + 60},
        c={"status": StepStatus.DISPATCHED, "lease_owner": "w", "lease_until": NOW + 30},
    )
    assert step_wake(a, t) == NOW
    assert step_wake(b, t) == NOW + 70  # a retry timer: its due time + the grace
    assert step_wake(c, t) == NOW + 30  # claimed: the lease's end
    assert step_wake(d, t) is None  # blocked: whoever completes b and c moves it
    ready = replace(d, status=StepStatus.READY, ready_at=NOW)
    assert step_wake(ready, t) == NOW + 10
    # each resend doubles the wait, up to the ceiling
    assert [resend_wake(k, NOW, t) - NOW for k in (1, 2, 3, 4, 5)] == [10, 20, 40, 80, 100]
    assert {shard_of(f"run-{i}") for i in range(100)} == set(range(WAKE_SHARDS))
    assert shard_of("run-7") == shard_of("run-7")


def test_a_dispatch_is_resent_when_its_wake_passed() -> None:
    rows = by(diamond(), a={"status": StepStatus.READY, "attempt": 1, "ready_at": NOW,
                            "wake_at": NOW + 40})
    assert reconcile(run(), rows, rows, NOW + 39, POLICY) == []
    assert reconcile(run(), rows, rows, NOW + 40, POLICY) == [Redispatch("a", 1, None)]
    # a row without a wake (written before wakes) falls back to redispatch_after
    old = by(diamond(), a={"status": StepStatus.READY, "attempt": 1, "ready_at": NOW})
    assert reconcile(run(), old, old, NOW + 9, POLICY) == []
    assert reconcile(run(), old, old, NOW + 10, POLICY) == [Redispatch("a", 1, None)]


def test_settle_due_is_when_a_deferred_repair_falls_due() -> None:
    from orchestrator.engine.reconcile import settle_due

    rows = by(
        diamond(),
        a={"status": StepStatus.SUCCESS, "finished_at": NOW},
        b={"status": StepStatus.SUCCESS, "finished_at": NOW + 1},
        c={"status": StepStatus.SUCCESS, "finished_at": NOW + 3},
    )
    # d's dependencies all succeeded: its promotion is repaired `settle` after the last
    assert reconcile(run(), rows, rows, NOW + 4, POLICY) == []
    assert settle_due(run(), rows, NOW + 4, POLICY) == NOW + 5
    assert settle_due(run(), rows, NOW + 5, POLICY) is None  # due now: reconcile does it
    assert reconcile(run(), rows, rows, NOW + 5, POLICY) == [Promote("d", 2)]
    failed = by(diamond(), a={"status": StepStatus.FAILED, "finished_at": NOW})
    assert settle_due(run(), failed, NOW + 1, POLICY) == NOW + 2  # the halt
    assert settle_due(run(), failed[:2], NOW + 1, POLICY) == NOW + 2  # rows missing
    assert settle_due(run(status=RunStatus.SUCCESS), failed, NOW, POLICY) is None


def test_reconcile_leaves_a_fan_out_being_promoted_alone() -> None:
    rows = by(
        diamond(),
        a={"status": StepStatus.SUCCESS, "finished_at": NOW},
        b={"status": StepStatus.READY, "attempt": 1, "ready_at": NOW + 40},  # promoted
    )
    # a finished long ago, but its promoter promoted b 1 s ago: still at work on c
    assert [c for c in reconcile(run(), rows, rows, NOW + 41, POLICY)
            if isinstance(c, Promote)] == []
    # nothing promoted for longer than `settle`: the promoter died, repair c
    assert Promote("c", 1) in reconcile(run(), rows, rows, NOW + 71, POLICY)
