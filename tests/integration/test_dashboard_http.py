"""The dashboard over real HTTP without a browser: who may see it, what its forms refuse,
the runs list's filters, its live streams and the dead-letter queue's redrive (real
SQS on moto). The browser tests (tests/browser) drive the same pages in chromium."""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.services.access.dashboard_logins import DashboardLogins
from tests.support.harness import Harness
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
  other:
    steps:
      one: { backend: fn, route: /echo }
  fixable:
    steps:
      check: { backend: fn, route: /check }
      nap: { backend: fn, route: /latch, dependsOn: [check] }
"""


@pytest.fixture
def open_stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


@pytest.fixture
def locked_stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, api_auth=True)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def test_without_a_key_pages_go_to_sign_in_and_posts_are_refused(
        locked_stack: tuple[Harness, str]) -> None:
    h, url = locked_stack
    run_id = h.start("hello", {})
    with httpx.Client(base_url=url) as c:
        got = c.get("/ui/runs?status=failed")
        assert got.status_code == 303
        assert got.headers["location"] == "/ui/login?next=/ui/runs%3Fstatus%3Dfailed"
        assert c.post(f"/ui/runs/{run_id}/cancel", data={"reason": "x"}).status_code == 401
        assert c.get("/ui/runs/live").status_code == 303
        # A pasted key signs in; the cookie is HttpOnly and SameSite=Strict.
        key = ApiKeys(h.rt.control).create("ops", time.time())
        signed = c.post("/ui/login?next=/ui/workflows", data={"key": key})
        assert signed.status_code == 303 and signed.headers["location"] == "/ui/workflows"
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert c.get("/ui/runs").status_code == 200
        # ... but a form posted from another site is refused, and changes nothing.
        other = c.post(f"/ui/runs/{run_id}/cancel", data={"reason": "x"},
                       headers={"Origin": "http://evil.example"})
        assert other.status_code == 403
        assert h.rt.runs.get(run_id).kill_reason is None
        # `next` only ever leads inside the dashboard.
        away = c.post("/ui/login?next=//evil.example/", data={"key": key})
        assert away.headers["location"] == "/ui/runs"


def test_a_sign_in_link_works_once_even_when_two_browsers_race(
        locked_stack: tuple[Harness, str]) -> None:
    h, url = locked_stack
    token = DashboardLogins(h.rt.control).create(h.rt.clock())
    logins = DashboardLogins(h.rt.control)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        keys = list(pool.map(lambda _: logins.spend(token, h.rt.clock()), range(4)))
    assert sum(k is not None for k in keys) == 1
    with httpx.Client(base_url=url) as c:
        assert c.get(f"/ui/login?token={token}").status_code == 401
    expired = logins.create(h.rt.clock(), ttl=-1)
    assert logins.spend(expired, h.rt.clock()) is None


def test_refused_actions_say_why_and_change_nothing(open_stack: tuple[Harness, str]) -> None:
    h, url = open_stack
    run_id = h.start("hello", {"a": 1})
    assert h.wait(run_id)["status"] == "success"
    with httpx.Client(base_url=url) as c:
        done = c.post(f"/ui/runs/{run_id}/cancel", data={"reason": "late"})
        assert done.status_code == 303
        page = c.get(done.headers["location"]).text
        assert "already finished" in page
        bad = c.post(f"/ui/runs/{run_id}/rerun", data={"edit": "on", "input": "{nope"})
        assert "input%3A+not+JSON" in bad.headers["location"]
        start = c.post("/ui/workflows/nope/start", data={"input": "{}"})
        assert "problem=" in start.headers["location"]
        assert "&#39;nope&#39; is not defined" in c.get(start.headers["location"]).text
        emit = c.post("/ui/events", data={"name": "", "data": "{}"})
        assert "event%3A+a+name+is+required" in emit.headers["location"]
    assert h.rt.runs.get(run_id).kill_reason is None


def test_the_runs_list_filters_by_workflow_trigger_time_and_id(
        open_stack: tuple[Harness, str]) -> None:
    h, url = open_stack
    a = h.start("hello", {})
    b, _ = h.rt.runs.start("other", {}, None, trigger={"source": "event"})
    h.wait(a)
    h.wait(b.run_id)
    with httpx.Client(base_url=url) as c:
        page = c.get("/ui/runs", params={"workflow": "hello"}).text
        assert a in page and b.run_id not in page
        page = c.get("/ui/runs", params={"trigger": "event"}).text
        assert b.run_id in page and a not in page
        future = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 3600))
        page = c.get("/ui/runs", params={"since": future}).text
        assert a not in page and "No run matches these filters" in page
        page = c.get("/ui/runs", params={"since": "yesterday"}).text
        assert "since: &#39;yesterday&#39; is not a time" in page
        jump = c.get("/ui/runs", params={"run_id": a})
        assert jump.status_code == 303 and jump.headers["location"] == f"/ui/runs/{a}"
        assert "no run" in c.get("/ui/runs", params={"run_id": "nope"}).text
        # The filters last used come back on a bare /ui/runs, and `all` clears them.
        c.get("/ui/runs", params={"workflow": "other"})
        back = c.get("/ui/runs")
        assert back.status_code == 303 and back.headers["location"] == "/ui/runs?workflow=other"
        assert c.get("/ui/runs?all=1").status_code == 200
        assert c.get("/ui/runs").status_code == 200
        assert c.get("/ui/runs/nope-123").status_code == 404


def _events(stream: Any, count: int, until: str | None = None) -> list[tuple[str, str]]:
    """The stream's first `count` events (or its events up to the one named `until`)."""
    out: list[tuple[str, str]] = []
    event, data = "", []
    for line in stream.iter_lines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line[5:])
        elif not line and event:
            out.append((event, "\n".join(data)))
            event, data = "", []
            if len(out) >= count or out[-1][0] == until:
                break
    return out


def _live_url(page: str) -> str:
    """The live stream a run page connects to, as the page names it."""
    return html.unescape(page.split('sse-connect="', 1)[1].split('"', 1)[0])


def _until_done(stream: Any) -> list[tuple[str, str]]:
    got = _events(stream, 1000, until="done")
    assert got[-1][0] == "done", got
    return got


def test_the_live_streams_send_the_run_until_it_ends_and_the_list(
        open_stack: tuple[Harness, str]) -> None:
    h, url = open_stack
    run_id = h.start("hello", {})
    h.wait(run_id)
    with httpx.Client(base_url=url, timeout=10) as c:
        # The stream the page opens sends the live part, not what the page already shows.
        live = _live_url(c.get(f"/ui/runs/{run_id}").text)
        with c.stream("GET", live) as s:
            got = _until_done(s)
        assert [e for e, _ in got] == ["live", "done"]
        assert "s-success" in got[0][1]
        # A stream that was not told what its page shows sends every part.
        with c.stream("GET", f"/ui/runs/{run_id}/live") as s:
            parts = dict(_until_done(s))
        assert {"live", "glyph", "facts", "cost", "actions"} <= set(parts)
        assert "s-success" in parts["glyph"]
        with c.stream("GET", "/ui/runs/live?workflow=hello") as s:
            (event, rows), = _events(s, 1)
        assert event == "rows" and run_id in rows


def test_a_run_page_open_while_the_run_ends_is_sent_its_new_header_and_actions(
        open_stack: tuple[Harness, str], recorder: Recorder) -> None:
    h, url = open_stack
    bad = h.start("fixable", {"ok": False})
    assert h.wait(bad)["status"] == "failed"
    run_id = h.rt.runs.rerun(bad, input={"ok": True})[0].run_id  # a lineage: its rerun
    deadline = time.monotonic() + 10
    while h.rt.runs.view(run_id)["status"] != "running":
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.02)
    # nap holds at its latch until the page has been read and its stream opened: a
    # sleep could end before a loaded machine has loaded the page.
    with httpx.Client(base_url=url, timeout=20) as c:
        page = c.get(f"/ui/runs/{run_id}").text
        assert "Cancel run" in page and "◐" in page and "(this run)" in page
        with c.stream("GET", _live_url(page)) as s:
            recorder.latch(run_id).set()
            got = _until_done(s)
    view = h.rt.runs.view(run_id)
    assert view["status"] == "success"
    last = dict(got)  # each part as it was sent last
    assert "s-success" in last["live"]
    assert 's-success" aria-hidden="true">✔' in last["glyph"]
    assert ">success<" in last["facts"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(view["finished_at"]))
    assert when in last["facts"]
    took = view["finished_at"] - view["started_at"]
    shown = f"{took * 1000:.0f} ms" if took < 1 else f"{took:.2f} s"  # as long as it took
    assert shown in last["facts"] and "so far" not in last["facts"]
    assert f"<strong>{view['cost']['total_requests']}</strong> AWS requests" in last["cost"]
    # The cancel form goes (it was sent once, when the run ended: never under the
    # user's typing while the run went on); a run that succeeded has no rerun form.
    assert [e for e, _ in got].count("actions") == 1
    assert "Cancel run" not in last["actions"] and "Rerun" not in last["actions"]
    # The lineage (whose rerun tree draws this run's status) is read again, once.
    assert [e for e, _ in got].count("lineage") == 1
    this = last["lineage"].split("<li")[2]
    assert "(this run)" in this and '<span class="s-success">✔</span>' in this


def test_the_dead_letter_queue_shows_its_messages_and_redrives_them(
        harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)  # no worker: the redriven messages stay to be read
    sqs = h.rt.clients.sqs
    names = h.rt.settings.names
    dlq = sqs.get_queue_url(QueueName=names.dead_letter_queue)["QueueUrl"]
    main = sqs.get_queue_url(QueueName=names.dispatch_queue)["QueueUrl"]
    bodies = [json.dumps({"kind": "test", "n": i}) for i in range(3)]
    for body in bodies:
        sqs.send_message(QueueUrl=dlq, MessageBody=body)
    with BackgroundServer(create_app(h.rt)) as server, \
            httpx.Client(base_url=server.url) as c:
        page = c.get("/ui/dlq").text
        assert page.count('name="message"') == 3 and "&#34;n&#34;: 2" in page
        ids = [m.split('"')[0] for m in page.split('name="message" value="')[1:]]
        one = c.post("/ui/dlq/redrive", data={"message": ids[0]})
        assert "1+message" in one.headers["location"]
        rest = c.post("/ui/dlq/redrive")
        assert "2+message" in rest.headers["location"]
        assert "is empty" in c.get("/ui/dlq").text
    assert int(sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=[
        "ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"]) == 0
    back: list[str] = []
    deadline = time.monotonic() + 10
    while len(back) < 3 and time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=main, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        back += [m["Body"] for m in got.get("Messages", [])]
    assert sorted(back) == sorted(bodies)


def test_a_run_page_shows_what_the_run_cost(open_stack: tuple[Harness, str]) -> None:
    h, url = open_stack
    run_id = h.start("hello", {})
    assert h.wait(run_id)["status"] == "success"
    with httpx.Client(base_url=url) as c:
        cost = c.get(f"/runs/{run_id}").json()["cost"]
        page = c.get(f"/ui/runs/{run_id}").text
    assert cost["total_requests"] > 0
    assert f"<strong>{cost['total_requests']}</strong> AWS requests" in page
    assert f"prices of {cost['prices_date']}" in page
    for op in cost["requests"]:
        assert f"<td>{op}</td>" in page


DURABLE = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  docapproval: { backend: app }
  ticking:
    schedule: { cron: "0 3 * * *" }
    backend: app
    workflow: chain
"""


def test_durable_actions_signal_reset_and_resume_go_through_the_forms(
        harness_factory: Any, app_url: str) -> None:
    h = harness_factory(DURABLE.replace("${APP}", app_url))
    h.start_workers(1, threads=4)
    run_id = h.start("docapproval", {"doc": "d-3"})
    deadline = time.monotonic() + 20
    while (h.rt.runs.view(run_id).get("waiting") or {}).get("kind") != "signal":
        assert time.monotonic() < deadline, "the run never waited for its signal"
        time.sleep(0.05)
    with BackgroundServer(create_app(h.rt)) as server, \
            httpx.Client(base_url=server.url) as c:
        page = c.get(f"/ui/runs/{run_id}").text
        assert "Execute hook" in page and "Send signal" in page
        wake = c.post(f"/ui/runs/{run_id}/resume")
        assert "done=resumed" in wake.headers["location"]
        bad = c.post(f"/ui/runs/{run_id}/signal", data={"name": "doc-approval",
                                                        "payload": "[1]"})
        assert "a+JSON+object" in bad.headers["location"]
        sent = c.post(f"/ui/runs/{run_id}/signal", data={
            "name": "doc-approval", "payload": '{"approved": true, "documentId": "d-3"}'})
        assert "signal+doc-approval+sent" in sent.headers["location"]
        view = h.wait(run_id)
        assert view["status"] == "success" and view["output"]["published"] is True
        late = c.post(f"/ui/runs/{run_id}/reset", data={"to": "0"})
        assert "problem=" in late.headers["location"]  # it finished: nothing is reset
        # The schedule's buttons: pause, resume and trigger (a run starts).
        for action in ("pause", "resume", "trigger"):
            done = c.post(f"/ui/workflows/ticking/schedule/{action}")
            assert f"schedule+of+ticking%3A+{action}" in done.headers["location"], action
        assert h.rt.store.runs.list_runs("ticking", h.rt.clock())[0]
        # A test event is stored and named on the events page.
        emitted = c.post("/ui/events", data={"name": "order.placed", "key": "k-1",
                                             "data": '{"total": 3}'})
        assert "event+order.placed+stored" in emitted.headers["location"]
        events = c.get("/ui/events?name=order.placed").text
        assert "k-1" in events and "&#34;total&#34;: 3" in events


def test_the_favicon_is_served_to_anyone_as_an_image(locked_stack: tuple[Harness, str]) -> None:
    _, url = locked_stack
    with httpx.Client(base_url=url) as c:  # not signed in: a browser asks before it is
        ico = c.get("/favicon.ico")
        assert ico.status_code == 200, ico.text
        assert ico.headers["content-type"].startswith("image/")
        assert ico.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
        # The pages name their icon; it is an image too.
        login = c.get("/ui/login").text
        icon = login.split('rel="icon"', 1)[1].split('href="', 1)[1].split('"', 1)[0]
        linked = c.get(icon)
        assert linked.status_code == 200
        assert linked.headers["content-type"].startswith("image/svg+xml")
        assert b"<svg" in linked.content
