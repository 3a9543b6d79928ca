"""Finding runs by what they carried (`GET /runs?q=`), over the HTTP API on moto with the
test functions on uvicorn: by an input's path, a key:value anywhere, a word of an error,
an output, a trigger; combined with the workflow and status filters; paged; and bad
queries answered 400 naming what. The index is read, never a table scanned: the test
counts the Scans a search makes (none)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from orchestrator.errors import ConditionFailed
from tests.support.harness import Harness
from tests.support.polling import until
from tests.support.served import api_client, found, start_run

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  orders:
    steps:
      take: { backend: fn, route: /echo }
      check: { backend: fn, route: /gate, dependsOn: [take], retry: { max: 0 } }
  other:
    steps:
      only: { backend: fn, route: /echo }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    with api_client(h) as client:
        yield h, client


def test_runs_are_found_by_what_they_carried(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    acme = start_run(c, "orders", {"customer": "acme", "order": 1042, "ok": True,
                                "lines": [{"sku": "X-1"}, {"sku": "Y-2"}]})
    globex = start_run(c, "orders", {"customer": "Globex", "order": 1043})
    other = start_run(c, "other", {"customer": "acme", "note": "rush delivery"})
    for run in (acme, globex, other):
        h.wait(run)
    assert c.get(f"/runs/{globex}").json()["status"] == "failed"

    assert found(c, q='input.customer = "acme"') == [other, acme]
    assert found(c, q="input.customer = ACME") == [other, acme]  # case aside
    assert found(c, q="input.order = 1042") == [acme]
    assert found(c, q='input.order = "1042"') == [acme]  # values compare as text
    assert found(c, q="order:1043") == [globex]
    assert found(c, q="input.lines.sku = y-2") == [acme]  # a list's items
    assert found(c, q="rush") == [other]
    assert found(c, q='input ~ "rush delivery"') == [other]
    # The error of a failed run, its words; with today's filters.
    assert found(c, q='error ~ "not true"') == [globex]
    codes = c.get(f"/runs/{globex}").json()["error"]
    assert found(c, q=f'error.code = "{codes["code"]}"') == [globex]
    assert found(c, q="acme", workflow="orders") == [acme]
    assert found(c, q="acme workflow = other") == [other]
    assert found(c, q="input.customer = acme", status="success") == [other, acme]
    assert found(c, q="input.customer = acme status = failed") == []
    # Output: what the run returned (its sink's output: /echo sends its input back).
    assert found(c, q='output.input.note = "rush delivery"') == [other]
    assert found(c, q="trigger.source = api input.order = 1043") == [globex]
    assert found(c, q="nosuchword") == []


def test_a_search_pages_newest_first(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    runs = [start_run(c, "other", {"batch": "b7", "i": i}) for i in range(7)]
    for run in runs:
        h.wait(run)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"q": "batch:b7", "limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = c.get("/runs", params=params).json()
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == runs[::-1]


def test_a_search_scans_no_table(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    run = start_run(c, "other", {"customer": "initech"})
    h.wait(run)
    ops: list[str] = []

    def count(event_name: str = "", **_: Any) -> None:
        ops.append(event_name.rsplit(".", 1)[-1])

    h.rt.clients.dynamodb.meta.events.register("before-call.dynamodb", count)
    try:
        assert found(c, q="input.customer = initech") == [run]
    finally:
        h.rt.clients.dynamodb.meta.events.unregister("before-call.dynamodb", count)
    assert "Scan" not in ops and "Query" in ops, ops


@pytest.mark.parametrize(("q", "says"), [
    ('input.customer = "acme', "unclosed quote"),
    ("customer = acme", "a path starts with one of input, output, error, trigger"),
    ("input.note ~ urgent", "~ searches the words of a whole field"),
    ("input.x != 3", "!= is not searchable"),
    ("input.x =", "no value after ="),
    ("= 3", "with nothing before it"),
    ("status = done status = failed", "a run has one"),
    ("status ~ failed", "status takes = only"),
    ("!!", "no word to search for"),
])
def test_a_query_that_cannot_be_read_is_a_400_naming_what(
    api: tuple[Harness, httpx.Client], q: str, says: str,
) -> None:
    _, c = api
    r = c.get("/runs", params={"q": q})
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"] and "q:" in r.json()["error"]["message"]


def test_q_and_where_together_must_agree(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    run = start_run(c, "other", {"customer": "hooli"})
    h.wait(run)
    r = c.get("/runs", params={"q": "hooli", "where": "acme"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("q: 'hooli' and where: 'acme'")
    same = c.get("/runs", params={"q": "hooli", "where": "hooli"})
    assert [x["run_id"] for x in same.json()["runs"]] == [run]
    # The filters in key:value form, as with =.
    assert found(c, q="hooli status:success workflow:other") == [run]
    assert found(c, q="hooli workflow:orders") == []


def test_a_cursor_from_before_since_is_an_empty_page(
        api: tuple[Harness, httpx.Client]) -> None:
    """A cursor older than `since` (a later search's since with an earlier page's
    cursor) leaves nothing between the two: an empty page, without a Query whose BETWEEN
    bounds cross (DynamoDB answers those with a ValidationException, a 503 here)."""
    h, c = api
    runs = [start_run(c, "other", {"between": "yes", "i": i}) for i in range(2)]
    for run in runs:
        h.wait(run)
    first = c.get("/runs", params={"q": "between:yes", "limit": 1}).json()
    assert [r["run_id"] for r in first["runs"]] == runs[-1:] and first["next_cursor"]
    queries: list[dict[str, Any]] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        queries.append(params)

    events = h.rt.clients.dynamodb.meta.events
    events.register("provide-client-params.dynamodb.Query", seen)
    try:
        page = c.get("/runs", params={"q": "between:yes", "cursor": first["next_cursor"],
                                      "since": str(h.rt.clock() + 60)})
    finally:
        events.unregister("provide-client-params.dynamodb.Query", seen)
    assert page.status_code == 200, page.text
    assert page.json() == {"runs": [], "next_cursor": None}
    crossed = [q for q in queries if "BETWEEN" in q.get("KeyConditionExpression", "")
               and q["ExpressionAttributeValues"][":lo"]["S"]
               > q["ExpressionAttributeValues"][":hi"]["S"]]
    assert crossed == []


CROSSING = """
backends:
  fn: { url: "${FN}" }
workflows:
  forked:
    steps:
      a: { backend: fn, route: /echo }
      left: { backend: fn, route: /echo, dependsOn: [a] }
      right: { backend: fn, route: /echo, dependsOn: [a] }
  solo:
    concurrency: { limit: 1, policy: skip }
    steps:
      hold: { approval: { prompt: "hold", timeout: 1h } }
  held:
    concurrency: { limit: 1 }
    steps:
      hold: { approval: { prompt: "hold", timeout: 1h } }
"""


@pytest.fixture
def crossing(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(CROSSING)
    with api_client(h) as client:
        yield h, client


def test_every_stop_and_sink_is_found(crossing: tuple[Harness, httpx.Client]) -> None:
    """Where search meets the other features: a run with two sinks is found by each
    sink's output; a cancelled run (queued or running) by its reason; a run a
    concurrency limit skipped by its error's code; a child run by its parent."""
    h, c = crossing
    forked = start_run(c, "forked", {"tag": "fork-1"})
    h.wait(forked)
    assert found(c, q="output.left.input.tag = fork-1") == [forked]
    assert found(c, q="output.right.step = right") == [forked]

    running = start_run(c, "held", {"i": 1})
    queued = start_run(c, "held", {"i": 2})
    skipped_holder = start_run(c, "solo", {"i": 3})
    until("the first held run running", lambda: c.get(f"/runs/{running}").json()["status"]
          == "running")
    until("solo running", lambda: c.get(f"/runs/{skipped_holder}").json()["status"]
          == "running")
    skipped = start_run(c, "solo", {"i": 4})
    for run, why in ((queued, "wrong tenant queued"), (running, "wrong tenant running")):
        assert c.post(f"/runs/{run}/cancel", json={"reason": why}).status_code == 200
    c.post(f"/runs/{skipped_holder}/cancel", json={"reason": "tidy"})
    for run in (running, queued, skipped, skipped_holder):
        h.wait(run)
    assert found(c, q='error ~ "wrong tenant"') == [queued, running]
    assert found(c, q='error ~ "queued"') == [queued]
    code = c.get(f"/runs/{skipped}").json()["error"]["code"]
    assert found(c, q=f"error.code = {code} workflow = solo") == [skipped]
    # A child run (POST /runs with a parent): found by its parent.
    child = c.post("/runs", json={"workflow": "forked", "input": {"tag": "kid"},
                                  "parent_run_id": forked, "run_id": "kid-1"})
    assert child.status_code == 201, child.text
    h.wait("kid-1")
    assert found(c, q=f'trigger.parent_run_id = "{forked}"') == ["kid-1"]


def test_a_run_created_twice_is_found_once_at_its_creation(
        api: tuple[Harness, httpx.Client]) -> None:
    """A creation that loses to an earlier one of the same run id (a trigger sent twice,
    a schedule's tick fired by two sweepers) wrote its terms first, under its own time:
    the search lists the run once, where its row's creation puts it."""
    h, c = api
    body = {"workflow": "other", "input": {"twice": "yes"}, "run_id": "twice-1"}
    assert c.post("/runs", json=body).status_code == 201
    h.wait("twice-1")
    run = h.rt.store.runs.get_run("twice-1", h.rt.clock())
    assert run is not None
    with pytest.raises(ConditionFailed):  # the losing attempt, a second later
        h.rt.store.runs.create_run(replace(run, created_at=run.created_at + 1.0))
    later = start_run(c, "other", {"twice": "yes"})
    h.wait(later)
    assert found(c, q="input.twice = yes") == [later, "twice-1"]
