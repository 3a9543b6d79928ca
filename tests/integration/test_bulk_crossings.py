"""Bulk actions where they meet the other features (issue 42): a bulk cancel reaching a
run at every kind of wait (an open approval gate, a retry's backoff, a fan-out's items,
a YAML step's lock and the run waiting in its line, a durable sleep, a signal, a child
run, a shell script's sleep and signal, a `run:` step's retry); a bulk rerun of runs that
a rejected gate or an execution timeout ended; a bulk resume of paused durable runs once
their code is fixed.

The jobs go through the real API (create_app over uvicorn) into a WorkflowEnv's runtime;
the test pumps its worker on the fake clock, so a job's pages and a day of waits cost
milliseconds and every check reads state that has settled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp, RetryableError, StepRequest
from functions.sdk.scripts import ScriptHost
from infra.emulator import Emulator
from orchestrator.errors import Conflict
from orchestrator.testing import WorkflowEnv
from tests.support.matrix import Calls, http_api

CALLS = Calls()
# The code version of `shifty` this process serves (a test "deploys" a change by
# setting it; a change the journal does not match pauses the run).
SHIFTY = {"version": 1}


def _make_app() -> FunctionApp:
    app = FunctionApp(None, title="bulk-crossings")

    @app.step("/work")
    def work(req: StepRequest) -> Any:
        CALLS.add(req.run_id, req.step)
        return {"step": req.step}

    @app.step("/later")
    def later(req: StepRequest) -> Any:  # fails, retryably: its step waits its backoff
        CALLS.add(req.run_id, req.step)
        raise RetryableError(f"{req.step}: not yet")

    app.workflow(sleeper, waiter, parent, timed, shifty)
    return app


def _recorded(ctx: Context, name: str) -> Any:
    def body() -> str:
        CALLS.add(ctx.run_id, name)
        return name
    return body


@workflow("sleeper")
async def sleeper(ctx: Context, payload: dict[str, Any]) -> Any:
    await step("before", _recorded(ctx, "before"))
    await ctx.sleep("1d")
    await step("after", _recorded(ctx, "after"))
    return "slept"


@workflow("waiter")
async def waiter(ctx: Context, payload: dict[str, Any]) -> Any:
    return await ctx.wait_for_signal("go")


@workflow("parent")
async def parent(ctx: Context, payload: dict[str, Any]) -> Any:
    return await ctx.call("sleeper", {"child_of": ctx.run_id})


@workflow("timed", execution_timeout="1h")
async def timed(ctx: Context, payload: dict[str, Any]) -> Any:
    if not payload.get("quick"):
        await ctx.sleep("2h")
    await step("done", _recorded(ctx, "done"))
    return "in time"


@workflow("shifty")
async def shifty(ctx: Context, payload: dict[str, Any]) -> Any:
    await step(f"one-v{SHIFTY['version']}", _recorded(ctx, "one"))
    await ctx.wait_for_signal("go")
    await step("two", _recorded(ctx, "two"))
    return "shifted"


RETRY = {"max": 5, "delay": "1h", "maxDelay": "1h"}
DAGS: dict[str, Any] = {
    "gated": {"steps": {
        "ask": {"approval": {"prompt": "Ship?", "timeout": "1d"}},
        "ship": {"backend": "app", "route": "/work", "dependsOn": ["ask"]},
    }},
    "retrying": {"steps": {
        "try": {"backend": "app", "route": "/later", "retry": dict(RETRY)},
    }},
    "fanned": {"steps": {
        "each": {"backend": "app", "route": "/later", "retry": dict(RETRY),
                 "fanOut": {"items": "input.items", "maxParallel": 1}},
    }},
    "locked": {"steps": {
        "hold": {"backend": "app", "route": "/later", "retry": dict(RETRY), "lock": "deploy"},
    }},
    "after-lock": {"steps": {
        "hold": {"backend": "app", "route": "/work", "lock": "deploy"},
    }},
}


@pytest.fixture
def env(emulator: Emulator) -> Iterator[tuple[WorkflowEnv, httpx.Client]]:
    SHIFTY["version"] = 1
    with WorkflowEnv(_make_app(), emulator=emulator, dags=DAGS) as e, http_api(e) as c:
        yield e, c


def _start(c: httpx.Client, workflow: str, input: Any) -> str:
    r = c.post("/runs", json={"workflow": workflow, "input": input})
    assert r.status_code in (200, 201), r.text
    return str(r.json()["run_id"])


def _job(env: WorkflowEnv, c: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Start a bulk job over the API, pump the worker through its pages, and answer the
    job as `GET /bulk-actions/{id}` shows it."""
    r = c.post("/bulk-actions", json=body)
    assert r.status_code == 202, r.text
    env.advance(0)
    job: dict[str, Any] = c.get(f"/bulk-actions/{r.json()['job_id']}",
                                params={"limit": 1000}).json()
    assert job["status"] == "done", job
    return job


def _status(c: httpx.Client, run_id: str) -> str:
    return str(c.get(f"/runs/{run_id}").json()["status"])


def test_a_bulk_cancel_stops_a_run_at_every_kind_of_wait(
        env: tuple[WorkflowEnv, httpx.Client]) -> None:
    e, c = env
    waits = {
        "gated": {}, "retrying": {}, "fanned": {"items": [1, 2, 3]}, "locked": {},
        "sleeper": {}, "waiter": {}, "parent": {},
    }
    runs = {wf: _start(c, wf, {"wave": "w1", **extra}) for wf, extra in waits.items()}
    in_line = _start(c, "after-lock", {"wave": "w2"})  # waits for `locked`'s lock
    e.advance(0)
    assert {wf: _status(c, r) for wf, r in runs.items()} == dict.fromkeys(runs, "running")
    [child] = c.get(f"/runs/{runs['parent']}/children").json()["children"]
    assert CALLS.of(child["run_id"]) == ["before"]  # the child sleeps its day
    assert CALLS.of(in_line) == []
    assert [g["run_id"] for g in e.rt.approvals.inbox()] == [runs["gated"]]
    called = {r: list(CALLS.of(r)) for r in [*runs.values(), child["run_id"]]}

    job = _job(e, c, {"action": "cancel", "q": "input.wave = w1", "reason": "wave w1"})
    assert job["counts"] == {"done": 7, "skipped": 0, "failed": 0}, job["runs"]
    assert {o["run_id"] for o in job["runs"]} == set(runs.values())
    e.advance("3d")  # every backoff, sleep and gate deadline falls due: none acts

    for wf, run_id in runs.items():
        view = c.get(f"/runs/{run_id}").json()
        assert (wf, view["status"], view["kill_reason"]) == (wf, "killed", "wave w1")
    # A child run is cancelled with its parent, and nothing ran after the cancel.
    assert _status(c, child["run_id"]) == "killed"
    assert {r: CALLS.of(r) for r in called} == called
    # The gate is closed: off the inbox, an answer refused.
    assert e.rt.approvals.inbox() == []
    answer = c.post(f"/runs/{runs['gated']}/approvals/ask", json={"approved": True})
    assert answer.status_code == 409, answer.text
    # The lock the cancelled run held passed to the run waiting in its line.
    assert _status(c, in_line) == "success" and CALLS.of(in_line) == ["hold"]


def test_a_bulk_rerun_takes_runs_a_rejected_gate_or_a_timeout_ended(
        env: tuple[WorkflowEnv, httpx.Client]) -> None:
    e, c = env
    rejected = [_start(c, "gated", {"n": i}) for i in range(2)]
    late = [_start(c, "timed", {"n": i}) for i in range(2)]
    fine = _start(c, "timed", {"quick": True})
    e.advance(0)
    for run_id in rejected:
        r = c.post(f"/runs/{run_id}/approvals/ask",
                   json={"approved": False, "comment": "not today"})
        assert r.status_code == 200, r.text
    e.run_until_idle()  # the timed runs sleep past their hour
    assert [_status(c, r) for r in rejected] == ["killed", "killed"]
    assert [_status(c, r) for r in late] == ["failed", "failed"]
    assert _status(c, fine) == "success"

    # Found by what ended them; a cancel of finished runs does nothing.
    found = c.get("/runs", params={"q": 'error ~ "rejected"', "limit": 10}).json()["runs"]
    assert sorted(r["run_id"] for r in found) == sorted(rejected)
    job = _job(e, c, {"action": "cancel", "q": 'error ~ "rejected"'})
    assert job["counts"] == {"done": 0, "skipped": 2, "failed": 0}
    assert {o["detail"] for o in job["runs"]} == {"already killed"}

    job = _job(e, c, {"action": "rerun", "q": "error ~ execution_timeout",
                      "input": {"quick": True}})
    assert job["counts"] == {"done": 2, "skipped": 0, "failed": 0}, job["runs"]
    e.run_until_idle()
    for outcome in job["runs"]:
        view = c.get(f"/runs/{outcome['new_run_id']}").json()
        assert (view["status"], view["rerun_of"]) == ("success", outcome["run_id"])
        assert view["output"] == "in time"

    # A rerun of the rejected runs asks again: each new run's gate is in the inbox.
    job = _job(e, c, {"action": "rerun", "run_ids": rejected})
    new = {o["new_run_id"] for o in job["runs"]}
    assert len(new) == 2 and {g["run_id"] for g in e.rt.approvals.inbox()} == new


def test_a_bulk_resume_calls_paused_durable_runs_again_after_the_fix(
        env: tuple[WorkflowEnv, httpx.Client]) -> None:
    e, c = env
    runs = [_start(c, "shifty", {"n": i}) for i in range(3)]
    e.advance(0)
    SHIFTY["version"] = 2  # a deploy renames the first step: the journals disagree
    for run_id in runs[:2]:
        e.send_signal(run_id, "go")
    e.advance(0)
    paused = c.get("/runs", params={"workflow": "shifty", "status": "paused"}).json()["runs"]
    assert sorted(r["run_id"] for r in paused) == sorted(runs[:2])

    SHIFTY["version"] = 1  # the fix: the code the journals were written by
    job = _job(e, c, {"action": "resume", "workflow": "shifty", "status": "paused"})
    assert job["counts"] == {"done": 2, "skipped": 0, "failed": 0}
    assert {o["detail"] for o in job["runs"]} == {"resumed"}
    e.run_until_idle()
    assert [_status(c, r) for r in runs] == ["success", "success", "running"]
    assert [CALLS.of(r) for r in runs[:2]] == [["one", "two"], ["one", "two"]]
    # The run that was not paused only wakes (it still waits for its signal).
    job = _job(e, c, {"action": "resume", "run_ids": [runs[2]]})
    assert [o["detail"] for o in job["runs"]] == ["woken (not paused)"]
    e.run_until_idle()
    assert _status(c, runs[2]) == "running"


def test_a_bulk_cancel_stops_shell_scripts_and_run_steps(emulator: Emulator,
                                                         tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    # Each writes what it did to `effects`: before its wait, and after it.
    (scripts / "napper.sh").write_text(
        f"orchestrator step before -- sh -c 'echo before >> {effects}'\n"
        "orchestrator sleep 1h\n"
        f"orchestrator step after -- sh -c 'echo after >> {effects}'\n")
    (scripts / "listener.sh").write_text(
        "orchestrator wait signal go\n"
        f"orchestrator step heard -- sh -c 'echo heard >> {effects}'\n")
    host = ScriptHost(secret="script-secret", directory=scripts)
    retried = {"steps": {"sh": {"run": f"echo tried >> {effects}; exit 1",
                                "retry": {"max": 3, "delay": "1h", "maxDelay": "1h"}}}}
    with WorkflowEnv(host.app, secret="script-secret", emulator=emulator,
                     capabilities=("shell",), dags={"retried": retried}) as e, \
            http_api(e) as c:
        runs = [_start(c, wf, {"wave": "s1"}) for wf in ("napper", "listener", "retried")]
        e.advance(0)
        assert [_status(c, r) for r in runs] == ["running"] * 3
        assert sorted(effects.read_text().split()) == ["before", "tried"]

        job = _job(e, c, {"action": "cancel", "q": "input.wave = s1"})
        assert job["counts"] == {"done": 3, "skipped": 0, "failed": 0}, job["runs"]
        with pytest.raises(Conflict, match="already finished"):
            e.send_signal(runs[1], "go")  # the run is over
        e.advance("1d")
        assert [_status(c, r) for r in runs] == ["killed"] * 3
        assert sorted(effects.read_text().split()) == ["before", "tried"]
