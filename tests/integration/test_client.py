"""orchestrator.client (`Client`, `AsyncClient`) against a real API over HTTP, the durable
workflows of tests/support/durable_fns.py served by a real FunctionApp, the engine on the
emulator: every method, its errors, and reference 003's examples as written there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.client import (
    ApiError,
    AsyncClient,
    Client,
    ConflictError,
    GoneError,
    NotFoundError,
    UnavailableError,
)
from orchestrator.errors import OrchestratorError
from orchestrator.runtime import Runtime
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.cli import cli
from tests.support.durable_fns import HOOK_URLS, LEDGER
from tests.support.harness import Harness

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
  fn: { url: "${FN}" }
workflows:
  chain: { backend: app }
  approval: { backend: app }
  versioned: { backend: app, workflow: versioned, timeout: 30s }
  docapproval: { backend: app }
  parent: { backend: app }
  dag:
    steps:
      one: { backend: fn, route: /echo }
"""


@pytest.fixture
def api(build_harness: Any, app_url: str, testfns: str, tmp_path: Any
        ) -> Iterator[tuple[Harness, str]]:
    h = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns})
    h.start_workers(1, threads=4)
    h.start_sweeper()
    try:
        with BackgroundServer(create_api(h.rt)) as server:
            yield h, server.url
    finally:
        h.close()


@pytest.fixture
def client(api: tuple[Harness, str]) -> Iterator[Client]:
    with Client(api[1]) as c:
        yield c


def until(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def waiting_for_signal(h: Harness, run_id: str, name: str) -> None:
    """Until the run's workflow waits for signal `name`, its driver held by nobody."""
    def check() -> bool:
        row = h.rt.store.drivers.get_driver(run_id)
        w = None if row is None or row.lease_owner else row.waiting
        return bool(w and w["kind"] == "signal" and w["name"] == name)
    until(check)


# ---- runs ----------------------------------------------------------------------------------


def test_trigger_get_run_and_wait(api: tuple[Harness, str], client: Client) -> None:
    started = client.trigger("chain", {"steps": 2})
    assert set(started) == {"run_id", "workflow", "status", "created", "duplicate",
                            "debounced", "outcome"}
    assert started["workflow"] == "chain" and started["created"] is True
    done = client.wait(started["run_id"], timeout=30)
    assert done["status"] == "success" and done["output"] == {"total": 1}
    assert [s["step"] for s in done["steps"]] == ["add-0", "add-1"]
    alone = client.get_run(started["run_id"], steps=False)
    assert "steps" not in alone and alone["status"] == "success"
    # a long poll on a finished run answers at once
    asked = time.monotonic()
    assert client.get_run(started["run_id"], wait=10)["status"] == "success"
    assert time.monotonic() - asked < 5


def test_trigger_options_run_id_idempotency_key_and_parent(client: Client) -> None:
    mine = client.trigger("chain", {"steps": 1}, run_id="chain-mine")
    assert mine["run_id"] == "chain-mine" and mine["created"] is True
    assert client.trigger("chain", {"steps": 1}, run_id="chain-mine")["created"] is False
    first = client.trigger("chain", {"steps": 1}, idempotency_key="order-7")
    again = client.trigger("chain", {"steps": 1}, idempotency_key="order-7")
    assert again == {**first, "created": False, "status": again["status"],
                     "duplicate": True, "outcome": "duplicate"}
    with pytest.raises(ApiError) as refused:
        client.trigger("chain", {"steps": 2}, idempotency_key="order-7")
    assert refused.value.status == 422 and refused.value.code == "idempotency_key_reused"
    child = client.trigger("chain", {"steps": 1}, parent_run_id="chain-mine")
    assert [c["run_id"] for c in client.children("chain-mine")] == [child["run_id"]]
    assert client.parent(child["run_id"])["run_id"] == "chain-mine"
    with pytest.raises(NotFoundError):
        client.trigger("chain", {}, parent_run_id="no-such-run")
    # the reference's option names, and its list of positional arguments
    ref = client.trigger("chain", [{"steps": 3}], {"runId": "chain-ref"})
    assert ref["run_id"] == "chain-ref"
    assert client.wait("chain-ref", timeout=30)["input"] == {"steps": 3}


def test_trigger_input_and_option_mistakes_are_caught_before_sending(client: Client) -> None:
    with pytest.raises(ValueError, match="takes one payload, not 2"):
        client.trigger("chain", [{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match="unknown 'runID'"):
        client.trigger("chain", {}, {"runID": "x"})
    with pytest.raises(ValueError, match="unknown 'workflow_name'"):
        client.list_runs(params={"workflow_name": "chain"})
    with pytest.raises(ValueError, match="unknown 'signal_name'"):
        client.hooks.create({"run_id": "x", "signal_name": "approve"})
    assert client.list_runs()["runs"] == []  # nothing was started


def test_list_runs_filters_and_pages(client: Client) -> None:
    ids = [client.trigger("chain", {"steps": 1})["run_id"] for _ in range(3)]
    other = client.trigger("approval", {})["run_id"]
    for run_id in ids:
        client.wait(run_id, timeout=30)
    chains = client.list_runs("chain")
    assert {r["run_id"] for r in chains["runs"]} == set(ids) and chains["next_cursor"] is None
    page = client.list_runs("chain", limit=2)
    rest = client.list_runs("chain", cursor=page["next_cursor"])
    assert len(page["runs"]) == 2 and rest["next_cursor"] is None
    assert sorted(r["run_id"] for r in page["runs"] + rest["runs"]) == sorted(ids)
    running = client.list_runs(params={"workflowName": "approval", "status": "running",
                                       "limit": 20})
    assert [r["run_id"] for r in running["runs"]] == [other]
    succeeded = client.list_runs(status="success", limit=100)["runs"]
    assert {r["run_id"] for r in succeeded} == set(ids)
    with pytest.raises(ApiError) as bad:
        client.list_runs(status="completed")
    assert bad.value.status == 400 and "completed" in bad.value.message


def test_cancel_run(api: tuple[Harness, str], client: Client) -> None:
    h, _ = api
    run_id = client.trigger("approval", {})["run_id"]
    waiting_for_signal(h, run_id, "approve")
    client.cancel_run(run_id, reason="No longer needed")
    done = client.wait(run_id, timeout=30)
    assert done["status"] == "killed" and done["kill_reason"] == "No longer needed"
    with pytest.raises(ConflictError) as again:
        client.cancel_run(run_id)
    assert again.value.code == "run_finished" and again.value.status == 409
    with pytest.raises(NotFoundError):
        client.cancel_run("no-such-run")


# ---- signals, resume, reset ----------------------------------------------------------------


def test_send_signal(client: Client) -> None:
    run_id = client.trigger("approval", {"twice": True})["run_id"]
    sent = client.send_signal(run_id, "approve", {"n": 1}, idempotency_key="k1")
    assert sent["duplicate"] is False and sent["signal"] == "approve"
    assert client.send_signal(run_id, "approve", {"n": 1}, idempotency_key="k1") == {
        **sent, "duplicate": True}
    with pytest.raises(ApiError) as not_object:
        client.send_signal(run_id, "approve", [1, 2])  # type: ignore[arg-type]
    assert not_object.value.status == 422 and not_object.value.code == "invalid_body"
    client.send_signal(run_id, "approve")  # no payload: {}
    assert client.wait(run_id, timeout=30)["output"] == {"first": {"n": 1}, "second": {}}
    with pytest.raises(ConflictError, match="already finished"):
        client.send_signal(run_id, "approve", {})
    with pytest.raises(NotFoundError) as unknown:
        client.send_signal("no-such-run", "approve", {})
    assert unknown.value.code == "not_found" and unknown.value.status == 404
    dag = client.trigger("dag", {})["run_id"]
    with pytest.raises(ConflictError, match="only durable workflows take signals"):
        client.send_signal(dag, "approve", {})


def test_resume_run_after_a_pause_and_reset_run(api: tuple[Harness, str],
                                                client: Client) -> None:
    h, _ = api
    run_id = client.trigger("versioned", {})["run_id"]
    waiting_for_signal(h, run_id, "finish")
    out = client.reset_run(run_id, 1)
    assert out == {"run_id": run_id, "reset_to": 1, "forgotten": 1, "was_paused": False}
    until(lambda: LEDGER.bodies(run_id) == ["one", "two", "two"])
    waiting_for_signal(h, run_id, "finish")
    LEDGER.version[run_id] = 2  # a deploy renames the second step: a replay mismatch
    client.send_signal(run_id, "finish")
    # (`wait` would see the pause only when its long poll ends: the API's poll holds on)
    until(lambda: client.get_run(run_id, steps=False)["status"] == "paused")
    paused = client.get_run(run_id)
    assert paused["paused"]["code"] == "replay_mismatch"
    assert [r["run_id"] for r in client.list_runs(status="paused")["runs"]] == [run_id]
    LEDGER.version[run_id] = 1  # the fix
    assert client.resume_run(run_id) == {"run_id": run_id, "resumed": True,
                                         "was_paused": True}
    assert client.wait(run_id, timeout=30)["output"] == {"done": "two"}
    with pytest.raises(ConflictError, match="already finished"):
        client.resume_run(run_id)
    with pytest.raises(ApiError) as negative:
        client.reset_run("no-such-run", -1)
    assert negative.value.status == 422 and "to" in negative.value.message
    with pytest.raises(NotFoundError):
        client.reset_run("no-such-run", 0)


# ---- children, events, hooks ---------------------------------------------------------------


def test_children_and_parent(client: Client) -> None:
    run_id = client.trigger("parent", {})["run_id"]
    assert client.wait(run_id, timeout=30)["status"] == "success"
    kids = client.children(run_id)
    assert [k["workflow"] for k in kids] == ["chain", "approval"]
    assert set(kids[0]) >= {"run_id", "workflow", "status", "created_at", "trigger"}
    for kid in kids:
        assert client.parent(kid["run_id"])["run_id"] == run_id
    assert client.parent(run_id) is None
    assert client.children(kids[0]["run_id"]) == []
    with pytest.raises(NotFoundError):
        client.children("no-such-run")
    with pytest.raises(NotFoundError):
        client.parent("no-such-run")


def test_create_event_list_events_and_history(client: Client) -> None:
    run_id = client.trigger("chain", {"steps": 1})["run_id"]
    client.wait(run_id, timeout=30)
    made = client.create_event(run_id, "step-started", {"n": 1})
    assert set(made) == {"id", "event_type", "payload", "at"}
    client.create_event(run_id, event_type="step-completed", payload={"n": 1})
    events = client.list_events(run_id)
    assert [(e["event_type"], e["payload"]) for e in events] == [
        ("step-started", {"n": 1}), ("step-completed", {"n": 1})]
    assert any(e["type"] == "run.success" for e in client.history(run_id))
    with pytest.raises(NotFoundError):
        client.create_event("no-such-run", "x")


def test_hooks_create_and_execute(api: tuple[Harness, str], client: Client) -> None:
    h, url = api
    run_id = client.trigger("approval", {})["run_id"]
    made = client.hooks.create(run_id=run_id, signal="approve", metadata={"via": "hook"},
                               ttl=600)
    assert made["url"] == f"{url}/hooks/{made['token']}" and made["run_id"] == run_id
    # by its URL, with a key-less client: the token is the credential
    with Client(url) as anyone:
        sent = anyone.hooks.execute(made["url"], {"ok": 1})
    assert sent["run_id"] == run_id and sent["duplicate"] is False
    assert client.hooks.execute(made["token"], {"ok": 1})["duplicate"] is True
    with pytest.raises(GoneError) as used:
        client.hooks.execute(made["token"], {"ok": 2})
    assert used.value.status == 410 and used.value.code == "hook_gone"
    with pytest.raises(NotFoundError):
        client.hooks.execute("x" * 43, {})
    assert client.wait(run_id, timeout=30)["output"] == {"decision": {"ok": 1, "via": "hook"}}
    with pytest.raises(ConflictError, match="already finished"):
        client.hooks.create(run_id=run_id, signal="approve")
    # the token of a hook a workflow made (`ctx.create_hook`), by its path
    doc = client.trigger("docapproval", {"doc": "d-1"})["run_id"]
    waiting_for_signal(h, doc, "doc-approval")
    client.hooks.execute(HOOK_URLS[doc][0], {"approved": True})
    assert client.wait(doc, timeout=30)["output"] == {"published": True, "documentId": "d-1"}


# ---- errors and keys -----------------------------------------------------------------------


def test_errors_carry_the_apis_code_message_and_status(client: Client) -> None:
    with pytest.raises(NotFoundError) as missing:
        client.get_run("no-such-run")
    err = missing.value
    assert isinstance(err, ApiError) and isinstance(err, OrchestratorError)
    assert (err.status, err.code, err.retryable) == (404, "not_found", False)
    assert "no-such-run" in err.message and "HTTP 404, not_found" in str(err)
    with pytest.raises(NotFoundError) as route:
        client.request("GET", "/nowhere")
    assert route.value.code == "not_found"
    assert client.request("GET", "/healthz") == {"ok": True}
    with pytest.raises(UnavailableError) as down, Client("http://127.0.0.1:9") as nobody:
        nobody.get_run("x")
    assert down.value.status is None and down.value.retryable
    assert down.value.code == "api_unavailable"


def _not_json(request: Request) -> PlainTextResponse:
    return PlainTextResponse("<html>bad gateway</html>",
                             status_code=int(request.query_params.get("status", "200")))


def test_an_answer_that_is_not_json_is_an_unavailable_api() -> None:
    app = Starlette(routes=[Route("/runs/{run_id}", _not_json)])
    with BackgroundServer(app) as server, Client(server.url) as c:
        for status in (200, 502):
            with pytest.raises(UnavailableError) as bad:
                c.request("GET", "/runs/x", params={"status": status})
            assert bad.value.status == status and bad.value.code == "bad_response"
            assert "bad gateway" in bad.value.message
        # the CLI, sending through the same client: exit 3, not a traceback
        res = cli("show", "x", "--url", server.url)
        assert res.exit_code == 3 and "not JSON" in res.stderr


def test_the_api_key_is_sent_and_a_missing_one_is_an_error(api: tuple[Harness, str]) -> None:
    h, _ = api
    rt = Runtime.build(h.rt.settings.with_(api_auth=True), h.rt.manifest, clients=h.rt.clients)
    key = ApiKeys(rt.control).create("client", time.time())
    with BackgroundServer(create_api(rt)) as server:
        with Client(server.url) as keyless, pytest.raises(ApiError) as refused:
            keyless.list_runs()
        assert refused.value.status == 401 and refused.value.code == "missing_api_key"
        env = {"ORCHESTRATOR_URL": server.url, "ORCHESTRATOR_API_KEY": key}
        with Client.from_env(env) as keyed:
            run_id = keyed.trigger("approval", {})["run_id"]
            made = keyed.hooks.create(run_id=run_id, signal="approve")
            with Client(server.url) as anyone:  # a hook needs no key
                anyone.hooks.execute(made["token"], {"by": "hook"})
            assert keyed.wait(run_id, timeout=30)["output"] == {"decision": {"by": "hook"}}


# ---- reference 003, as written there ------------------------------------------------------


def test_reference_003_examples_with_the_async_client(api: tuple[Harness, str]) -> None:
    """The examples of reference 003, awaited on `AsyncClient`: only the keys of the
    answers (snake_case) and the statuses (success, killed) are the orchestrator's."""
    _, url = api

    async def examples() -> None:
        async with AsyncClient(url) as client:
            # Triggering Workflows: input as a list of positional arguments
            run = await client.workflow.trigger("approval", [{"userId": "user-123"}])
            assert run["status"] in ("queued", "running")
            run_id = run["run_id"]
            # Custom Run ID, Idempotency
            custom = await client.workflow.trigger("chain", [{"steps": 1}], {
                "runId": "custom-run-id-123",
            })
            assert custom["run_id"] == "custom-run-id-123"
            once = await client.workflow.trigger("chain", [{"steps": 1}], {
                "idempotencyKey": "unique-key-123",
            })
            twice = await client.workflow.trigger("chain", [{"steps": 1}], {
                "idempotencyKey": "unique-key-123",
            })
            assert twice["run_id"] == once["run_id"] and twice["created"] is False
            # Parent-Child Workflows: trigger linked, then poll the child
            child_run = await client.workflow.trigger(
                "chain", [{"steps": 1}], {"parentRunId": run_id}
            )
            deadline = time.monotonic() + 30
            while True:
                child = await client.workflow.get_run(child_run["run_id"])
                if child["status"] in ("success", "failed", "killed"):
                    break
                assert time.monotonic() < deadline, child
                await asyncio.sleep(0.1)
            assert child["trigger"]["parent_run_id"] == run_id
            # Sending Signals (one sent before the run waits for it is kept for it)
            await client.workflow.send_signal(run_id, "approve", {
                "approved": True,
                "comment": "Approved for processing",
            })
            done = await client.wait(run_id, timeout=30)
            assert done["output"] == {"decision": {"approved": True,
                                                   "comment": "Approved for processing"}}
            # Workflow Hooks: created from outside the workflow, then executed
            waiting = await client.workflow.trigger("approval", [{}])
            hook = await client.workflow.hooks.create({
                "runId": waiting["run_id"],
                "signalName": "approve",
                "token": "approve-" + waiting["run_id"],
                "metadata": {"documentId": "doc-1"},
            })
            result = await client.workflow.hooks.execute(hook["token"], {
                "approved": True,
                "comment": "Approved for publication",
            })
            assert result["signal"] == "approve" and result["duplicate"] is False
            approved = await client.wait(waiting["run_id"], timeout=30)
            assert approved["output"]["decision"]["documentId"] == "doc-1"
            # Workflow Events
            await client.workflow.create_event(
                run_id,
                event_type="step-started",
                payload={"step": "process-data", "timestamp": int(time.time() * 1000)},
            )
            events = await client.workflow.list_events(run_id)
            assert [e["event_type"] for e in events] == ["step-started"]
            # Monitoring: get a run, list runs, children, parent, cancel
            got = await client.workflow.get_run(run_id)
            assert got["status"] == "success" and got["started_at"] and got["finished_at"]
            assert got["error"] is None
            runs = await client.workflow.list_runs(params={
                "workflowName": "chain",
                "status": "success",
                "limit": 20,
            })
            assert child_run["run_id"] in [r["run_id"] for r in runs["runs"]]
            children = await client.workflow.get_child_workflows(run_id)
            assert [c["run_id"] for c in children] == [child_run["run_id"]]
            parent = await client.workflow.get_parent_workflow(child_run["run_id"])
            assert parent["run_id"] == run_id
            doomed = await client.workflow.trigger("approval", [{}])
            await client.workflow.cancel_run(doomed["run_id"], reason="No longer needed")
            assert (await client.wait(doomed["run_id"], timeout=30))["status"] == "killed"
            # the same errors as the blocking client
            try:
                await client.workflow.get_run("run-id")
            except NotFoundError as exc:
                assert exc.code == "not_found"
            else:
                raise AssertionError("no error for an unknown run")

    asyncio.run(examples())
