"""A workflow's page (/ui/workflows/NAME, issue 42 section 3) in a real browser (headless
Debian chromium through Playwright, the API over HTTP, moto): reached from the Workflows
page by its name; its charts drawn, titled, with the numbers in a table; the runs that
succeeded and failed on the test functions counted (added by the worker's heartbeat);
the Day/Week switch worked by keyboard; the failures grouped by error code with links
to the newest run and to the failed runs; the triggers; it fits a phone and logs no
console error. Earlier hours are seeded into the hourly items (as other processes'
beats would have added them), so the charts have a day to draw."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.hourly_counts import HOUR
from orchestrator.adapters.tallies import bucket_attr
from orchestrator.api.app import create_app
from orchestrator.services.health.workflow_stats import WINDOWS, WorkflowStats
from tests.support.browser import dashboard_page, shot
from tests.support.harness import Harness
from tests.support.polling import until

MANIFEST = """
backends:
  fn: { url: "${FN}" }
webhooks:
  checkout-hook: { workflow: checkout, verify: { scheme: none } }
workflows:
  checkout:
    description: Checks an order, then confirms it
    on: [{ event: order.paid }]
    steps:
      check: { backend: fn, route: /check }
      confirm: { backend: fn, route: /echo, dependsOn: [check] }
"""

WAIT = 20_000  # ms


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, api_auth=True, heartbeat_interval=0.3)
    h.start_workers(1, threads=2)
    with BackgroundServer(create_app(h.rt, badge="DEV")) as server:
        yield h, server.url


@pytest.fixture
def page(stack: tuple[Harness, str]) -> Iterator[Any]:
    h, url = stack
    with dashboard_page(h, url, next_path="/ui/workflows", timeout=WAIT) as p:
        yield p


def seed_earlier_hours(h: Harness) -> None:
    now = h.rt.clock()
    for back in range(1, 20):
        ok, bad = 3 + back % 5, back % 3
        h.rt.store.hourly.add("checkout", {
            "started": ok + bad, "finished_success": ok, "finished_failed": bad,
            bucket_attr(2): 2 * ok, bucket_attr(4): ok, bucket_attr(6): back % 4,
            "duration_count": 3 * ok + back % 4}, now - back * HOUR)


def test_the_workflow_page_charts_the_day_and_week_and_groups_the_failures(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    ok = [h.start("checkout", {"ok": True}) for _ in range(3)]
    bad = [h.start("checkout", {"ok": False}) for _ in range(2)]
    assert [h.wait(r)["status"] for r in ok] == ["success"] * 3
    assert [h.wait(r)["status"] for r in bad] == ["failed"] * 2
    stats = WorkflowStats(h.rt.store, h.rt.clock)
    until("the runs counted by a beat",
          lambda: sum(stats.read("checkout", WINDOWS["day"])["totals"]["finished"].values())
          == 5, timeout=20)
    seed_earlier_hours(h)
    # From the Workflows page, by the workflow's name.
    page.get_by_role("link", name="checkout", exact=True).click()
    page.wait_for_url(re.compile(r".*/ui/workflows/checkout$"))
    assert page.locator("nav[aria-label=Sections] a[aria-current=page]").inner_text() == \
        "Workflows"
    # Three charts, each an image with its title; the bars are the runs.
    charts = page.locator("figure.wfp-chart svg[role=img]")
    assert charts.count() == 3
    titles = [charts.nth(i).locator("title").first.text_content() for i in range(3)]
    assert titles == ["Runs ended, by status", "Success rate", "Step latency p50 and p95"]
    assert page.get_by_role("img", name="Success rate").is_visible()
    last = page.locator("#chart-runs rect.wfp-bar").last
    assert last.get_attribute("data-status") in ("success", "failed")
    assert page.locator("#chart-latency polyline.wfp-p95").count() >= 1
    shot(page, "workflow")
    # The numbers in a table, behind a disclosure.
    page.get_by_text("The numbers, bucket by bucket").click()
    rows = page.get_by_role("table", name="Numbers per bucket").locator("tbody tr, tr")
    assert rows.count() >= 24
    started = int(page.locator("[data-started]").inner_text())
    assert started >= 5 + 3  # this hour's runs and the seeded ones
    # The failures, by the failing step's code, linked.
    group = page.locator("li[data-code=http_error]")
    assert group.locator("[data-count]").inner_text() == "2"
    assert "input.ok must be true" in group.inner_text()
    assert group.locator("a.id").get_attribute("href") == f"/ui/runs/{bad[1]}"
    assert page.get_by_role("link", name="All its failed runs").get_attribute("href") == \
        "/ui/runs?workflow=checkout&status=failed"
    # The triggers.
    assert "order.paid" in page.locator("dl.facts").last.inner_text()
    assert "POST /webhooks/checkout-hook" in page.locator("dl.facts").last.inner_text()
    # The window switch, by keyboard: Tab from Day reaches Week, Enter follows it.
    day = page.get_by_role("link", name="Day", exact=True)
    assert day.get_attribute("aria-current") == "page"
    day.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Week"
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/ui/workflows/checkout\?window=week$"))
    week = page.get_by_role("link", name="Week", exact=True)
    assert week.get_attribute("aria-current") == "page"
    assert "7 days, 6 hours" in page.locator("main").inner_text()
    assert int(page.locator("[data-started]").inner_text()) == started
    # A phone: nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{url}/ui/workflows/checkout")
    wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert wide <= 0, f"/ui/workflows/checkout is {wide}px wider than a phone"
    shot(page, "workflow-phone")
    assert errors == []
    # An unknown workflow is a page saying so (a 404).
    assert page.goto(f"{url}/ui/workflows/nope").status == 404
    assert "no workflow named 'nope'" in page.locator("main").inner_text()
