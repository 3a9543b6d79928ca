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
from tests.support.cli import cli
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
  nightly:
    schedule: { cron: "0 3 * * *" }
    on: [{ event: report.asked }]
    steps:
      one: { backend: fn, route: /echo }
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


def test_the_workflows_page_is_a_row_a_workflow_with_a_sparkline_of_its_runs(
        stack: tuple[Harness, str], monkeypatch: pytest.MonkeyPatch) -> None:
    h, url = stack
    made = []
    for ok in (False, False, True):
        made.append(h.start("fixable", {"ok": ok}))
        h.wait(made[-1])
    # The page reads each workflow's runs with one listing query (counted on the real
    # store: the call goes through).
    listed: list[str | None] = []
    real = h.rt.store.runs.list_runs

    def counting(workflow: str | None, *args: Any, **kwargs: Any) -> Any:
        listed.append(workflow)
        return real(workflow, *args, **kwargs)

    monkeypatch.setattr(h.rt.store.runs, "list_runs", counting)
    page = httpx.get(f"{url}/ui/workflows").text
    assert sorted(listed) == ["fixable", "hello", "nightly"]
    rows = re.findall(r'<tr id="wf-([^"]+)">(.*?)</tr>', page, re.S)
    assert [name for name, _ in rows] == ["hello", "fixable", "nightly"]
    hello, fixable, nightly = (row for _, row in rows)
    # Its sparkline: a bar a run, oldest first, coloured by status, each titled.
    spark = re.search(r'<svg class="spark"[^>]*aria-label="([^"]*)">(.*?)</svg>', fixable, re.S)
    assert spark is not None
    assert html.unescape(spark.group(1)).startswith(
        "The last 3 runs of fixable, oldest first: 2 failed, 1 success; the longest took")
    bars = re.findall(r'<rect class="s-(\w+)"[^>]*><title>([^<]*)</title>', spark.group(2))
    assert [s for s, _ in bars] == ["failed", "failed", "success"]
    assert [title.rsplit(" · ", 1)[1] for _, title in bars] == made
    assert "33% of 3 succeeded" in fixable and made[-1] in fixable
    assert 'class="spark"' not in hello and "no run yet" in hello and "API only" in hello
    # Its actions are all there: the start form (folded), its runs, its graph.
    assert 'action="/ui/workflows/fixable/start"' in fixable
    assert 'href="/ui/runs?workflow=fixable"' in fixable and "Graph (3 steps)" in fixable
    # A schedule's buttons, and its events, in its Triggers.
    assert "0 3 * * *" in nightly and "event <code>report.asked</code>" in nightly
    for action in ("pause", "trigger"):
        assert f'action="/ui/workflows/nightly/schedule/{action}"' in nightly
    paused = httpx.post(f"{url}/ui/workflows/nightly/schedule/pause")
    assert paused.status_code == 303
    again = httpx.get(f"{url}/ui/workflows").text
    assert 'action="/ui/workflows/nightly/schedule/resume"' in again
    assert "<strong>paused</strong>" in again
    started = httpx.post(f"{url}/ui/workflows/hello/start", data={"input": "{}"})
    assert started.status_code == 303 and "done=started" in started.headers["location"]


def test_a_rerun_marks_the_steps_it_carried_over_in_its_view_page_and_cli(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    bad = h.start("fixable", {"ok": False})
    assert h.wait(bad)["status"] == "failed"
    new = h.rt.runs.rerun(bad, input={"ok": True})[0].run_id
    assert h.wait(new)["status"] == "success"
    # The view names the run a carried-over step came from; steps run again name none.
    steps = {s["step"]: s for s in httpx.get(f"{url}/runs/{new}").json()["steps"]}
    assert steps["fetch"]["reused_from"] == bad
    assert "reused_from" not in steps["check"] and "reused_from" not in steps["publish"]
    assert "reused_from" not in httpx.get(f"{url}/runs/{bad}").json()["steps"][0]
    # The page: its box dashed and saying so, a note across its timeline row, a legend.
    page = html.unescape(httpx.get(f"{url}/ui/runs/{new}?step=fetch").text)
    boxes = dict(re.findall(r'aria-label="(\w+): success[^"]*">\s*<rect class="([^"]*)"', page))
    assert "reused" in boxes["fetch"].split() and "reused" not in boxes["check"].split()
    assert f'aria-label="fetch: success, reused from {bad}"' in page
    assert "↺ reused, not run again" in page
    notes = re.findall(r'<text class="reused-note"[^>]*>([^<]*)</text>', page)
    assert notes == [f"↺ reused from {bad}, not run again"]
    assert "reused from <a class=\"id\"" in page  # the legend, linking that run
    assert f"<dt>Reused from</dt><dd><a class=\"id\" href=\"/ui/runs/{bad}?step=fetch\">" in page
    # The CLI's diagram and timeline mark it too (the same view).
    shown = cli("show", new, "--url", url, "--ascii")
    assert shown.exit_code == 0, shown.output
    assert re.search(r"\|\s+reused\s+\|", shown.output), shown.output
    assert re.search(r"\|\s+done\s+\|", shown.output), shown.output  # check, publish: run
    timeline = cli("show", new, "--timeline", "--url", url).output
    rows = {line.split()[0]: line for line in timeline.splitlines() if line[:1].isalpha()}
    assert rows["fetch"].endswith("ok reused") and "#" not in rows["fetch"], timeline
    assert "reused" not in rows["check"] and "#" in rows["check"], timeline
