"""A bulk job survives what can happen to its workers and messages (services/bulk.py):
a worker dying in the middle of a page whose selection changes under it (the runs it
cancelled leave a `status = queued` search), two copies of a page's message taken at
once, a message of a page already done, a worker dying between moving the job on and
sending the next page's message, a creator dying before the first message, a stalled
job older than the newest fifty; and a dry run's count that stops reading.

On a WorkflowEnv (the real engine on moto, a fake clock): the pages are done by the
runtime's BulkActions, or by one whose cancel dies (a crash), called as a worker would;
what follows is pumped by the environment's worker."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from infra.emulator import Emulator
from orchestrator.adapters.messages import BulkPage
from orchestrator.adapters.queue import depth
from orchestrator.errors import OrchestratorError
from orchestrator.runtime import Runtime
from orchestrator.services.bulk import CLAIM_FOR, BulkActions
from orchestrator.testing import WorkflowEnv
from tests.support.matrix import Calls, make_app

WORKFLOWS = {
    # One at a time, the first holding its place at a gate: the others queue.
    "held": {"concurrency": {"limit": 1},
             "steps": {"ask": {"approval": {"prompt": "hold", "timeout": "1d"}}}},
}


class Died(Exception):
    """A worker's death in the middle of a page."""


@pytest.fixture
def env(emulator: Emulator) -> Iterator[WorkflowEnv]:
    with WorkflowEnv(make_app(Calls()), emulator=emulator, dags=WORKFLOWS) as e:
        yield e


def _queued(env: WorkflowEnv, n: int, batch: str = "a", *, holder: bool = True) -> list[str]:
    """n queued runs of `held` (behind one running: started first unless `holder` is
    False, one runs already), each with `batch` in its input."""
    runs = [env.start("held", {"batch": batch, "i": i}) for i in range(n + holder)]
    env.advance(0)
    queued = [r for r in runs if env.status(r) == "queued"]
    assert len(queued) == n
    return queued


def _actions(rt: Runtime, **parts: Any) -> BulkActions:
    """Bulk actions on the runtime's parts, some replaced (a cancel that dies)."""
    given: dict[str, Any] = {"cancel": rt.runs.cancel, "rerun": rt.runs.rerun,
                             "resume": rt.durable.resume, "clock": rt.clock, **parts}
    return BulkActions(rt.store, rt.queues, rt.store.bulk, **given)


def _timers(rt: Runtime) -> int:
    d = depth(rt.queues.sqs, rt.queues.timer_url)
    return d.visible + d.delayed


def _report(rt: Runtime, job_id: str) -> dict[str, str]:
    runs, _ = rt.store.bulk.report(job_id, rt.clock(), limit=1000)
    return {o.run_id: o.outcome for o in runs}


def test_a_page_done_again_after_its_worker_died_acts_on_the_runs_it_kept(
        env: WorkflowEnv) -> None:
    rt = env.rt
    queued = _queued(env, 6)
    calls: list[str] = []
    lock = threading.Lock()

    def dying(run_id: str, reason: str) -> bool:
        with lock:
            calls.append(run_id)
            if len(calls) > 2:
                raise Died(run_id)
        return rt.runs.cancel(run_id, reason)

    crashing = _actions(rt, cancel=dying)
    crashing.page_size = rt.bulk.page_size = 3
    spec = rt.bulk.checked({"action": "cancel", "workflow": "held", "status": "queued"})
    assert rt.store.bulk.create("redo", spec, rt.clock()) is not None
    with pytest.raises(Died):
        crashing.page(BulkPage(job="redo", page=0))
    assert sorted(env.status(r) for r in queued) == ["killed"] * 2 + ["queued"] * 4
    assert rt.bulk.get("redo").page == 0
    # Its message comes back; another worker takes the page once the claim has ended,
    # though the search now finds other runs first.
    env.clock.move_to(env.now + CLAIM_FOR + 1)
    rt.bulk.page(BulkPage(job="redo", page=0))
    env.advance(0)  # the next page, by the environment's worker
    job = rt.bulk.get("redo").to_json()
    assert (job["status"], job["counts"], job["processed"]) == (
        "done", {"done": 6, "skipped": 0, "failed": 0}, 6)
    assert _report(rt, "redo") == dict.fromkeys(queued, "done")
    assert {env.status(r) for r in queued} == {"killed"}


def test_two_copies_of_a_page_message_act_once(env: WorkflowEnv) -> None:
    rt = env.rt
    [run] = _queued(env, 1)
    first, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(run_id: str, reason: str) -> bool:
        calls.append(run_id)
        if len(calls) == 1:  # the first copy acts slowly: the second comes meanwhile
            first.set()
            release.wait(30)
        return rt.runs.cancel(run_id, reason)

    actions = _actions(rt, cancel=slow)
    spec = actions.checked({"action": "cancel", "run_ids": [run]})
    assert rt.store.bulk.create("twice", spec, rt.clock()) is not None
    copy_one = threading.Thread(target=actions.page, args=(BulkPage(job="twice", page=0),))
    copy_one.start()
    try:
        assert first.wait(30)
        actions.page(BulkPage(job="twice", page=0))  # the second copy: the page is held
    finally:
        release.set()
        copy_one.join(30)
    assert calls == [run]
    assert _report(rt, "twice") == {run: "done"}
    assert rt.bulk.get("twice").status == "done" and env.status(run) == "killed"


def test_a_done_pages_message_sends_the_next_only_if_it_never_went(
        env: WorkflowEnv) -> None:
    rt = env.rt
    queued = _queued(env, 4)
    rt.bulk.page_size = 2
    spec = rt.bulk.checked({"action": "cancel", "q": "input.batch = a", "status": "queued"})
    assert rt.store.bulk.create("stale", spec, rt.clock()) is not None
    before = _timers(rt)
    rt.bulk.page(BulkPage(job="stale", page=0))
    assert _timers(rt) == before + 1  # page 1's message
    rt.bulk.page(BulkPage(job="stale", page=0))  # a copy, late: nothing more is sent
    assert _timers(rt) == before + 1
    env.advance(0)
    assert rt.bulk.get("stale").to_json()["processed"] == 4

    # A worker moves a job on and dies before sending the next page's message (here:
    # its queue refuses the send); the page's message, back, sends it.
    more = _queued(env, 4, "b", holder=False)
    spec = rt.bulk.checked({"action": "cancel", "q": "input.batch = b", "status": "queued"})
    lost = copy.copy(rt.queues)
    lost.timer_url = rt.queues.timer_url + "-gone"
    dying = _actions(rt)
    dying.queues = lost
    dying.page_size = 2
    assert rt.store.bulk.create("unsent", spec, rt.clock()) is not None
    with pytest.raises(OrchestratorError):
        dying.page(BulkPage(job="unsent", page=0))
    assert rt.bulk.get("unsent").page == 1
    rt.bulk.page(BulkPage(job="unsent", page=0))
    env.advance(0)
    assert rt.bulk.get("unsent").to_json()["processed"] == 4
    assert {env.status(r) for r in [*queued, *more]} == {"killed"}


def test_a_job_whose_creator_died_before_its_message_is_sent_when_asked_again(
        env: WorkflowEnv) -> None:
    rt = env.rt
    [run] = _queued(env, 1)
    spec = {"action": "cancel", "run_ids": [run]}
    assert rt.store.bulk.create("unsent", rt.bulk.checked(spec), rt.clock()) is not None
    job, created = rt.bulk.start(spec, "unsent")  # the client's retry, same id
    assert not created and job.status == "running"
    env.advance(0)
    assert rt.bulk.get("unsent").status == "done" and env.status(run) == "killed"


def test_the_sweeper_nudges_a_stalled_job_behind_fifty_newer_ones(env: WorkflowEnv) -> None:
    rt = env.rt
    [run] = _queued(env, 1)
    spec = rt.bulk.checked({"action": "cancel", "run_ids": [run]})
    assert rt.store.bulk.create("oldest", spec, rt.clock()) is not None
    finished = rt.bulk.checked({"action": "cancel", "run_ids": ["no-such-run"]})
    for i in range(50):
        assert rt.store.bulk.create(f"newer-{i:02}", finished, rt.clock()) is not None
    later = _actions(rt, clock=lambda: rt.clock() + 360)
    assert later.nudge() == 51
    env.advance(0)
    assert rt.bulk.get("oldest").status == "done" and env.status(run) == "killed"
    assert later.nudge() == 0  # once a minute at most
    again = _actions(rt, clock=lambda: rt.clock() + 900)
    assert again.nudge() == 0 and rt.store.bulk.running(rt.clock()) == []


def test_a_dry_runs_count_stops_reading_and_says_there_is_more(env: WorkflowEnv) -> None:
    rt = env.rt
    _queued(env, 5)
    rt.bulk.count_page, rt.bulk.count_pages = 2, 2
    counted = rt.bulk.count({"action": "cancel", "workflow": "held", "status": "queued"})
    assert (counted["count"], counted["more"]) == (4, True)
    rt.bulk.count_pages = 3
    counted = rt.bulk.count({"action": "cancel", "workflow": "held", "status": "queued"})
    assert (counted["count"], counted["more"]) == (5, False)
