"""The operator's console in a real browser (headless Debian chromium driven by
Playwright, the API over HTTP on moto, the test functions on uvicorn): find runs by what
they carried with the search box, then tick them, or take every run matching, and
cancel or rerun them through the confirmation page to the job's page; all of it by
keyboard, and at a phone's width. Screenshots of the search and the job are saved."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.browser import open_browser, shot, signed_in
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  orders:
    steps:
      check: { backend: fn, route: /gate, retry: { max: 0 } }
  held:
    concurrency: { limit: 1 }
    steps:
      nap: { backend: fn, route: /slow, payload: { seconds: 20 } }
"""
WAIT = 20_000


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, api_auth=True)
    h.start_workers(1, threads=8)
    with BackgroundServer(create_app(h.rt, badge="DEV")) as server:
        yield h, server.url


def _open(h: Harness, url: str, browser: Any, width: int, height: int) -> Any:
    return signed_in(browser, h, url, width=width, height=height, timeout=WAIT)


def test_search_then_rerun_every_match_by_keyboard(stack: tuple[Harness, str]) -> None:
    h, url = stack
    acme = [h.start("orders", {"ok": False, "customer": "acme", "order": 1040 + i})
            for i in range(3)]
    other = h.start("orders", {"ok": False, "customer": "globex", "order": 2000})
    for r in [*acme, other]:
        assert h.wait(r)["status"] == "failed"
    with open_browser() as browser:
        p = _open(h, url, browser, 1280, 900)
        box = p.locator("form.filters input[name=q]")
        box.focus()
        p.keyboard.type('input.customer = "acme"')
        p.keyboard.press("Enter")
        p.wait_for_url(re.compile(r".*q=input\.customer.*"))
        for r in acme:
            p.locator("td.id a", has_text=r).wait_for()
        assert p.locator("td.id a", has_text=other).count() == 0
        shot(p, "runs-search")
        # A query it cannot read says why, on the page.
        p.fill("form.filters input[name=q]", "customer = acme")
        p.keyboard.press("Enter")
        p.locator(".notice.bad", has_text="a path starts with one of input").wait_for()
        p.fill("form.filters input[name=q]", 'input.customer = "acme"')
        p.keyboard.press("Enter")
        p.locator("td.id a", has_text=acme[0]).wait_for()

        # Every run matching, rerun with a new input: all by keyboard.
        p.locator("details.bulk summary").focus()
        p.keyboard.press("Enter")
        p.locator("input[name=which][value=matching]").check()
        p.select_option("select[name=action]", "rerun")
        p.fill("#bulk textarea[name=input]", '{"ok": true}')
        p.locator("#bulk button[type=submit]").focus()
        p.keyboard.press("Enter")
        p.locator("h1", has_text="Rerun 3 runs?").wait_for()
        p.keyboard.press("Enter")  # the confirm button has the focus
        p.wait_for_url(re.compile(r".*/ui/bulk/bulk-.*"))
        p.locator("#job .jobstate", has_text="done").wait_for()
        text = " ".join(p.locator("#job").inner_text().split())
        assert "3 of 3 runs · 3 done · 0 skipped · 0 failed" in text
        shot(p, "bulk-job")
        new = [a.inner_text() for a in p.locator("td.id.opt a").all()]
        assert len(new) == 3
        for r in new:
            assert h.wait(r)["status"] == "success"


def test_tick_queued_runs_and_cancel_them_at_a_phones_width(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    runs = [h.start("held", {"batch": "b1", "i": i}) for i in range(4)]
    with open_browser() as browser:
        p = _open(h, url, browser, 390, 844)
        p.goto(f"{url}/ui/runs?q=input.batch+%3D+b1")
        for r in runs:
            p.locator("td.id a", has_text=r).wait_for()
        width = p.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the runs page is {width} px wide at 390"
        for r in runs[:2]:  # the two oldest
            p.locator(f"input[name=run_id][value='{r}']").check()
        p.locator("details.bulk summary").click()
        p.fill("#bulk input[name=reason]", "wrong batch")
        p.locator("#bulk button[type=submit]").click()
        p.locator("h1", has_text="Cancel 2 runs?").wait_for()
        assert p.evaluate("document.documentElement.scrollWidth") <= 390
        p.locator("form[action='/ui/bulk/confirm'] button").click()
        p.locator("#job .jobstate", has_text="done").wait_for()
        assert p.evaluate("document.documentElement.scrollWidth") <= 390
        shot(p, "bulk-job-phone")
    for r in runs[:2]:
        view = h.wait(r)
        assert view["status"] == "killed" and view["kill_reason"] == "wrong batch"
    assert h.rt.runs.get(runs[3]).status.value in ("queued", "running")
