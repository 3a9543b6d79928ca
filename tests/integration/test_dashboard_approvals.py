"""The dashboard's approvals inbox over real HTTP: the open gates across runs with their
prompts, answered from the page as the signed-in key's name; a second answer from a
stale page is refused with the reason and changes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.harness import Harness, steps_of

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  gated:
    steps:
      ask: { approval: { prompt: "Refund order 1042, EUR 480?", timeout: 1h } }
      go: { backend: fn, route: /echo, dependsOn: [ask] }
"""


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str, str]]:
    h: Harness = harness_factory(MANIFEST, api_auth=True)
    h.start_workers()
    key = ApiKeys(h.rt.control).create("grace", time.time())
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url, key


def gates_open(h: Harness, n: int) -> None:
    deadline = time.monotonic() + 15
    while len(h.rt.approvals.inbox()) < n:
        assert time.monotonic() < deadline, "the gates never opened"
        time.sleep(0.02)


def test_the_inbox_lists_open_gates_and_answers_them(stack: tuple[Harness, str, str]) -> None:
    h, url, key = stack
    # The inbox lists gates by when they opened, and the worker opens two queued runs'
    # gates on threads of its own, in no set order: the second run starts once the first
    # one's gate is open, so its gate is surely the younger.
    first = h.start("gated", {})
    gates_open(h, 1)
    second = h.start("gated", {})
    gates_open(h, 2)
    with httpx.Client(base_url=url, cookies={"orch_ui": key}) as c:
        page = c.get("/ui/approvals").text
        assert page.index(first) < page.index(second)  # oldest first
        assert "Refund order 1042, EUR 480?" in page and 'aria-current="page">Approvals' in page
        done = c.post(f"/ui/approvals/{first}/ask", data={"decision": "approve",
                                                          "comment": "ok"})
        assert done.status_code == 303 and "done=" in done.headers["location"]
        stale = c.post(f"/ui/approvals/{first}/ask", data={"decision": "reject"})
        assert "was+approved+by+grace" in stale.headers["location"]
        no = c.post(f"/ui/approvals/{second}/ask", data={"decision": "reject",
                                                         "comment": "no"})
        assert "done=" in no.headers["location"]
        bad = c.post(f"/ui/approvals/{second}/ask", data={"decision": "maybe"})
        assert "decision%3A+approve+or+reject" in bad.headers["location"]
        assert "No approval is waiting" in c.get("/ui/approvals").text
    view = h.wait(first)
    assert view["status"] == "success"
    assert steps_of(view)["ask"]["output"]["by"] == "grace"
    assert h.wait(second)["error"]["reason"] == "approval ask rejected by grace: no"
