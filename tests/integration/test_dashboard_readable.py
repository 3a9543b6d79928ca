"""The dashboard's pages read as an operator reads them, over real HTTP (moto, the test
functions on uvicorn): an error is its code and message first, its JSON folded beneath
and drawn once a page; a rerun marks the steps it carried over; the workflows page is a
table, a row a workflow, with a sparkline of its recent runs. The browser tests
(tests/browser) look at the same pages in chromium."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
  fixable:
    steps:
      fetch: { backend: fn, route: /echo }
      check: { backend: fn, route: /check, dependsOn: [fetch] }
      publish: { backend: fn, route: /echo, dependsOn: [check] }
"""


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def _pres(page: str) -> list[str]:
    return [html.unescape(p) for p in re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)]


def test_a_failed_runs_error_is_its_message_first_and_its_json_once(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    run_id = h.start("fixable", {"ok": False})
    assert h.wait(run_id)["status"] == "failed"
    page = httpx.get(f"{url}/ui/runs/{run_id}").text
    text = html.unescape(page)
    # The run's error, then its failed step's (selected by default): each its code and
    # its message, in words.
    assert ('<code class="error-code">step_failed</code> step check failed: input.ok must'
            ' be true</p>') in text
    assert '<code class="error-code">http_error</code> input.ok must be true</p>' in text
    # The JSON once, folded: the run's error, which carries the step's as its reason.
    shown = [p for p in _pres(page) if "must be true" in p]
    assert len(shown) == 1, shown
    assert '"reason"' in shown[0] and '"status": 400' in shown[0]
    folded = re.findall(r"<details><summary>The error as JSON</summary><pre>", page)
    assert len(folded) == 1
    # Another step selected (one that succeeded): no error of its own, the run's still once.
    other = httpx.get(f"{url}/ui/runs/{run_id}?step=fetch").text
    assert len([p for p in _pres(other) if "must be true" in p]) == 1
