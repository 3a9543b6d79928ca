"""Approvals over real HTTP and from the command line: answering by API key (who answered
is the key's name), the refusals (401, 403, 404, 409, 422), the inbox and its filter,
the single-use link for people without a key, and `orchestrator approve|reject|approvals`;
and the races a gate must resolve once: two answers at once, and an answer against the
gate's own timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.approvals import Gate
from orchestrator.api.app import create_app
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.cli import cli, out_json
from tests.support.harness import Harness, steps_of

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  gated:
    steps:
      ask:
        approval: { prompt: "Deploy to prod?", timeout: 1h, approvers: [ada, bob], link: true }
      go: { backend: fn, route: /echo, dependsOn: [ask] }
  open:
    steps:
      ask: { approval: { prompt: "Anyone?", timeout: 1h } }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str, dict[str, str]]]:
    h: Harness = harness_factory(MANIFEST, api_auth=True)
    h.start_workers()
    keys = {name: ApiKeys(h.rt.control).create(name, time.time()) for name in ("ada", "eve")}
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url, keys


def open_gate(h: Harness, workflow: str = "gated") -> str:
    run_id = h.start(workflow, {})
    deadline = time.monotonic() + 15
    while True:
        row = h.rt.store.steps.get_step(run_id, "ask")
        if row is not None and row.waiting is not None and row.lease_owner is None:
            return run_id  # waiting, held by nobody
        assert time.monotonic() < deadline, "the gate never opened"
        time.sleep(0.02)


def as_(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_answering_over_http_and_every_refusal(api: tuple[Harness, str, dict[str, str]]
                                               ) -> None:
    h, url, keys = api
    run_id = open_gate(h)
    path = f"{url}/runs/{run_id}/approvals/ask"
    assert httpx.post(path, json={"approved": True}).status_code == 401
    denied = httpx.post(path, json={"approved": True}, headers=as_(keys["eve"]))
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    bad = httpx.post(path, json={"approved": "yes"}, headers=as_(keys["ada"]))
    assert bad.status_code == 422 and "approved" in bad.json()["error"]["message"]
    extra = httpx.post(path, json={"approved": True, "by": "x"}, headers=as_(keys["ada"]))
    assert extra.status_code == 422 and "by" in extra.json()["error"]["message"]
    missing = httpx.post(f"{url}/runs/{run_id}/approvals/nope", json={"approved": True},
                         headers=as_(keys["ada"]))
    assert missing.status_code == 404
    # The inbox: the gate, its link, for its approvers only.
    inbox = httpx.get(f"{url}/approvals", headers=as_(keys["ada"])).json()["approvals"]
    assert [(g["run_id"], g["step"], g["prompt"]) for g in inbox] == [
        (run_id, "ask", "Deploy to prod?")]
    assert inbox[0]["link"].endswith("/approvals/links/" + inbox[0]["link"].rsplit("/")[-1])
    assert httpx.get(f"{url}/approvals", params={"approver": "eve"},
                     headers=as_(keys["ada"])).json()["approvals"] == []
    ok = httpx.post(path, json={"approved": True, "comment": "ship it"}, headers=as_(keys["ada"]))
    assert ok.status_code == 200
    assert (ok.json()["status"], ok.json()["by"]) == ("approved", "ada")
    again = httpx.post(path, json={"approved": False}, headers=as_(keys["ada"]))
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_answered"
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert steps_of(view)["ask"]["output"]["comment"] == "ship it"


def test_a_link_answers_once_without_a_key(api: tuple[Harness, str, dict[str, str]]) -> None:
    h, url, _ = api
    run_id = open_gate(h)
    link = h.rt.approvals.get(run_id, "ask")["link"]
    token = link.rsplit("/", 1)[-1]
    assert httpx.post(f"{url}/approvals/links/not-a-token",
                      json={"approved": True}).status_code == 404
    done = httpx.post(f"{url}/approvals/links/{token}", json={"approved": True})
    assert done.status_code == 200 and done.json()["by"] == "link"
    again = httpx.post(f"{url}/approvals/links/{token}", json={"approved": False})
    assert again.status_code == 409
    assert h.wait(run_id)["status"] == "success"


def test_the_cli_lists_approves_and_rejects(api: tuple[Harness, str, dict[str, str]]) -> None:
    h, url, keys = api
    first, second = open_gate(h, "open"), open_gate(h, "open")
    key = ["--url", url, "--api-key", keys["ada"]]
    listed = cli("approvals", *key)
    assert listed.exit_code == 0, listed.output
    lines = [line for line in listed.stdout.splitlines() if not line.startswith(" ")]
    assert [line.split()[0] for line in lines] == [first, second]  # oldest first
    assert "Anyone?" in listed.stdout
    assert out_json(cli("approvals", "--json", *key))["approvals"][0]["run_id"] == first
    done = cli("approve", first, "ask", "--comment", "fine", *key)
    assert done.exit_code == 0 and done.stdout.strip() == f"{first}: ask approved by ada"
    twice = cli("approve", first, "ask", *key)
    assert twice.exit_code == 2 and "was approved by ada" in twice.stderr
    no = cli("reject", second, "ask", "--comment", "too risky", *key)
    assert no.exit_code == 0, no.output
    assert h.wait(first)["status"] == "success"
    killed = h.wait(second)
    assert killed["status"] == "killed"
    assert killed["error"]["reason"] == "approval ask rejected by ada: too risky"
    assert cli("approvals", *key).stdout.strip() == "no approvals waiting"
    assert cli("approve", first, "ask", "--url", url).exit_code == 5  # no key: 401


# ---- races: one outcome per gate, forced ------------------------------------------------


def _race(*calls: Any) -> list[Any]:
    """Run `calls` at once, released together by a barrier; their results in order."""
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        out[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _gate(h: Harness, n: int) -> Gate:
    now = time.time()
    gate = Gate(run_id=f"race-{n}-{now}", step="ask", workflow="gated", prompt="?",
                created_at=now, deadline=now + 60)
    return h.rt.store.approvals.open(gate)


def test_two_answers_at_once_resolve_a_gate_once(harness_factory: Any) -> None:
    h: Harness = harness_factory(MANIFEST)
    for n in range(10):
        gate = _gate(h, n)
        now = time.time()
        won = _race(
            lambda g=gate, t=now: h.rt.store.approvals.resolve(g, "approved", t, by="ada"),
            lambda g=gate, t=now: h.rt.store.approvals.resolve(g, "rejected", t, by="bob"))
        assert sorted(won) == [False, True], won
        stored = h.rt.store.approvals.get(gate.run_id, "ask")
        assert stored is not None
        assert (stored.status, stored.by) == (("approved", "ada") if won[0]
                                              else ("rejected", "bob"))
        assert all(g.run_id != gate.run_id for g in h.rt.store.approvals.inbox(now))


def test_an_answer_against_the_timeout_resolves_a_gate_once(harness_factory: Any) -> None:
    h: Harness = harness_factory(MANIFEST)
    for n in range(10):
        gate = _gate(h, 100 + n)
        # The answer sent just before the deadline, the timeout at it: both are
        # eligible on their side; whichever commits first is the outcome.
        won = _race(
            lambda g=gate: h.rt.store.approvals.resolve(g, "approved", g.deadline - 0.001,
                                                        by="ada"),
            lambda g=gate: h.rt.store.approvals.resolve(g, "timed_out", g.deadline))
        assert sorted(won) == [False, True], won
        stored = h.rt.store.approvals.get(gate.run_id, "ask")
        assert stored is not None
        assert stored.status == ("approved" if won[0] else "timed_out")
        assert stored.output()["timed_out"] is (not won[0])
