"""The queues and workers page (/ui/health) in a real browser (headless Debian chromium
through Playwright, the API over HTTP, moto): the queues' depths with the dead letters
linked, the worker and the sweeper alive with their heartbeats, the backends' limits; a
worker started while the page is open shows up without a reload; the page fits a phone
and logs no console error."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.browser import dashboard_page, shot
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}", limits: { concurrency: 2, rate: 50/1s } }
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
"""

WAIT = 20_000  # ms


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, api_auth=True, heartbeat_interval=0.5)
    h.start_workers(1, threads=2)
    h.start_sweeper()
    with BackgroundServer(create_app(h.rt, badge="DEV")) as server:
        yield h, server.url


@pytest.fixture
def page(stack: tuple[Harness, str]) -> Iterator[Any]:
    h, url = stack
    with dashboard_page(h, url, next_path="/ui/health", timeout=WAIT) as p:
        yield p


def test_the_health_page_shows_queues_processes_and_backends_and_fits_a_phone(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    assert h.wait(h.start("hello", {}))["status"] == "success"
    page.goto(f"{url}/ui/health")
    assert page.locator("nav a[aria-current=page]").inner_text() == "Health"
    queues = page.get_by_role("table", name="Queues")
    assert [r.inner_text().split("\t")[0].strip() for r in queues.locator("tr").all()[1:]] == [
        "dispatch", "timer", "dead letters"]
    assert page.locator("a", has_text="look and redrive").get_attribute("href") == "/ui/dlq"
    assert page.locator("[data-dead-letters]").inner_text() == "0"
    # The worker and the sweeper, alive (the page refreshes itself every 5 s).
    alive = page.get_by_role("table", name="Processes alive")
    alive.locator("tr", has_text="sweeper").first.wait_for()
    # Its beat after the run tells the attempt it made (shown at the next refresh).
    alive.locator("tr", has_text="worker").filter(has_text="attempts 1").first.wait_for()
    backends = page.get_by_role("table", name="Backends").locator("tr", has_text="fn")
    assert re.search(r"fn\s+0\s+2\s+50/1s", backends.inner_text()), backends.inner_text()
    shot(page, "health")
    # A worker started while the page is open shows up on its own.
    second = h.start_workers(1, threads=1)[0]
    page.locator(f"tr[data-process='{second.id}']").wait_for()
    # A phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{url}/ui/health")
    wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert wide <= 0, f"/ui/health is {wide}px wider than a phone"
    shot(page, "health-phone")
    assert errors == []
