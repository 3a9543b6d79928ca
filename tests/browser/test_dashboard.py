"""The dashboard (/ui) in a real browser: headless Debian chromium driven by Playwright,
against the real API over HTTP, on moto, with the test functions on uvicorn. The browser
signs in with the one-time link `orchestrator dev` would print, then does what an
operator does: finds the failed run and reads why, reruns it with a corrected input and
follows the new run live to its success, approves a waiting durable run through its
hook, and cancels a run. Screenshots of the main pages are saved (tests/support/browser.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.services.access.dashboard_logins import DashboardLogins
from tests.support.browser import dashboard_page, open_browser, shot
from tests.support.harness import Harness
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
  app: { url: "${APP}", secret: durable-secret }
workflows:
  report:
    description: Fetch, check, publish.
    steps:
      fetch:   { backend: fn, route: /echo }
      check:   { backend: fn, route: /check, dependsOn: [fetch] }
      publish: { backend: fn, route: /echo, dependsOn: [check] }
  slow:
    steps:
      nap: { backend: fn, route: /slow, payload: { seconds: 2 } }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  latched:
    steps:
      nap: { backend: fn, route: /latch }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  docapproval: { backend: app }
  refund:
    steps:
      ask: { approval: { prompt: "Refund order 1042, EUR 480?", timeout: 1h } }
      refund: { backend: fn, route: /echo, dependsOn: [ask] }
"""

WAIT = 20_000  # ms: the longest a page waits for what it should show


class Answers:
    """The API app, recording the status and type of each answer it sends (a browser's
    own requests, such as its icon's, are not the page's: Playwright does not see them)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sent: list[tuple[str, int, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers") or ()).get(b"content-type", b"")
                self.sent.append((scope["path"], message["status"], kind.decode()))
            await send(message)

        await self.app(scope, receive, sending)


@pytest.fixture
def served(harness_factory: Any, app_url: str) -> Iterator[tuple[Harness, str, Answers]]:
    h = harness_factory(MANIFEST.replace("${APP}", app_url), api_auth=True)
    h.start_workers(1, threads=4)
    h.start_sweeper()
    answers = Answers(create_app(h.rt, badge="DEV"))
    with BackgroundServer(answers) as server:
        yield h, server.url, answers


@pytest.fixture
def stack(served: tuple[Harness, str, Answers]) -> tuple[Harness, str]:
    return served[0], served[1]


@pytest.fixture
def page(stack: tuple[Harness, str]) -> Iterator[Any]:
    h, url = stack
    with dashboard_page(h, url, timeout=WAIT) as p:
        yield p


def _status(p: Any, status: str) -> None:
    """Wait until the run page's live part shows `status` (pushed over SSE, no reload)."""
    p.locator("#live .status", has_text=status).first.wait_for()


def test_the_link_signs_in_once_and_a_stranger_is_sent_to_sign_in(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    token = DashboardLogins(h.rt.control).create(h.rt.clock())
    with open_browser() as browser:
        first = browser.new_page()
        first.goto(f"{url}/ui/login?token={token}")
        assert first.url.endswith("/ui/runs")
        assert first.locator(".badge").inner_text() == "DEV"
        stranger = browser.new_context().new_page()
        stranger.goto(f"{url}/ui/runs?status=failed")
        assert "/ui/login" in stranger.url and "next=" in stranger.url
        stranger.goto(f"{url}/ui/login?token={token}")  # spent
        assert "used already or has expired" in stranger.locator(".notice").inner_text()
        stranger.fill("input[name=key]", "ok_not-a-key")
        stranger.click("form.card button[type=submit]")
        assert "not valid" in stranger.locator(".notice").inner_text()


def test_find_the_failed_run_read_its_error_rerun_it_with_edited_input_to_success(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    good = h.start("report", {"ok": True})
    bad = h.start("report", {"ok": False})
    assert h.wait(good)["status"] == "success"
    assert h.wait(bad)["status"] == "failed"
    page.goto(f"{url}/ui/runs")
    page.locator("td.id a", has_text=good).wait_for()
    shot(page, "runs")
    page.select_option("select[name=status]", "failed")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r".*status=failed.*"))
    assert page.locator("td.id a", has_text=bad).count() == 1
    assert page.locator("td.id a", has_text=good).count() == 0
    # The filters are remembered: the list without a query shows them again.
    page.goto(f"{url}/ui/runs")
    page.wait_for_url(re.compile(r".*status=failed.*"))
    page.click(f"text={bad}")
    page.wait_for_url(f"{url}/ui/runs/{bad}")
    # The failed step is selected, its error under the graph.
    step = page.locator("section#step")
    assert "check" in step.locator("h2").inner_text()
    assert "input.ok must be true" in step.inner_text()
    shot(page, "run-failed")
    # The history is fetched when its section is opened.
    page.click("#history summary")
    page.locator("#history td", has_text="step.failed").first.wait_for()
    page.check("#edit-input")
    page.fill("#rerun-input", '{"ok": true}')
    page.click("form[aria-label='Rerun from the failed steps'] button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/runs/(?!" + re.escape(bad) + r")[^/?]+\?done=.*"))
    new = page.url.split("/ui/runs/")[1].split("?")[0]
    _status(page, "success")  # followed live: the page was not reloaded
    assert h.wait(new)["status"] == "success"
    assert h.rt.runs.get(new).rerun_of == bad
    # Its lineage names the run it reruns.
    page.reload()
    assert page.locator("ul.tree a", has_text=bad).count() == 1
    shot(page, "run-rerun")


def test_approve_a_waiting_durable_run_through_its_hook(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("docapproval", {"doc": "d-9"})
    _until(lambda: any(s.get("kind") == "hook" and s["status"] == "success"
                       for s in h.rt.runs.view(run_id)["steps"]))
    page.goto(f"{url}/ui/runs/{run_id}")
    hook = page.locator("form[aria-label^='Execute hook']")
    shot(page, "run-durable-waiting")
    hook.locator("textarea").fill('{"approved": true}')
    hook.locator("button").click()
    page.locator(".notice.ok", has_text="hook executed").wait_for()
    _status(page, "success")
    view = h.wait(run_id)
    assert view["status"] == "success" and view["output"]["published"] is True


def test_cancel_a_run_with_a_reason(stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("slow", {})
    page.goto(f"{url}/ui/runs/{run_id}")
    page.fill("form[aria-label='Cancel the run'] input[name=reason]", "wrong day")
    page.click("form[aria-label='Cancel the run'] button")
    page.locator(".notice.ok", has_text="cancelled: wrong day").wait_for()
    # The step under way lands (it is never tried again), then the run ends killed.
    _status(page, "killed")
    assert h.rt.runs.get(run_id).kill_reason == "wrong day"
    assert h.wait(run_id)["steps"][1]["status"] in ("skipped", "cancelled", "blocked")


def test_a_page_left_open_while_its_run_ends_shows_one_status(
        stack: tuple[Harness, str], page: Any, recorder: Recorder) -> None:
    h, url = stack
    run_id = h.start("latched", {})  # its step holds until the page has been read
    _until(lambda: h.rt.runs.view(run_id)["status"] == "running")
    page.goto(f"{url}/ui/runs/{run_id}")
    facts = page.locator("section[aria-label='The run'] dl.facts")
    glyph = page.locator("h1 span[aria-hidden]").first
    cancel = page.locator("button", has_text="Cancel run")
    assert facts.locator("dd.status").inner_text() == "running"
    assert glyph.inner_text() == "◐" and cancel.count() == 1
    assert facts.locator("dt:text-is('Finished') + dd").inner_text() == "—"
    page.evaluate("window.notReloaded = true")
    recorder.latch(run_id).set()
    _status(page, "success")  # the live part, pushed over SSE
    # ... and the rest of the page with it: the header, the cost and the actions.
    facts.locator("dd.status", has_text="success").wait_for()
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert glyph.inner_text() == "✔"
    finished = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(view["finished_at"]))
    assert facts.locator("dt:text-is('Finished') + dd").inner_text().startswith(finished)
    took = view["finished_at"] - view["started_at"]
    shown = f"{took * 1000:.0f} ms" if took < 1 else f"{took:.2f} s"  # as long as the page took
    assert facts.locator("dt:text-is('Took') + dd").inner_text() == shown
    cost = page.locator("section[aria-label='Lineage and cost']")
    assert f"{view['cost']['total_requests']} AWS requests" in cost.inner_text()
    assert cancel.count() == 0
    assert page.locator("form[aria-label='Rerun from the failed steps']").count() == 0
    # Nothing on the page is drawn as running any more; every status it states is success.
    assert page.locator(".s-running").count() == 0
    assert set(page.locator(".status").all_inner_texts()) == {"success", "✔ success"}
    assert page.evaluate("window.notReloaded") is True
    shot(page, "run-ended-live")


def test_the_workflows_page_starts_a_run_and_refuses_bad_json(
        stack: tuple[Harness, str], page: Any) -> None:
    _, url = stack
    page.goto(f"{url}/ui/workflows")
    card = page.locator("tr#wf-report")  # a row a workflow
    card.locator("details.graph summary").click()
    assert card.locator("svg rect.box").count() == 3
    shot(page, "workflows")
    card.locator("details.start summary").click()
    card.locator("textarea").fill("{not json")
    card.locator("button", has_text="Start run").click()
    assert "input: not JSON" in page.locator(".notice.bad").inner_text()
    card = page.locator("tr#wf-report")
    card.locator("details.start summary").click()
    card.locator("textarea").fill('{"ok": true}')
    card.locator("button", has_text="Start run").click()
    page.wait_for_url(re.compile(r".*/ui/runs/[^/?]+\?done=started"))
    _status(page, "success")


def test_every_page_fits_a_phone_has_labelled_controls_and_a_keyboard_path(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("report", {"ok": False})
    assert h.wait(run_id)["status"] == "failed"
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/ui/runs", f"/ui/runs/{run_id}", "/ui/workflows", "/ui/events", "/ui/dlq"):
        page.goto(url + path)
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"{path} is {wide}px wider than a phone"
        unlabelled = page.evaluate("""[...document.querySelectorAll(
            'input:not([type=hidden]), select, textarea, button')].filter(e =>
            !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
            && !e.textContent.trim()).map(e => e.outerHTML)""")
        assert unlabelled == [], path
    page.goto(f"{url}/ui/runs/{run_id}")
    shot(page, "run-phone")
    # The keyboard: the first Tab reaches the skip link, Enter jumps to the content.
    page.goto(f"{url}/ui/runs")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.url.endswith("#main")


def _until(seen: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not seen():
        if time.monotonic() > deadline:
            raise AssertionError("not seen in time")
        time.sleep(0.05)


def test_approve_a_gate_from_the_inbox_and_the_run_goes_on(
        stack: tuple[Harness, str], page: Any) -> None:
    h, url = stack
    run_id = h.start("refund", {"order": 1042})
    page.goto(f"{url}/ui/approvals")
    row = page.locator("tr", has_text=run_id)
    deadline = time.monotonic() + WAIT / 1000
    while row.count() == 0:  # the gate opens once a worker has claimed its step
        assert time.monotonic() < deadline, "the gate never showed in the inbox"
        page.reload()
        page.wait_for_load_state()
        row = page.locator("tr", has_text=run_id)
    assert "Refund order 1042, EUR 480?" in row.inner_text()
    shot(page, "approvals")
    row.locator("input[name=comment]").fill("refund it")
    row.locator("button", has_text="Approve").click()
    page.locator(".notice.ok", has_text="approved").wait_for()
    assert h.wait(run_id)["status"] == "success"
    page.goto(f"{url}/ui/runs/{run_id}")
    _status(page, "success")


def test_the_pages_load_with_no_console_error_and_their_icon(
        served: tuple[Harness, str, Answers], page: Any) -> None:
    h, url, answers = served
    run_id = h.start("report", {"ok": True})
    assert h.wait(run_id)["status"] == "success"
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{url}/ui/runs")
    # The browser asks for the icon once the page has loaded (a missing one is a console
    # error, "Failed to load resource"): its answer, as the server sent it.
    _until(lambda: any("favicon" in path for path, _, _ in answers.sent))
    icons = [(path, status, kind) for path, status, kind in answers.sent if "favicon" in path]
    assert all(status == 200 and kind.startswith("image/") for _, status, kind in icons), icons
    for path in (f"/ui/runs/{run_id}", "/ui/workflows", "/ui/events", "/ui/approvals",
                 "/ui/dlq", "/ui/runs"):
        page.goto(url + path)
        page.wait_for_load_state("load")
    assert errors == []
