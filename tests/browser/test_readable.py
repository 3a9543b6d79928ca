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
from tests.support.browser import dashboard_page, shot
from tests.support.harness import Harness
from tests.support.polling import until

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
  listener:
    on: [{ event: order.placed }]
    steps:
      one: { backend: fn, route: /echo }
""" + "".join(f"""  w{i:02}:
    description: One of many, for the workflows page's height.
    steps:
      one: {{ backend: fn, route: /echo }}
      two: {{ backend: fn, route: /echo, dependsOn: [one] }}
""" for i in range(18))  # 21 workflows in all

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
    # An ended run's page closes its stream once it swapped its live part in: a page is
    # read whole after that, never while a part is being replaced.
    closed = "document.addEventListener('htmx:sseClose', () => { window.sseClosed = true; })"
    with dashboard_page(h, url, timeout=WAIT, init_script=closed) as p:
        yield p


def _ended_run(p: Any, url: str) -> None:
    """Open an ended run's page and wait until its stream has sent what it sends."""
    p.goto(url)
    p.wait_for_function("window.sseClosed === true")


def _style(p: Any, selector: str, prop: str) -> str:
    """The computed `prop` of the first element `selector` finds. A run page's stream
    swaps its live part in once after the page loaded: an element read as it is swapped
    out has no style (''), so it is found again until it answers."""
    return str(until(f"{prop} of {selector}", lambda: p.locator(selector).first.evaluate(
        f"e => e.isConnected ? getComputedStyle(e).getPropertyValue({prop!r}) : ''"),
        timeout=WAIT / 1000))


def test_a_failed_runs_page_its_error_once_and_legends_in_their_bars_colours(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("report", {"ok": False})
    assert h.wait(run_id)["status"] == "failed"
    _ended_run(page, f"{url}/ui/runs/{run_id}")
    # The error: its code and message in words, its JSON folded and drawn once.
    outcome = page.locator("#run-outcome .error-message")
    assert outcome.inner_text() == "step_failed step check failed: input.ok must be true"
    step = page.locator("section#step .error-message")
    assert step.inner_text() == "http_error input.ok must be true"
    assert page.locator("pre", has_text="input.ok must be true").count() == 1
    assert not page.locator("pre", has_text="input.ok must be true").is_visible()
    page.locator("#run-outcome details summary").click()
    assert page.locator("pre", has_text="input.ok must be true").is_visible()
    shot(page, "run-failed")
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
        assert _style(page, f"p[aria-label='Legend'] .key-{status}", "color") == box, status
    assert (_style(page, f"{graph} tspan.s-failed", "fill")
            != _style(page, f"{graph} tspan.s-success", "fill"))


# What the keyboard must reach on each page (besides the skip link and the navigation):
# a CSS selector of each main control, matched against the focused element.
CONTROLS = {
    "runs": ["select[name=workflow]", "form.filters button[type=submit]", "td.id a"],
    "run": ["svg a", "a[href*='from=']", "#edit-input", "#rerun-input",
            "form[aria-label='Rerun from the failed steps'] button", "#history summary"],
    "workflows": ["details.graph summary", "a.id", "a[href^='/ui/runs?workflow=']",
                  "details.start summary"],  # its start form: the workflows test
    "approvals": ["input[name=approver]", "input[name=comment]", "button[value=approve]",
                  "button[value=reject]"],
    "events": ["input[name=name]", "textarea[name=data]", "button.primary"],
    "dlq": ["nav a[href='/ui/dlq']"],
}

_FOCUSED = """(sels) => {
  const e = document.activeElement;
  const s = getComputedStyle(e);
  return {hit: sels.filter(q => e.matches(q)), tag: e.tagName, html: e.outerHTML.slice(0, 120),
          outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2,
          inside: (() => { const r = e.getBoundingClientRect();
                           return r.right <= window.innerWidth + 1 && r.left >= -1; })()};
}"""


def _tab_through(p: Any, wanted: list[str], limit: int = 80) -> set[str]:
    """Tab from the top of the page until every control in `wanted` had the focus (or
    `limit` presses); each focused control shows a visible outline and sits on screen."""
    p.evaluate("document.activeElement && document.activeElement.blur()")
    p.evaluate("window.scrollTo(0, 0)")
    reached: set[str] = set()
    for _ in range(limit):
        p.keyboard.press("Tab")
        got = p.evaluate(_FOCUSED, wanted)
        if got["tag"] == "BODY":
            break
        assert got["outline"], f"no visible focus on {got}"
        assert got["inside"], f"a focused control off the screen's width: {got}"
        reached.update(got["hit"])
        if reached == set(wanted):
            break
    return reached


def test_every_page_fits_a_phone_keeps_ids_whole_and_tabs_to_its_controls(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    failed = h.start("report", {"ok": False})
    gate = h.start("refund", {"order": 1042})
    assert h.wait(failed)["status"] == "failed"
    # A long value shown in a table (an event's data) scrolls in its cell, not the page.
    h.rt.events.emit("order.placed", {"note": "a-long-unbroken-value-" * 12}, key=None,
                     event_id=None)
    # ... and starts a run, ended before the runs list is read: its live rows then stay
    # as they are while the keyboard goes through them.
    listener = until("the listener's run", lambda: h.rt.store.runs.list_runs(
        "listener", h.rt.clock())[0])[0].run_id
    assert h.wait(listener)["status"] == "success"
    until("the gate open in the inbox",
          lambda: any(g["run_id"] == gate for g in h.rt.approvals.inbox(None, 200)))
    page.set_viewport_size({"width": 390, "height": 844})
    pages = {"runs": "/ui/runs", "run": f"/ui/runs/{failed}", "workflows": "/ui/workflows",
             "approvals": "/ui/approvals", "events": "/ui/events", "dlq": "/ui/dlq"}
    for name, path in pages.items():
        if name == "run":
            _ended_run(page, url + path)
        else:
            page.goto(url + path)
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"{path} is {wide}px wider than a phone"
        reached = _tab_through(page, CONTROLS[name])
        assert reached == set(CONTROLS[name]), (name, set(CONTROLS[name]) - reached)
        shot(page, f"phone-{name}")
    # A run id is one unit: one line, monospace, its whole text (an ellipsis at most).
    page.goto(f"{url}/ui/runs")
    # Read in one script, so that a live refresh of the rows (which replaces them) cannot
    # fall between finding a link and measuring it.
    links = page.evaluate("() => [...document.querySelectorAll('td.id a')].map("
                          "a => [a.textContent, a.getClientRects().length])")
    assert len(links) == 3, links  # and the listener's, started by the event
    for text, rects in links:
        assert rects == 1, (text, rects)
        assert text in (failed, gate) or text.startswith("listener-")
    assert "monospace" in _style(page, "td.id a", "font-family")
    page.goto(f"{url}/ui/runs/{failed}")
    heading = page.locator("h1 .id")
    assert heading.evaluate("e => e.getClientRects().length") == 1
    assert heading.text_content() == failed
    assert heading.evaluate("e => e.scrollWidth <= e.clientWidth")  # whole, not cut


def test_the_workflows_page_is_a_compact_table_with_sparklines_and_a_keyboard_start(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    made = [h.start("report", {"ok": ok}) for ok in (True, False, True, False)]
    assert [h.wait(r)["status"] for r in made] == ["success", "failed", "success", "failed"]
    page.goto(f"{url}/ui/workflows")
    rows = page.locator("table.workflows > tbody > tr, table.workflows > tr")
    assert rows.count() == 21
    # Compact: 21 workflows in a few screens (20 were 8,000 px as cards).
    tallest = max(rows.nth(i).bounding_box()["height"] for i in range(rows.count()))
    assert tallest <= 130, tallest
    assert page.evaluate("document.documentElement.scrollHeight") <= 21 * 130 + 400
    # The sparkline: a bar a run, oldest first, in its status's colour (the text's).
    report = page.locator("tr#wf-report")
    bars = report.locator("svg.spark rect")
    assert bars.count() == 4
    fills = [bars.nth(i).evaluate("e => getComputedStyle(e).fill") for i in range(4)]
    assert fills[0] == fills[2] != fills[1] == fills[3]
    assert fills[1] == _style(page, "tr#wf-report .status.s-failed", "color")
    assert report.locator("svg.spark rect title").nth(3).text_content().endswith(made[3])
    shot(page, "workflows-table")
    # By keyboard: the start form unfolds with Enter, its input and button follow.
    report.locator("details.start summary").focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.name") == "input"
    page.keyboard.press("Control+A")  # its {} replaced
    page.keyboard.type('{"ok": true}')
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Start run"
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r".*/ui/runs/report-[^/?]+\?done=started"))
    page.locator("#live .status", has_text="success").first.wait_for()


def test_a_reruns_page_marks_the_steps_it_carried_over(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    bad = h.start("report", {"ok": False})
    assert h.wait(bad)["status"] == "failed"
    new = h.rt.runs.rerun(bad, input={"ok": True})[0].run_id
    assert h.wait(new)["status"] == "success"
    _ended_run(page, f"{url}/ui/runs/{new}")
    graph = "svg[aria-label=\"The run's steps and their dependencies\"]"
    dashes = "stroke-dasharray"
    assert _style(page, f"{graph} a[aria-label^='fetch'] rect", dashes) == "5px, 3px"
    assert _style(page, f"{graph} a[aria-label^='check'] rect", dashes) == "none"
    # The window in ms under a second (the run took some tens of ms), never 0.00s.
    window = page.locator("p[aria-label='Timeline zoom'] .muted").text_content()
    assert re.fullmatch(r"0ms → (\S+) of \1", window) and "0.00" not in window, window
    assert "reused, not run again" in page.locator(f"{graph} a[aria-label^='fetch']").text_content()
    note = page.locator("svg[aria-label='Waterfall of attempts'] text.reused-note")
    assert note.count() == 1 and note.is_visible()
    assert note.text_content() == f"↺ reused from {bad}, not run again"
    assert page.locator("p[aria-label='Legend'] a.id").text_content() == bad
    shot(page, "run-rerun-reused")
