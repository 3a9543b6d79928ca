"""Acting on many runs at once (`POST /bulk-actions`, services/bulk.py), over the HTTP API
on moto with the test functions on uvicorn and real workers taking the job's pages:
cancel every run a search names (queued behind a limit and running alike) and a halting
run (its step in flight lands, nothing starts after), rerun failed runs with a new input,
resume; a dry run's count; the per-run report; a job id used twice; a page done again
after its worker died acts on no run twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.adapters.messages import BulkPage
from orchestrator.adapters.store.bulk_jobs import RunOutcome
from orchestrator.services.bulk import BulkActions
from tests.support.harness import Harness
from tests.support.polling import until
from tests.support.served import api_client, start_run
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  napping:
    concurrency: { limit: 1 }
    steps:
      nap: { backend: fn, route: /slow, payload: { seconds: 30 } }
  checked:
    steps:
      check: { backend: fn, route: /gate, retry: { max: 0 } }
      after: { backend: fn, route: /echo, dependsOn: [check] }
  halting:
    steps:
      check: { backend: fn, route: /latch, payload: { name: check, status: 422 },
               retry: { max: 0 } }
      nap: { backend: fn, route: /latch }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    with api_client(h) as client:
        yield h, client


def _status(c: httpx.Client, run_id: str) -> str:
    return str(c.get(f"/runs/{run_id}").json()["status"])


def _done(c: httpx.Client, job_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        job = c.get(f"/bulk-actions/{job_id}", params={"limit": 1000}).json()
        return job if job["status"] == "done" else None
    job: dict[str, Any] = until(f"bulk job {job_id} done", finished, timeout=60)
    return job


def test_cancel_every_run_a_search_names(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    h.rt.bulk.page_size = 3  # pages of 3 runs: the job goes through three
    bad = [start_run(c, "napping", {"deploy": "v41", "i": i}) for i in range(7)]
    good = start_run(c, "checked", {"deploy": "v40", "ok": True})
    until("the first run running", lambda: _status(c, bad[0]) == "running")
    assert {_status(c, r) for r in bad[1:]} == {"queued"}

    count = c.post("/bulk-actions", json={"action": "cancel", "q": "input.deploy = v41",
                                          "dry_run": True})
    assert count.status_code == 200, count.text
    assert count.json()["count"] == 7 and count.json()["sample"] == bad[::-1][:5]

    r = c.post("/bulk-actions", json={"action": "cancel", "q": "input.deploy = v41",
                                      "reason": "bad deploy v41", "job_id": "undo-v41"})
    assert r.status_code == 202, r.text
    assert r.headers["location"] == "/bulk-actions/undo-v41"
    job = _done(c, "undo-v41")
    assert job["counts"] == {"done": 7, "skipped": 0, "failed": 0} and job["processed"] == 7
    assert job["pages"] == 3
    assert {o["run_id"]: o["outcome"] for o in job["runs"]} == dict.fromkeys(bad, "done")
    until("every run of the bad deploy cancelled",
          lambda: {_status(c, x) for x in bad} == {"killed"})
    assert c.get(f"/runs/{bad[3]}").json()["kill_reason"] == "bad deploy v41"
    h.wait(good)
    assert _status(c, good) == "success"

    # The same job id and body: that job (200), nothing done again; another body: 409.
    again = c.post("/bulk-actions", json={"action": "cancel", "q": "input.deploy = v41",
                                          "reason": "bad deploy v41", "job_id": "undo-v41"})
    assert again.status_code == 200 and again.json()["counts"]["done"] == 7
    other = c.post("/bulk-actions", json={"action": "cancel", "q": "input.deploy = v40",
                                          "job_id": "undo-v41"})
    assert other.status_code == 409, other.text
    # A second job over the same runs finds them cancelled already.
    second = c.post("/bulk-actions", json={"action": "cancel", "q": "input.deploy = v41"})
    job2 = _done(c, second.json()["job_id"])
    assert job2["counts"] == {"done": 0, "skipped": 7, "failed": 0}
    assert {o["detail"] for o in job2["runs"]} == {"already killed"}
    listed = c.get("/bulk-actions").json()["jobs"]
    assert [j["job_id"] for j in listed][:2] == [second.json()["job_id"], "undo-v41"]


def test_rerun_failed_runs_with_a_new_input(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    h.rt.bulk.page_size = 2  # by run ids, over two pages
    failed = [start_run(c, "checked", {"ok": False, "n": i}) for i in range(3)]
    for run in failed:
        h.wait(run)
    r = c.post("/bulk-actions", json={"action": "rerun", "run_ids": [*failed, "no-such-run"],
                                      "input": {"ok": True}})
    assert r.status_code == 202, r.text
    job = _done(c, r.json()["job_id"])
    assert job["counts"] == {"done": 3, "skipped": 1, "failed": 0}
    by_run = {o["run_id"]: o for o in job["runs"]}
    assert by_run["no-such-run"]["outcome"] == "skipped"
    for run in failed:
        new = by_run[run]["new_run_id"]
        h.wait(new)
        view = c.get(f"/runs/{new}").json()
        assert view["status"] == "success" and view["rerun_of"] == run
        assert view["input"] == {"ok": True}


def test_a_page_done_again_acts_on_no_run_twice(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    failed = [start_run(c, "checked", {"ok": False, "n": i}) for i in range(4)]
    for run in failed:
        h.wait(run)
    rt = h.rt
    spec = rt.bulk.checked({"action": "rerun", "run_ids": failed})
    job = rt.store.bulk.create("crashed", spec, rt.clock())
    assert job is not None
    # Its first worker reran the first run, recorded it, and died before the rest.
    new, _ = rt.runs.rerun(failed[0], new_run_id="by-the-first-worker")
    rt.store.bulk.record("crashed", 0, 0, RunOutcome(failed[0], "done", "rerun",
                                                     new.run_id), rt.clock())
    rt.bulk.page(BulkPage(job="crashed", page=0))
    rt.bulk.page(BulkPage(job="crashed", page=0))  # a duplicate message: nothing more
    done = _done(c, "crashed")
    assert done["counts"]["done"] == 4 and done["pages"] == 1
    assert done["runs"][0]["new_run_id"] == "by-the-first-worker"
    reruns = c.get("/runs", params={"q": "trigger.source = rerun", "limit": 100}).json()
    assert sorted(r["rerun_of"] for r in reruns["runs"]) == sorted(failed)


def test_a_cancel_reaches_a_halting_run(api: tuple[Harness, httpx.Client],
                                       recorder: Recorder) -> None:
    # Its first step failed (onFailure: halt) while `nap` was in flight: the run is
    # still running, halted, until `nap` lands (held at its latch until the cancel).
    h, c = api
    run = start_run(c, "halting", {"ok": False})
    # `check` fails only once `nap` is in flight (a loaded machine may be slow to claim
    # it, and a halt skips a step not yet claimed).
    until("nap in flight", lambda: recorder.for_step(run, "nap"))
    recorder.latch(f"{run}:check").set()
    until("the run halted with its nap in flight",
          lambda: h.rt.store.runs.get_run(run, h.rt.clock()).halted)
    assert _status(c, run) == "running"
    found = c.get("/runs", params={"q": "status = running workflow = halting"}).json()
    assert [r["run_id"] for r in found["runs"]] == [run]
    r = c.post("/bulk-actions", json={"action": "cancel", "run_ids": [run]})
    job = _done(c, r.json()["job_id"])
    assert [(o["outcome"], o["detail"]) for o in job["runs"]] == [("done", "cancelled")]
    recorder.latch(run).set()
    # The cancel is the run's end; its step's failure stays in its steps, the step in
    # flight landed, and nothing started after it.
    view = h.wait(run)
    assert (view["status"], view["kill_reason"]) == ("killed", "cancelled in bulk")
    steps = {s["step"]: s["status"] for s in view["steps"]}
    assert steps == {"check": "failed", "nap": "success", "after": "skipped"}


def test_resume_reports_a_run_it_cannot_resume(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    run = start_run(c, "checked", {"ok": True})
    h.wait(run)
    r = c.post("/bulk-actions", json={"action": "resume", "run_ids": [run]})
    job = _done(c, r.json()["job_id"])
    assert job["runs"][0]["outcome"] == "skipped" and job["runs"][0]["detail"]


@pytest.mark.parametrize(("body", "says"), [
    ({"action": "cancel"}, "name the runs"),
    ({"action": "explode", "q": "xy"}, "action"),
    ({"action": "cancel", "q": "input.x ="}, "no value after ="),
    ({"action": "cancel", "run_ids": ["a"], "q": "xy"}, "leave out q"),
    ({"action": "cancel", "q": "xy", "input": {}}, "only a rerun takes an input"),
    ({"action": "rerun", "q": "xy", "reason": "r"}, "only a cancel takes a reason"),
    ({"action": "cancel", "status": "done"}, "not a run status"),
    ({"action": "cancel", "workflow": "napping", "q": "workflow = checked input.x = 1"},
     "the query says workflow = checked"),
    ({"action": "cancel", "status": "failed", "q": "status = queued"},
     "the query says status = queued"),
    ({"action": "cancel", "run_ids": ["r"], "job_id": "../other"}, "job_id"),
    ({"action": "cancel", "run_ids": [f"run-{i:052}" for i in range(10_000)]},
     "run_ids: 590,001 bytes of run ids; a job takes at most 200,000"),
])
def test_a_bulk_action_that_cannot_be_read_is_a_4xx_naming_what(
    api: tuple[Harness, httpx.Client], body: dict[str, Any], says: str,
) -> None:
    _, c = api
    r = c.post("/bulk-actions", json=body)
    assert r.status_code in (400, 422), r.text
    assert says in r.text


def test_a_job_whose_message_was_lost_is_nudged_by_a_sweep(
        api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    run = start_run(c, "checked", {"ok": False})
    h.wait(run)
    rt = h.rt
    # A job whose first message never went (its sender died after creating it).
    spec = rt.bulk.checked({"action": "cancel", "run_ids": [run]})
    assert rt.store.bulk.create("lost", spec, rt.clock()) is not None
    assert rt.bulk.nudge() == 0  # not stalled yet
    # Six minutes on, a sweeper's pass sends its page again (a clock of its own).
    later = BulkActions(rt.store, rt.queues, rt.store.bulk, cancel=rt.runs.cancel,
                        rerun=rt.runs.rerun, resume=rt.durable.resume,
                        clock=lambda: rt.clock() + 360)
    assert later.nudge() == 1
    assert later.nudge() == 0  # once a minute at most
    job = _done(c, "lost")
    assert job["counts"] == {"done": 0, "skipped": 1, "failed": 0}
