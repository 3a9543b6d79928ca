"""Halt, kill and cancel-running against every interleaving a process could hit by chance,
forced deterministically: the racing act is made by a second, independent set of parts
(its own boto3 clients, as another worker process would be) from a botocore event hook at
the exact moment named, against the real emulator and real functions.

The rule under test (engine/transitions.py): a stop skips every step that has not
started; steps in flight land and are never tried again; no step starts after the run's
`run.halted` entry, nor after a cancel has been answered."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ReadTimeoutError

from orchestrator.adapters.aws import make_clients
from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.store import Lease
from orchestrator.engine.attempts import Retry
from orchestrator.engine.context import RunContext
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import StepRecord
from orchestrator.engine.transitions import after_failure
from orchestrator.runtime import Runtime
from orchestrator.services.execution.tally import Tally
from orchestrator.sweeper import SweepReport
from tests.support.harness import Harness, claim_step, steps_of
from tests.support.testfns import Recorder

WORKFLOWS = """
backends:
  fn: { url: "${FN}" }
workflows:
  w:
    onFailure: halt
    steps:
      boom:  { backend: fn, route: /status, payload: { code: 422 } }
      flaky: { backend: fn, route: /flaky, payload: { fail: 1 }, retry: { max: 2, delay: 10ms } }
      slow:  { backend: fn, route: /echo, retry: { max: 2, delay: 10ms } }
      after: { backend: fn, route: /echo, dependsOn: [slow] }
  chain:
    onFailure: halt
    steps:
      boom: { backend: fn, route: /status, payload: { code: 422 } }
      a:    { backend: fn, route: /echo }
      x:    { backend: fn, route: /flaky, payload: { fail: 1 }, dependsOn: [a],
              retry: { max: 2, delay: 10ms } }
  joined:
    onFailure: continue-independent
    steps:
      boom:   { backend: fn, route: /status, payload: { code: 422 } }
      side:   { backend: fn, route: /echo }
      report: { backend: fn, route: /echo, dependsOn: [boom, side] }
  wide:
    steps:
$WIDE
  grouped:
    concurrency: { group: g, key: "${{ input.k }}", policy: cancel-running }
    steps:
      flaky: { backend: fn, route: /flaky, payload: { fail: 1 }, retry: { max: 2, delay: 10ms } }
"""


WORKFLOWS = WORKFLOWS.replace("$WIDE", "\n".join(
    f"      s{i:02d}: {{ backend: fn, route: /echo }}" for i in range(30)))


def setup(harness_factory: Any) -> tuple[Harness, Runtime, list[Any]]:
    """The harness with every message captured (delivered by hand), and a second
    Runtime on the same tables: the other process that races."""
    h: Harness = harness_factory(WORKFLOWS)
    sent: list[Any] = []
    h.rt.queues.tamper = lambda msgs: sent.extend(msgs) or []
    other = Runtime.build(h.rt.settings, h.rt.manifest, clients=make_clients(h.rt.settings))
    other.queues.tamper = lambda msgs: sent.extend(msgs) or []
    return h, other, sent


def once_after(h: Harness, operation: str, act: Callable[[], None]) -> list[bool]:
    """Run `act` once, right after this process's next `operation` call returns."""
    fired: list[bool] = []

    def hook(**_: Any) -> None:
        if not fired:
            fired.append(True)
            act()

    h.rt.clients.dynamodb.meta.events.register(f"after-call.dynamodb.{operation}", hook)
    return fired


def started_after(history: list[dict[str, Any]], moment: float) -> list[dict[str, Any]]:
    return [e for e in history if e["type"] == "step.started" and e["at"] > moment]


def stop_instant(history: list[dict[str, Any]]) -> float:
    """The run's stop instant: its first final failure or cancel request."""
    return min(float(e["at"]) for e in history
               if e["type"] in ("step.failed", "run.cancel_requested"))


def halted_at(history: list[dict[str, Any]]) -> float:
    (entry,) = [e for e in history if e["type"] == "run.halted"]
    return float(entry["at"])


def claim(rt: Runtime, run_id: str, step: str, owner: str) -> StepRecord:
    now = time.time()
    return claim_step(rt, run_id, step, 1, Lease(owner, now + rt.settings.lease_margin), now)


def retried(sent: list[Any], step: str) -> bool:
    """Was a second attempt of `step` sent (a retry's timer)?"""
    return any(getattr(m, "step", "") == step and m.attempt == 2 for m in sent)


def ends(h: Harness, run_id: str, status: str, *, skipped: tuple[str, ...]) -> dict[str, Any]:
    """The run's view, once it is `status` with each of `skipped` skipped."""
    view = h.rt.runs.view(run_id)
    assert view["status"] == status, view
    assert {n: steps_of(view)[n]["status"] for n in skipped} == dict.fromkeys(skipped, "skipped")
    return view


def fail_retryably(rt: Runtime, row: StepRecord) -> None:
    """What the worker holding `row` does when its call failed with a 503."""
    tally = Tally()
    rt.executor.retry(
        row, Retry(row.attempt + 1, time.time() + 0.01, {"code": "http_error"}), tally
    )
    rt.executor.flush(tally)


def test_a_step_waiting_for_its_retry_is_not_retried_after_a_halt(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, _, sent = setup(harness_factory)
    run_id = h.start("w")
    w = h.rt.worker()
    w.handle(Dispatch(run_id=run_id, step="flaky", attempt=1))  # 503: a retry is due
    retry = [m for m in sent if m.step == "flaky" and m.attempt == 2]
    assert retry
    w.handle(Dispatch(run_id=run_id, step="boom", attempt=1))  # 422: the run halts
    w.handle(retry[0].model_copy(update={"due_at": None}))  # the retry's timer fires
    w.handle(Dispatch(run_id=run_id, step="slow", attempt=1))  # a message sent before
    view = h.rt.runs.view(run_id)
    steps = steps_of(view)
    assert len(recorder.for_step(run_id, "flaky")) == 1
    assert recorder.for_step(run_id, "slow") == []
    assert (steps["flaky"]["status"], steps["slow"]["status"], steps["after"]["status"]) == (
        "skipped", "skipped", "skipped")
    assert view["status"] == "failed" and view["error"]["step"] == "boom"
    history = h.rt.runs.history(run_id)
    assert started_after(history, halted_at(history)) == []


def test_a_claim_racing_the_halt_pass_lands_before_the_halt_and_is_not_retried(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    claimed: list[StepRecord] = []
    # The halter has read the rows (slow: ready) when another worker claims slow.
    fired = once_after(h, "Query", lambda: claimed.append(claim(other, run_id, "slow", "w2")))
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert fired and claimed
    history = h.rt.runs.history(run_id)
    assert started_after(history, halted_at(history)) == []  # slow started before the halt
    fail_retryably(other, claimed[0])  # slow's call fails with a 503 ...
    assert not retried(sent, "slow")  # ... not retried
    ends(h, run_id, "failed", skipped=("slow", "after"))


def test_a_promotion_racing_the_halt_pass_starts_before_the_halt_or_not_at_all(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, sent = setup(harness_factory)
    run_id = h.start("chain")
    a = claim(other, run_id, "a", "w2")
    done = other.store.steps.record_success(
        run_id, "a", 1, "w2", output_json="{}", output_ref=None, size=2, now=time.time()
    )
    run = other.store.runs.get_run(run_id, time.time())
    assert run is not None and a.claimed
    inline: list[StepRecord | None] = []
    # The halter has read the rows (x: blocked) when a's worker promotes x into its lease.
    once_after(h, "Query", lambda: inline.append(other.executor.promote_dependants(
        done, RunContext.of(run), Lease("w2", time.time() + 30))[0]))
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert inline and inline[0] is not None and inline[0].step == "x"
    # x was promoted into a's worker's lease after boom's failure committed: its start
    # check finds the run stopping, so it is never called, and its history shows no start.
    other.worker(worker_id="w2").execute(inline[0], Tally())
    assert recorder.for_step(run_id, "x") == []
    assert not retried(sent, "x")
    history = h.rt.runs.history(run_id)
    assert started_after(history, stop_instant(history)) == []
    assert [e["type"] for e in history if e.get("step") == "x"][-1:] == ["step.skipped"]
    other.executor.finish_if_done(run_id)
    ends(h, run_id, "failed", skipped=("x",))


def test_a_dead_workers_step_is_not_retried_after_the_halt(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    claim(other, run_id, "slow", "dead-worker")  # ... and the worker dies
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert h.rt.store.steps.get_step(run_id, "slow").stopping  # type: ignore[union-attr]
    later = h.rt.sweeper(clock=lambda: time.time() + 3600)
    later.sweep()  # the lease has expired: that attempt failed, and it is not retried
    assert not retried(sent, "slow")
    assert recorder.for_step(run_id, "slow") == []
    ends(h, run_id, "failed", skipped=("slow",))


def test_the_sweeper_halts_a_run_whose_failing_worker_died(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    row = claim(other, run_id, "boom", "dead-worker")
    # The failure is recorded, then the worker dies before halting the run.
    other.store.steps.record_failure(run_id, "boom", 1, "dead-worker", error={"code": "http_error"},
                                     now=time.time())
    later = h.rt.sweeper(clock=lambda: time.time() + 60)
    later.sweep()
    assert row.claimed
    w = h.rt.worker()
    for m in list(sent):
        w.handle(m.model_copy(update={"due_at": None}))
    for step in ("flaky", "slow"):
        w.handle(Dispatch(run_id=run_id, step=step, attempt=1))
    assert recorder.for_step(run_id, "flaky") == recorder.for_step(run_id, "slow") == []
    # Those rows' wakes were written at the real time, which a sweep an hour ahead has
    # passed: it reads every wake again (as after a clock that ran ahead is corrected).
    later.sweep(since=0)
    view = h.rt.runs.view(run_id)
    assert view["status"] == "failed" and view["error"]["step"] == "boom"
    assert {s["status"] for n, s in steps_of(view).items() if n != "boom"} == {"skipped"}


def test_a_run_whose_halter_died_after_its_stop_pass_ends_at_the_sweep_that_halts_it(
    harness_factory: Any, recorder: Recorder
) -> None:
    """Chaos seed 303: the halter skipped every step that had not started, then died
    before its counts and its `run.halted` landed; the steps in flight landed meanwhile.
    The sweep that halts the run has nothing left to stop, and no later wake would come
    before the full sweep: that sweep must end the run."""
    h, other, _ = setup(harness_factory)
    run_id = h.start("w")
    w = h.rt.worker()
    w.handle(Dispatch(run_id=run_id, step="slow", attempt=1))  # it lands before boom fails
    claim(other, run_id, "boom", "dead-worker")
    failed = other.store.steps.record_failure(run_id, "boom", 1, "dead-worker",
                                              error={"code": "http_error"}, now=time.time())
    # Its stop pass runs, but its tally is never flushed, nor the halt recorded.
    other.executor.stop(run_id, "run halted: step boom failed", Tally())
    assert h.rt.runs.view(run_id)["status"] == "running"
    assert failed is not None
    # The run's wake comes once (its rows' wakes passed long ago): one reconcile of it.
    later = h.rt.sweeper(clock=lambda: time.time() + 60)
    report = SweepReport()
    later.sweep_runs([run_id], set(), time.time() + 60, report)
    assert report.finished == 1
    view = ends(h, run_id, "failed", skipped=("flaky",))
    assert view["error"]["step"] == "boom"
    assert h.rt.store.runs.get_run(run_id, time.time()).halted  # type: ignore[union-attr]


def test_a_claim_racing_a_cancel_is_not_retried_and_nothing_starts_after_it(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, sent = setup(harness_factory)
    run_id = h.start("w")
    w = h.rt.worker()
    w.handle(Dispatch(run_id=run_id, step="flaky", attempt=1))  # a retry is due
    claimed: list[StepRecord] = []
    once_after(h, "Query", lambda: claimed.append(claim(other, run_id, "slow", "w2")))
    h.rt.runs.kill(run_id, "stop it")  # the cancel has been answered
    assert claimed
    fail_retryably(other, claimed[0])
    for m in list(sent):
        w.handle(m.model_copy(update={"due_at": None}))
    w.handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert len(recorder.for_step(run_id, "flaky")) == 1
    assert recorder.for_step(run_id, "slow") == recorder.for_step(run_id, "boom") == []
    view = h.rt.runs.view(run_id)
    assert view["status"] == "killed" and view["kill_reason"] == "stop it"
    assert {s["status"] for s in view["steps"]} == {"skipped"}


def test_cancel_running_stops_the_replaced_run_retries_included(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, _, sent = setup(harness_factory)
    first, _ = h.rt.runs.start("grouped", {"k": "t"})
    assert first.status.value == "running"
    w = h.rt.worker()
    w.handle(Dispatch(run_id=first.run_id, step="flaky", attempt=1))  # a retry is due
    second, _ = h.rt.runs.start("grouped", {"k": "t"})  # replaces the first
    for m in list(sent):
        if m.run_id == first.run_id:
            w.handle(m.model_copy(update={"due_at": None}))
    assert len(recorder.for_step(first.run_id, "flaky")) == 1
    view = h.rt.runs.view(first.run_id)
    assert view["status"] == "killed"
    assert view["kill_reason"] == f"replaced by run {second.run_id}"
    assert steps_of(view)["flaky"]["status"] == "skipped"


def cancel_the_wide_run(other: Runtime, killed: list[str]) -> Callable[[], None]:
    """A cancel of the one `wide` run, made by the other process; its run id noted."""
    def cancel() -> None:
        (run_id,) = [r.run_id for r in other.store.runs.list_runs("wide", time.time())[0]]
        other.runs.cancel(run_id, "changed my mind")
        killed.append(run_id)

    return cancel


def test_a_cancel_whose_pass_runs_while_the_roots_are_claimed_starts_nothing(
    harness_factory: Any, recorder: Recorder
) -> None:
    """30 roots, which the start leaves out (engine.plan): each claim creates its row.
    The cancel comes right after the first claim: its pass sees one row and the 29
    rows planned, skips those (creating them skipped) and flags the claimed one. The
    first claim's start check finds the run stopping, and the other 29 claims find
    their rows skipped: no function is called, and no start is recorded."""
    h, other, sent = setup(harness_factory)
    killed: list[str] = []
    run_id = h.start("wide")
    dispatched = [m for m in sent if m.run_id == run_id]
    assert len(dispatched) == 30 and all(m.planned for m in dispatched)
    assert h.rt.store.steps.query_steps(run_id) == []  # no row written by the start
    once_after(h, "PutItem", cancel_the_wide_run(other, killed))  # the first claim
    w = h.rt.worker()
    for m in dispatched:
        w.handle(m)
    assert killed == [run_id]
    assert all(recorder.for_step(run_id, f"s{i:02d}") == [] for i in range(30))
    history = h.rt.runs.history(run_id)
    assert [e for e in history if e["type"] == "step.started"] == []
    given_up = {e["step"] for e in history if e["type"] == "step.skipped"
                and e.get("reason") == "run stopped before the step started"}
    assert given_up == {dispatched[0].step}
    view = h.rt.runs.view(run_id)
    assert view["status"] == "killed"
    assert {s["status"] for s in view["steps"]} == {"skipped"}


def stop_flag_reads(h: Harness) -> list[str]:
    """The run ids whose stop flags this process reads (store.runs.run_flags), as it reads."""
    reads: list[str] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        if str(params.get("ProjectionExpression", "")).startswith("kill_requested"):
            reads.append(params["Key"]["run_id"]["S"])

    h.rt.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.GetItem", hook)
    return reads


def test_a_cancel_whose_canceller_died_before_its_pass_starts_nothing(
    harness_factory: Any, recorder: Recorder
) -> None:
    """The cancel request is committed, and its process dies before its pass: no row is
    flagged. Every root's claim is taken, and its start check finds the request: no
    function is called, and the history shows no start."""
    h, other, sent = setup(harness_factory)
    run_id = h.start("wide")
    dispatched = [m for m in sent if m.run_id == run_id]
    assert len(dispatched) == 30
    other.store.runs.request_kill(run_id, "changed my mind", time.time())  # then it died
    w = h.rt.worker()
    for m in dispatched:
        w.handle(m)
    assert all(recorder.for_step(run_id, f"s{i:02d}") == [] for i in range(30))
    history = h.rt.runs.history(run_id)
    assert [e for e in history if e["type"] == "step.started"] == []
    rows = {r.step: r for r in h.rt.store.steps.query_steps(run_id)}
    assert {r.status.value for r in rows.values()} == {"skipped"}
    assert all(r.started_at is None for r in rows.values())


def test_every_claim_reads_the_run_once_and_the_launch_reads_nothing(
    harness_factory: Any, recorder: Recorder
) -> None:
    """30 roots launched: the launch reads no flag; each claim makes one start check, a
    read of the run's stop flags. (The first claim reads the run whole before it: the
    worker has no context for it yet, and a root's claim creates its row from the run's
    plan.)"""
    h, _, sent = setup(harness_factory)
    reads = stop_flag_reads(h)
    whole: list[str] = []
    runs_table = h.rt.settings.names.runs_table

    def note_whole(params: dict[str, Any], **_: Any) -> None:
        if params.get("TableName") == runs_table and "ProjectionExpression" not in params:
            whole.append(params["Key"]["run_id"]["S"])

    h.rt.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.GetItem",
                                               note_whole)
    run_id = h.start("wide")
    assert reads == []
    dispatched = [m for m in sent if m.run_id == run_id]
    assert len(dispatched) == 30
    w = h.rt.worker()
    for m in dispatched:
        w.handle(m)
    assert reads == [run_id] * 30
    # The context once (each check reads the flags alone), and the finish's read.
    assert whole == [run_id] * 2
    assert all(len(recorder.for_step(run_id, f"s{i:02d}")) == 1 for i in range(30))
    assert h.rt.runs.view(run_id)["status"] == "success"


def test_a_launch_whose_batch_was_sent_twice_leaves_the_read_to_each_claim(
    harness_factory: Any, recorder: Recorder
) -> None:
    """The first sending of the launch's batch (the join's row: its roots are left out)
    times out (it may yet land, after a stop pass, and write its row back unflagged):
    botocore sends it again, and the launch does not mark its dispatches `launched`.
    Each claim reads the run's flags."""
    h, _, sent = setup(harness_factory)
    reads = stop_flag_reads(h)
    timed_out: list[bool] = []

    def time_out_once(**_: Any) -> None:
        if not timed_out:
            timed_out.append(True)
            raise ReadTimeoutError(endpoint_url="in-process")

    h.rt.clients.dynamodb.meta.events.register_first(
        "before-send.dynamodb.BatchWriteItem", time_out_once)
    run_id = h.start("joined")
    assert timed_out == [True]
    dispatched = [m for m in sent if m.run_id == run_id]
    assert sorted(m.step for m in dispatched) == ["boom", "side"]
    assert not any(m.launched for m in dispatched)
    w = h.rt.worker()
    for m in dispatched:
        w.handle(m)
    # No read by the launch; each claim's start check reads the run's flags.
    assert reads == [run_id] * 2
    assert [len(recorder.for_step(run_id, m.step)) for m in dispatched] == [1, 1]


def halting_with_two_in_flight(
    h: Harness, other: Runtime, run_id: str
) -> tuple[StepRecord, StepRecord, StepRecord, StepRecord]:
    """boom failed under its halter's lease and the stop pass flagged slow and flaky,
    both in flight under `other`: (slow, flaky, boom's claim, its failed row). The
    halter has not written `run.halted` yet."""
    slow = claim(other, run_id, "slow", "other-worker")
    flaky = claim(other, run_id, "flaky", "other-worker")
    boom = claim(h.rt, run_id, "boom", "halter")
    failed = h.rt.store.steps.record_failure(run_id, "boom", 1, "halter",
                                             error={"code": "http_error", "message": "422"},
                                             now=time.time())
    tally = Tally()
    tally.add(run_id)  # boom's count (a sink)
    h.rt.executor.stop(run_id, "run halted: step boom failed", tally)  # flags both
    h.rt.executor.flush(tally)
    return slow, flaky, boom, failed


def land(other: Runtime, run_id: str, row: StepRecord) -> None:
    """The step in flight under `other` succeeds."""
    t = Tally()
    other.executor.succeed(row, RunContext.of(other.store.runs.get_run(run_id, time.time())),  # type: ignore[arg-type]
                                '{"ok": 1}', None, 9, t, keep_one=None)
    other.executor.flush(t)


def test_a_halt_still_being_recorded_when_the_run_finished_is_in_its_history(
    harness_factory: Any, recorder: Recorder
) -> None:
    # boom fails; its worker's stop pass is slow. Meanwhile the last step in flight
    # lands and finishes the run (failed) before the halter writes `run.halted`: the
    # finish records the halt, so the run's history says it halted, once.
    h, other, _ = setup(harness_factory)
    run_id = h.start("w")
    slow, flaky, boom, failed = halting_with_two_in_flight(h, other, run_id)
    for row in (flaky, slow):  # the steps in flight land, before the halter goes on
        land(other, run_id, row)
    assert h.rt.store.runs.get_run(run_id, time.time()).status.value == "failed"  # type: ignore[union-attr]
    h.rt.executor.halt(run_id, after_failure(OnFailure.HALT, failed), Tally())  # too late
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert run is not None and run.halted
    kinds = [e["type"] for e in run.history]
    assert kinds.count("run.halted") == 1 and kinds.index("run.halted") < kinds.index("run.failed")
    assert boom.claimed


def test_a_halt_recorded_while_the_run_finishes_is_in_its_history_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    # As above, but the halter writes `run.halted` between the finisher's read of the
    # rows and its finish: the finish records no second halt.
    h, other, _ = setup(harness_factory)
    run_id = h.start("w")
    slow, flaky, _, failed = halting_with_two_in_flight(h, other, run_id)
    land(other, run_id, slow)
    halts: list[bool] = []

    def halt_now(**_: Any) -> None:  # right after the finisher read the rows
        if not halts:
            halts.append(True)
            h.rt.store.runs.mark_halted(run_id, after_failure(OnFailure.HALT, failed).error,  # type: ignore[union-attr]
                                        time.time())

    other.clients.dynamodb.meta.events.register("after-call.dynamodb.Query", halt_now)
    land(other, run_id, flaky)
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert halts and run is not None and run.status.value == "failed" and run.halted
    kinds = [e["type"] for e in run.history]
    assert kinds.count("run.halted") == 1 and kinds.index("run.halted") < kinds.index("run.failed")


def test_a_step_landing_while_its_finishing_run_reads_the_rows_still_finishes_it(
    harness_factory: Any, recorder: Recorder
) -> None:
    h, other, _ = setup(harness_factory)
    run_id = h.start("joined")
    side = claim(other, run_id, "side", "w2")
    landed: list[bool] = []

    def land_side() -> None:
        # The finisher has read the rows (report skipped, side in flight) when side's
        # worker records its success, before the finisher flags side to count.
        report = other.store.steps.get_step(run_id, "report")
        if landed or report is None or report.status.value != "skipped":
            return
        other.store.steps.put_success(side, output_json="{}", output_ref=None, size=2,
                                      now=time.time())
        landed.append(True)

    h.rt.clients.dynamodb.meta.events.register("after-call.dynamodb.Query",
                                               lambda **_: land_side())
    h.rt.worker().handle(Dispatch(run_id=run_id, step="boom", attempt=1))
    assert landed
    # No sweeper runs here: the finisher itself must see that side landed.
    view = ends(h, run_id, "failed", skipped=("report",))
    assert steps_of(view)["side"]["status"] == "success"
