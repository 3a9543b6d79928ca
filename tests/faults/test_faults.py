"""Faults: duplicated, dropped and raced messages, and a worker killed mid-step.

Faults are injected with real code in front of real SQS (Queues.tamper) and by killing
a real worker process; the assertions are on what the functions actually received."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.queue import Dispatch
from orchestrator.adapters.store import Lease
from orchestrator.engine.context import RunContext
from orchestrator.engine.definition import Definition
from orchestrator.engine.plan import unwritten
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus, StepStatus
from tests.support.harness import claim_step, steps_of
from tests.support.testfns import Recorder

ROOT = Path(__file__).resolve().parents[2]

FANOUT = """
backends:
  fn: { url: "${FN}" }
workflows:
  fan:
    steps:
      root: { backend: fn, route: /echo }
      a: { backend: fn, route: /echo, dependsOn: [root] }
      b: { backend: fn, route: /echo, dependsOn: [root] }
      c: { backend: fn, route: /flaky, payload: { fail: 1 }, dependsOn: [root],
           retry: { max: 2, delay: 10ms } }
      d: { backend: fn, route: /echo, dependsOn: [root] }
      e: { backend: fn, route: /echo, dependsOn: [root] }
      join: { backend: fn, route: /echo, dependsOn: [a, b, c, d, e] }
"""


def attempts_seen(recorder: Recorder, run_id: str, steps: list[str]) -> Counter[tuple[str, int]]:
    seen: Counter[tuple[str, int]] = Counter()
    for s in steps:
        for call in recorder.for_step(run_id, s):
            seen[(s, call.attempt)] += 1
    return seen


def test_every_message_delivered_twice_calls_each_attempt_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(FANOUT)
    sent: list[Dispatch] = []

    def twice(msgs: list[Dispatch]) -> list[Dispatch]:
        sent.extend(msgs)
        return [m for m in msgs for _ in range(2)]

    h.rt.queues.tamper = twice
    h.start_workers(n=2, threads=4)
    run_id = h.start("fan")
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert len(sent) >= 6  # the roots, the fan-out and the retry timer all went through SQS
    seen = attempts_seen(recorder, run_id, [s["step"] for s in view["steps"]])
    assert all(n == 1 for n in seen.values()), seen
    assert seen[("c", 1)] == seen[("c", 2)] == 1
    assert steps_of(view)["join"]["attempts"] == 1


def fan_without_b(harness_factory: Any, tamper: Any) -> tuple[Any, str]:
    """FANOUT started with `tamper` in front of SQS (it keeps b's messages back), once
    every step but b and the join has succeeded. No sweeper runs on its own here."""
    h = harness_factory(FANOUT, sweep_interval=0.5, redispatch_after=30.0)
    h.rt.queues.tamper = tamper
    h.start_workers()
    run_id = h.start("fan")
    for step in ("a", "c", "d", "e"):
        h.wait_for_step(run_id, step, ("success",))
    return h, run_id


def test_a_dropped_dispatch_is_recovered_by_the_sweep(
    harness_factory: Any, recorder: Recorder
) -> None:
    dropped: list[Dispatch] = []

    def drop_b_once(msgs: list[Dispatch]) -> list[Dispatch]:
        keep = []
        for m in msgs:
            if m.step == "b" and not dropped:
                dropped.append(m)
            else:
                keep.append(m)
        return keep

    # Without a sweeper the run cannot finish: b's message is gone. Every other step
    # that can run does; b stays blocked with its only dependency done (the message
    # was to promote and claim it in one write).
    h, run_id = fan_without_b(harness_factory, drop_b_once)
    assert steps_of(h.rt.runs.view(run_id))["b"]["status"] == "blocked"
    assert dropped and dropped[0].after == "root" and dropped[0].ready_at is not None
    # Not before `settle` (redispatch_after) past root's last sign of life: a sweep leaves
    # it alone; once that has passed, the sweep promotes b (and only b) and sends it.
    soon = h.rt.sweeper(clock=lambda: time.time() + 20)
    report = soon.sweep()
    assert (report.promoted, report.redispatched) == (0, 0)
    later = h.rt.sweeper(clock=lambda: time.time() + 31)
    report = later.sweep()
    assert (report.promoted, report.redispatched) == (1, 0)
    view = h.wait(run_id, timeout=10)
    assert view["status"] == "success"
    assert len(recorder.for_step(run_id, "b")) == 1


def test_a_promotion_message_late_after_the_sweep_promoted_the_step_still_claims_it(
    harness_factory: Any, recorder: Recorder
) -> None:
    held: list[Dispatch] = []

    def hold_b(msgs: list[Dispatch]) -> list[Dispatch]:
        held.extend(m for m in msgs if m.step == "b")
        return [m for m in msgs if m.step != "b"]

    h, run_id = fan_without_b(harness_factory, hold_b)
    # The sweep promotes b (ready, attempt 1); its own dispatch is held back too.
    assert h.rt.sweeper(clock=lambda: time.time() + 31).sweep().promoted == 1
    assert steps_of(h.rt.runs.view(run_id))["b"]["status"] == "ready"
    hint, resent = held
    assert hint.after == "root" and resent.after is None
    # The first message arrives late: b is no longer blocked, so it is claimed as ready.
    h.rt.worker().handle(hint)
    # A copy finds it taken: nothing runs twice.
    h.rt.worker().handle(hint)
    h.rt.worker().handle(resent)
    view = h.wait(run_id, timeout=10)
    assert view["status"] == "success"
    assert len(recorder.for_step(run_id, "b")) == 1
    b = steps_of(view)["b"]
    assert b["attempts"] == 1


def test_two_workers_racing_for_one_step_dispatch_it_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory("""
backends:
  fn: { url: "${FN}" }
workflows:
  one:
    steps:
      only: { backend: fn, route: /slow, payload: { seconds: 0.3 } }
""")
    h.rt.queues.tamper = lambda msgs: []  # no queue: the racers get the message by hand
    run_id = h.start("one")
    workers = [h.rt.worker() for _ in range(8)]
    barrier = threading.Barrier(len(workers))

    def race(w: Any) -> None:
        barrier.wait()
        w.handle(Dispatch(run_id=run_id, step="only", attempt=1))

    threads = [threading.Thread(target=race, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert len(recorder.for_step(run_id, "only")) == 1


def test_claims_are_exclusive_under_a_32_way_race(harness_factory: Any) -> None:
    h = harness_factory(FANOUT)
    h.rt.queues.tamper = lambda msgs: []
    run_id = h.start("fan")
    wins: list[str] = []
    barrier = threading.Barrier(32)

    def claim(i: int) -> None:
        barrier.wait()
        try:
            claim_step(h.rt, run_id, "root", 1, Lease(f"w{i}", time.time() + 30), time.time())
            wins.append(f"w{i}")
        except Exception:
            pass

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_duplicated_completion_promotes_the_join_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(FANOUT)
    sent: list[Dispatch] = []
    h.rt.queues.tamper = lambda msgs: sent.extend(msgs) or []
    run_id = h.start("fan")
    store, adv, now = h.rt.store, h.rt.executor, time.time()
    run = store.runs.get_run(run_id, now)
    assert run is not None
    ctx = RunContext.of(run)
    # Drive every step to success by hand, then replay each completion 3 times at once.
    for name in ["root", "a", "b", "c", "d", "e"]:
        lease = Lease("w", now + 30)
        row = store.steps.get_step(run_id, name) or ctx.plan(name)  # a row the start left out
        assert row is not None
        if row.status is StepStatus.BLOCKED:
            store.steps.promote(run_id, name, len(row.deps), None, now, all_deps=list(row.deps),
                                plan=ctx.plan(name))
        claim_step(h.rt, run_id, name, 1, lease, now)
        done = store.steps.record_success(
            run_id, name, 1, "w", output_json='{"ok":1}', output_ref=None, size=8, now=now
        )
        if name == "root":
            continue
        results: list[Any] = []
        barrier = threading.Barrier(3)

        def replay(done: Any = done, barrier: Any = barrier, results: Any = results) -> None:
            barrier.wait()
            results.append(adv.promote_dependants(done, ctx, None))

        threads = [threading.Thread(target=replay) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        promoted = [d for _, sends in results for d in sends]
        assert len(promoted) == (1 if name == "e" else 0), (name, promoted)
    join = store.steps.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.READY
    assert join.satisfied == {"a", "b", "c", "d", "e"}


@pytest.mark.slow
def test_worker_sigkilled_mid_step_another_finishes_with_the_same_key(
    harness_factory: Any, recorder: Recorder, emulator: Any, testfns: str, tmp_path: Path
) -> None:
    text = """
backends:
  fn: { url: "${FN}" }
workflows:
  victim:
    steps:
      slow: { backend: fn, route: /latch, timeout: 3s }
      after: { backend: fn, route: /echo, dependsOn: [slow] }
"""
    h = harness_factory(text, lease_margin=1.0)
    manifest = tmp_path / "victim.yml"
    manifest.write_text(text)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": emulator.url,
        "ORCH_PREFIX": h.rt.settings.prefix,
        "ORCH_LEASE_MARGIN": "1",
        "FN": testfns,
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "worker", "--manifest", str(manifest)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        run_id = h.start("victim")
        deadline = time.monotonic() + 30
        while not recorder.for_step(run_id, "slow"):
            assert time.monotonic() < deadline, "the subprocess worker never called the step"
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        # Mid-step: the function holds at its latch (a sleep could end before a loaded
        # machine gets here); opened once the worker is dead, for the second attempt.
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    recorder.latch(run_id).set()
    h.start_workers()
    h.start_sweeper()
    view = h.wait(run_id, timeout=30)
    assert view["status"] == "success"
    calls = recorder.for_step(run_id, "slow")
    assert [c.attempt for c in calls] == [1, 2]
    assert {c.key for c in calls} == {f"{run_id}/slow"}
    assert steps_of(view)["after"]["status"] == "success"


def test_a_start_that_died_after_the_run_row_is_completed_by_the_sweep(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(FANOUT)
    rt = h.rt
    # The start's first write landed (the run row); its process died before the steps.
    wf = rt.manifest.workflows["fan"]
    definition = Definition.of(wf, rt.manifest.backends, rt.settings.default_step_timeout)
    now = time.time()
    rt.store.runs.create_run(RunRecord(
        run_id="orphan-1", workflow="fan", status=RunStatus.RUNNING, input={"n": 1},
        definition=definition, created_at=now, total=len(wf.steps), remaining=1,
        started_at=now,
    ))
    h.start_workers()
    h.start_sweeper()
    view = h.wait("orphan-1", timeout=30)
    assert view["status"] == "success"
    assert {s["status"] for s in view["steps"]} == {"success"}
    # Rebuilt once the run was as old as a lost message (redispatch_after), not before.
    first_call = min(c.at for c in recorder.calls
                     if c.body.get("run", {}).get("run_id") == "orphan-1")
    assert first_call - now >= rt.settings.redispatch_after


CHAIN = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


def test_a_commit_that_landed_after_its_own_wake_is_still_followed_up(
    harness_factory: Any, recorder: Recorder
) -> None:
    # A worker took the time, stalled, and its success landed after a sweep had read
    # past that time; then it died before promoting `two`. The late read of the wakes
    # (ORCH_WAKE_LATE after the prompt one) still finds the row and repairs the run.
    h = harness_factory(CHAIN, wake_late=2.0)
    rt = h.rt
    run_id = h.start("chain")
    t0 = time.time()
    claim_step(rt, run_id, "one", 1, Lease("stalled", t0 + 60), t0)
    h.rt.sweeper().sweep()  # the prompt read passes t0
    stalled_at = t0 - 0.5  # when the worker read its clock, before the cursor
    rt.store.steps.record_success(run_id, "one", 1, "stalled", output_json='{"ok": 1}',
                                  output_ref=None, size=9, now=stalled_at)
    sweeper = h.rt.sweeper()
    assert sweeper.sweep().promoted == 0  # the prompt read is past it: unseen
    h.start_workers()
    deadline = time.monotonic() + 20
    while not (report := sweeper.sweep()).promoted:  # the late read comes round
        assert time.monotonic() < deadline, report
        time.sleep(0.2)
    assert h.wait(run_id)["status"] == "success"
    assert len(recorder.for_step(run_id, "two")) == 1


def test_a_write_whose_answer_was_lost_is_known_by_its_resent_copy(
    harness_factory: Any, recorder: Recorder
) -> None:
    # The claim of `one`, its success and the run's finish each land, but their answers
    # are lost and botocore sends each again (what a read timeout does): the copy finds
    # the first one's effect. Each is known as the worker's own, so the chain goes on
    # and the run finishes with no sweeper, every step called once, every event once.
    h = harness_factory(CHAIN)
    lost: list[str] = []

    def lose_the_answer(response: Any, request_dict: dict[str, Any], attempts: int,
                        **_: Any) -> float | None:
        body = request_dict.get("body", b"")
        text = body.decode() if isinstance(body, bytes) else str(body)
        ok = response is not None and response[0].status_code == 200
        for mark in ("step.started", "step.succeeded", "run.success"):
            # A history entry is a JSON string inside the request's JSON: quotes escaped.
            if ok and attempts == 1 and f'\\"{mark}\\"' in text and mark not in lost:
                lost.append(mark)
                return 0.0  # send it again at once
        return None

    for op in ("UpdateItem", "PutItem"):  # a plain success is a put of the whole row
        h.rt.clients.dynamodb.meta.events.register_first(
            f"needs-retry.dynamodb.{op}", lose_the_answer)
    h.start_workers()
    run_id = h.start("chain")
    view = h.wait(run_id, timeout=20)
    assert view["status"] == "success"
    assert sorted(lost) == ["run.success", "step.started", "step.succeeded"]
    for step in ("one", "two"):
        assert len(recorder.for_step(run_id, step)) == 1
    events = [(e.get("step"), e["type"]) for e in h.rt.runs.history(run_id)]
    assert len(events) == len(set(events)), events
    assert ("one", "step.started") in events and (None, "run.success") in events


SLOW_ONE = """
backends:
  fn: { url: "${FN}" }
workflows:
  slow:
    steps:
      one: { backend: fn, route: /latch }
"""


def test_two_threads_of_one_worker_claiming_one_message_in_one_millisecond_call_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    # Two copies of one message reach two threads of the same worker, whose clock reads
    # the same millisecond for both claims. The second claim's guard fails on the
    # first's lease; it must not take that row for its own landed write (same worker,
    # same attempt, same time): every lease a worker takes is named apart.
    h = harness_factory(SLOW_ONE)
    run_id = h.start("slow")
    frozen = time.time()
    w = h.rt.worker(clock=lambda: frozen)
    msg = Dispatch(run_id=run_id, step="one", attempt=1)
    first = threading.Thread(target=w.handle, args=(msg,))
    first.start()
    deadline = time.monotonic() + 10
    while not recorder.for_step(run_id, "one"):  # the first copy's call is under way
        assert time.monotonic() < deadline, "the first copy never called the function"
        time.sleep(0.02)
    # (and stays so, held at its latch, until the second copy has been handled)
    w.handle(msg)  # the second copy: its claim fails, nothing runs
    assert len(recorder.for_step(run_id, "one")) == 1
    recorder.latch(run_id).set()
    first.join(timeout=20)
    assert h.wait(run_id)["status"] == "success"
    assert len(recorder.for_step(run_id, "one")) == 1


def test_a_finisher_that_stalls_before_its_reads_stamps_the_finish_after_them(
    harness_factory: Any,
) -> None:
    # The finisher reads the clock, stalls (a busy machine), and by the time it reads
    # the rows a step that was still blocked has run and landed. Its finish must not
    # be stamped before that step's start (seed 303 once showed it 16 ms before).
    h = harness_factory(CHAIN)
    rt = h.rt
    run_id = h.start("chain")
    run = rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    t0 = time.time()
    for i, step in enumerate(("one", "two")):
        if step == "two":  # its row is created by its promotion (the start left it out)
            rt.store.steps.promote(run_id, "two", 1, None, t0 + i, all_deps=["one"],
                                   plan=RunContext.of(run).plan("two"))
        claim_step(rt, run_id, step, 1, Lease("w", t0 + 60), t0 + i)
        rt.store.steps.record_success(run_id, step, 1, "w", output_json="{}", output_ref=None,
                                      size=2, now=t0 + i + 0.5)
    times = iter([t0 + 0.2, t0 + 3.0, t0 + 3.0, t0 + 3.0])  # stale first, then late
    stalling = dataclasses.replace(rt.executor, clock=lambda: next(times))
    assert stalling.finish_if_done(run_id) is RunStatus.SUCCESS
    view = h.rt.runs.view(run_id)
    started = max(float(e["at"]) for e in h.rt.runs.history(run_id)
                  if e["type"] == "step.started")
    assert view["finished_at"] >= started


JOINED = """
backends:
  fn: { url: "${FN}" }
workflows:
  joined:
    steps:
      one:  { backend: fn, route: /echo }
      two:  { backend: fn, route: /echo }
      both: { backend: fn, route: /echo, dependsOn: [one, two] }
"""


def test_a_start_past_its_fence_keeps_the_rows_a_sweep_rebuilt(
    harness_factory: Any, recorder: Recorder
) -> None:
    # The start wrote its run row and stalled; a sweep rebuilt the rows and the run went
    # on. When the start comes back past its fence, it creates only what is missing.
    h = harness_factory(JOINED)
    rt = h.rt
    run_id = h.start("joined")
    rows = rt.store.steps.query_steps(run_id)
    t0 = time.time()
    rt.store.steps.satisfy(run_id, "both", "one", 2, None, t0)  # moved on meanwhile
    # What the start writes: every planned row but those it leaves out (engine.plan):
    # here the join's, which counts its dependencies.
    run = rt.store.runs.get_run(run_id, t0)
    assert run is not None
    stale = [r for r in rt.runs.rows_for(run) if not unwritten(r, run.definition)]
    assert {r.step for r in stale} == {r.step for r in rows} == {"both"}
    # Past its fence: nothing overwritten (and the start is told it was not clean).
    assert rt.store.steps.put_steps(stale, fence=t0 - 1) is False
    both = rt.store.steps.get_step(run_id, "both")
    assert both is not None and both.satisfied == frozenset({"one"})
    # Within it: the batch, as always, answered at its first sending.
    assert rt.store.steps.put_steps(stale, fence=time.time() + 60) is True
    both = rt.store.steps.get_step(run_id, "both")
    assert both is not None and not both.satisfied  # (which is why the fence exists)


HELD_UP = """
backends:
  fn: { url: "${FN}" }
workflows:
  slow:
    steps:
      nap: { backend: fn, route: /latch, timeout: 30s }
  quick:
    steps:
      one: { backend: fn, route: /echo }
"""


def test_a_worker_whose_threads_are_held_up_hands_its_waiting_messages_back(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(HELD_UP)
    (busy,) = h.start_workers(threads=1)
    slow = h.start("slow")
    h.wait_for_step(slow, "nap", ("dispatched",))  # its one thread is in the held call
    quick = h.start("quick")
    deadline = time.monotonic() + 10
    while not busy.receipts._waiting:  # it received quick's message, which waits for a thread
        assert time.monotonic() < deadline, "the busy worker never received the message"
        time.sleep(0.01)
    h.start_workers(threads=2)  # an idle worker
    done = h.wait(quick)
    assert done["status"] == "success"
    # quick ran on the idle worker while the busy one was still in its call: the message
    # was handed back after HAND_BACK_AFTER instead of waiting out the slow call (held
    # at its latch until now: a 4 s sleep could end first on a loaded machine).
    assert h.rt.runs.view(slow)["status"] == "running"
    assert len(recorder.for_step(quick, "one")) == 1
    recorder.latch(slow).set()
    assert h.wait(slow)["status"] == "success"


FEW_AND_MANY_SINKS = """
backends:
  fn: { url: "${FN}" }
workflows:
  pair:
    steps:
      first: { backend: fn, route: /echo }
      second: { backend: fn, route: /echo, dependsOn: [first] }
  spray:
    steps:
      root: { backend: fn, route: /echo }
      s1: { backend: fn, route: /echo, dependsOn: [root] }
      s2: { backend: fn, route: /echo, dependsOn: [root] }
      s3: { backend: fn, route: /echo, dependsOn: [root] }
      s4: { backend: fn, route: /echo, dependsOn: [root] }
      s5: { backend: fn, route: /echo, dependsOn: [root] }
"""


def test_a_run_with_few_sinks_is_counted_as_its_last_step_lands_many_sinks_at_the_flush(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(FEW_AND_MANY_SINKS)
    held: list[Dispatch] = []

    def hold(msgs: list[Dispatch]) -> list[Dispatch]:
        held.extend(msgs)
        return []

    h.rt.queues.tamper = hold
    worker = h.rt.worker()
    worker.folds.on = True  # as inside its poll loop; its flusher is not running here
    pair = h.start("pair")
    while held:
        worker.handle(held.pop(0))  # first, then second inline: the only sink
    assert h.rt.runs.view(pair)["status"] == "success"  # no flush was needed
    spray = h.start("spray")
    while held:
        worker.handle(held.pop(0))
    view = h.rt.runs.view(spray)
    assert [s["status"] for s in view["steps"]] == ["success"] * 6
    assert view["status"] == "running"  # five sinks: their counts wait, folded, for a flush
    worker.flush()
    assert h.rt.runs.view(spray)["status"] == "success"
