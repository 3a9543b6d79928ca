"""Issue 41 §5: every flow-control field shows where a workflow is shown: `GET
/workflows` (its `flow`), `orchestrator workflows list` (a line a control) and the
dashboard's workflow page, over real HTTP (uvicorn) on moto."""

from __future__ import annotations

import html
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.harness import Harness

ROOT = Path(__file__).resolve().parents[2]

MANIFEST = """
backends:
  fn: { url: "${FN}" }
  lim: { url: "${FN}", limits: { concurrency: 4, rate: "10/1s" } }
workflows:
  pooled:
    concurrency:
      - { limit: 50 }
      - { limit: 3, key: "${{ input.tenant }}", policy: queue }
    priority: "${{ input.tier }}"
    throttle: { limit: 10, period: 1s }
    steps:
      one: { backend: fn, route: /echo }
  plain:
    steps:
      one: { backend: fn, route: /echo }
  gathered:
    on: { event: order.line }
    batch: { size: 10, timeout: 5s }
    cancelOn: [{ event: order.cancelled, if: "input.events[0].data.order == event.data.order" }]
    steps:
      one: { backend: lim, route: /echo }
"""


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def test_the_flow_controls_show_in_the_api_the_cli_and_the_dashboard(
    stack: tuple[Harness, str],
) -> None:
    _, url = stack
    with httpx.Client(base_url=url) as c:
        listed = {w["name"]: w for w in c.get("/workflows").json()["workflows"]}
        flow = listed["pooled"]["flow"]
        assert flow["concurrency"] == [
            {"group": None, "key": "", "limit": 50, "policy": "queue"},
            {"group": None, "key": "${{ input.tenant }}", "limit": 3, "policy": "queue"}]
        assert flow["priority"] == "${{ input.tier }}"
        assert flow["throttle"]["limit"] == 10
        assert listed["plain"]["flow"] == {}
        gathered = listed["gathered"]["flow"]
        assert gathered["batch"] == {"size": 10, "timeout": 5.0, "key": ""}
        assert gathered["cancelOn"][0]["event"] == "order.cancelled"
        assert gathered["backends"] == {"lim": {"concurrency": 4, "rate": "10/1s"}}
        page = html.unescape(c.get("/ui/workflows").text)
        assert "concurrency 50; 3 per ${{ input.tenant }}" in page
        assert "priority ${{ input.tier }}" in page
        assert "batch 10 events or 5s" in page and "cancel on order.cancelled" in page
        assert "backend lim: concurrency 4, rate 10/1s" in page
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "workflows", "list", "--url", url],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "concurrency 50; 3 per ${{ input.tenant }}" in out.stdout
    assert "throttle 10/1s" in out.stdout
    assert "cancel on order.cancelled if input.events[0].data.order" in out.stdout
