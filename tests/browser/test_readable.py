"""The dashboard read in a real browser (headless Debian chromium, Playwright), against
the real API over HTTP on moto with the test functions on uvicorn: the colours a legend
names are those it explains, a failed run's page states its error once, a rerun marks
what it carried over, the workflows page is a table with sparklines, and every page fits
a phone (390 px) and is worked by keyboard. Screenshots go where the suite's others go
(tests/support/browser.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.services.access.dashboard_logins import DashboardLogins
from tests.support.browser import SHOTS, open_browser
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  report:
    description: Fetch, check, publish.
    steps:
      fetch:   { backend: fn, route: /echo }
      check:   { backend: fn, route: /check, dependsOn: [fetch] }
      publish: { backend: fn, route: /echo, dependsOn: [check] }
  refund:
    steps:
      ask: { approval: { prompt: "Refund order 1042, EUR 480?", timeout: 1h } }
      refund: { backend: fn, route: /echo, dependsOn: [ask] }
"""

WAIT = 20_000  # ms: the longest a page waits for what it should show


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, api_auth=True)
    h.start_workers(1, threads=4)
    with BackgroundServer(create_app(h.rt, badge="DEV")) as server:
        yield h, server.url


@pytest.fixture
def page(stack: tuple[Harness, str]) -> Iterator[Any]:
    h, url = stack
    with open_browser() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        p = context.new_page()
        p.set_default_timeout(WAIT)
        token = DashboardLogins(h.rt.control).create(h.rt.clock())
        p.goto(f"{url}/ui/login?token={token}")
        p.wait_for_url(re.compile(r".*/ui/runs.*"))
        yield p
        context.close()


def _shot(p: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _style(p: Any, selector: str, prop: str) -> str:
    return str(p.locator(selector).first.evaluate(
        f"e => getComputedStyle(e).getPropertyValue({prop!r})"))


def test_a_failed_runs_page_its_error_once_and_legends_in_their_bars_colours(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("report", {"ok": False})
    assert h.wait(run_id)["status"] == "failed"
    page.goto(f"{url}/ui/runs/{run_id}")
    # The error: its code and message in words, its JSON folded and drawn once.
    outcome = page.locator("#run-outcome .error-message")
    assert outcome.inner_text() == "step_failed step check failed: input.ok must be true"
    step = page.locator("section#step .error-message")
    assert step.inner_text() == "http_error input.ok must be true"
    assert page.locator("pre", has_text="input.ok must be true").count() == 1
    assert not page.locator("pre", has_text="input.ok must be true").is_visible()
    page.locator("#run-outcome details summary").click()
    assert page.locator("pre", has_text="input.ok must be true").is_visible()
    _shot(page, "run-failed")
    # Each swatch of the timeline's legend is painted as its bars are.
    fall = "svg[aria-label='Waterfall of attempts']"
    legend = "p[aria-label='Timeline legend']"
    for kind in ("call", "queue"):
        assert (_style(page, f"{legend} rect.{kind}", "fill")
                == _style(page, f"{fall} rect.{kind}", "fill")), kind
    assert _style(page, f"{legend} rect.call", "fill") == "rgb(9, 105, 218)"  # --call
    assert _style(page, f"{legend} rect.queue", "fill") == "rgb(175, 184, 193)"  # --queue
    # (no retry here: the backoff's swatch is its rule's colour, --wait)
    assert _style(page, f"{legend} rect.wait", "stroke") == "rgb(191, 135, 0)"
    # ... and each glyph of the graph's legend as the boxes' glyphs are.
    graph = "svg[aria-label=\"The run's steps and their dependencies\"]"
    for status in ("success", "failed", "skipped"):
        box = _style(page, f"{graph} tspan.s-{status}", "fill")
        assert _style(page, f"p[aria-label='Legend'] .s-{status}", "color") == box, status
    assert (_style(page, f"{graph} tspan.s-failed", "fill")
            != _style(page, f"{graph} tspan.s-success", "fill"))
