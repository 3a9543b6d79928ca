"""Batches of events (`batch: {size, timeout, key}`), over real moto and a real served
function: a full batch starts one run at once with its events in order; one not full
starts at its timeout; an event delivered twice joins once; the key splits batches; and
events emitted from many threads at once make batches whose sizes add up to the events
sent, with no event in two batches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.engine.search import parse_query
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  trio:
    on: { event: order.placed }
    batch: { size: 3, timeout: 60s }
    steps:
      one: { backend: fn, route: /echo }
  slow-trio:
    on: { event: order.slow }
    batch: { size: 10, timeout: 3s }
    steps:
      one: { backend: fn, route: /echo }
  per-customer:
    on: { event: order.keyed }
    batch: { size: 2, timeout: 60s, key: "${{ event.data.customer }}" }
    steps:
      one: { backend: fn, route: /echo }
  pairs:
    on: { event: order.pair }
    batch: { size: 2, timeout: 60s, key: "${{ event.data.round }}" }
    steps:
      one: { backend: fn, route: /echo }
  crowd:
    on: { event: order.crowd }
    batch: { size: 4, timeout: 1s }
    steps:
      one: { backend: fn, route: /echo }
"""


@pytest.fixture
def h(harness_factory: Any) -> Iterator[Harness]:
    harness: Harness = harness_factory(MANIFEST)
    harness.start_workers(1, threads=4)
    harness.start_sweeper()
    yield harness


def emit(h: Harness, name: str, eid: str, data: Any = None) -> dict[str, Any]:
    answer = h.rt.events.emit(name, data, event_id=eid)
    [run] = answer["runs"]
    return {**run, "duplicate_event": answer["duplicate"]}


def event_ids(view: dict[str, Any]) -> list[str]:
    return [e["id"] for e in view["input"]["events"]]


def test_a_full_batch_starts_one_run_with_its_events_in_order(h: Harness) -> None:
    answers = [emit(h, "order.placed", f"p{i}", {"n": i}) for i in range(3)]
    assert len({a["run_id"] for a in answers}) == 1
    assert [a["outcome"] for a in answers] == ["queued", "batched", "batched"]
    view = h.wait(answers[0]["run_id"], timeout=20)
    assert view["status"] == "success"
    assert event_ids(view) == ["p0", "p1", "p2"]
    assert [e["data"] for e in view["input"]["events"]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    first = view["input"]["events"][0]
    assert first["name"] == "order.placed" and isinstance(first["received_at"], float)
    # The step saw the batch as the run's input.
    assert view["steps"][0]["output"]["input"]["events"][2]["id"] == "p2"
    # The next event begins a new batch.
    nxt = emit(h, "order.placed", "p3")
    assert nxt["run_id"] != answers[0]["run_id"] and nxt["outcome"] == "queued"


def test_a_batch_not_full_starts_at_its_timeout(h: Harness) -> None:
    a = emit(h, "order.slow", "s1", {"n": 1})
    b = emit(h, "order.slow", "s2", {"n": 2})
    assert a["run_id"] == b["run_id"]
    assert h.rt.runs.get(a["run_id"]).status.value == "queued"
    view = h.wait(a["run_id"], timeout=20)  # 1 s, then its timer (or the sweeper)
    assert view["status"] == "success" and event_ids(view) == ["s1", "s2"]
    run = h.rt.runs.get(a["run_id"])
    # Its timeout passed (admission takes a start due within 50 ms).
    assert run.started_at is not None and run.started_at >= run.created_at + 2.9


def test_an_event_delivered_twice_joins_its_batch_once(h: Harness) -> None:
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
            base_url=server.url, timeout=30) as c:
        first = c.post("/events", json={"name": "order.placed", "id": "d1", "data": {"n": 1}})
        assert first.status_code == 201, first.text
        again = c.post("/events", json={"name": "order.placed", "id": "d1", "data": {"n": 9}})
        assert again.status_code == 200, again.text
        [run], [same] = first.json()["runs"], again.json()["runs"]
        assert same["run_id"] == run["run_id"] and same["outcome"] == "duplicate"
        second = c.post("/events", json={"name": "order.placed", "id": "d2"}).json()
        assert second["runs"][0]["run_id"] == run["run_id"]
        assert second["runs"][0]["outcome"] == "batched"
        view = c.get(f"/runs/{run['run_id']}", params={"steps": "false"}).json()
        assert view["status"] == "queued" and event_ids(view) == ["d1", "d2"]
        assert view["input"]["events"][0]["data"] == {"n": 1}
        # The third place is still free: a new event fills it, the repeat did not.
        third = c.post("/events", json={"name": "order.placed", "id": "d3"}).json()
        assert third["runs"][0]["run_id"] == run["run_id"]
    view = h.wait(run["run_id"], timeout=20)
    assert view["status"] == "success" and event_ids(view) == ["d1", "d2", "d3"]


def test_the_key_splits_batches(h: Harness) -> None:
    answers = [emit(h, "order.keyed", f"k{i}", {"customer": c})
               for i, c in enumerate(["acme", "globex", "acme", "globex"])]
    acme, globex = answers[0]["run_id"], answers[1]["run_id"]
    assert acme != globex
    assert [a["run_id"] for a in answers] == [acme, globex, acme, globex]
    assert event_ids(h.wait(acme, timeout=20)) == ["k0", "k2"]
    assert event_ids(h.wait(globex, timeout=20)) == ["k1", "k3"]


def test_a_batch_is_found_by_each_of_its_events(h: Harness) -> None:
    """Each event that joins a batch has its terms indexed before its join (the
    creation indexed the first event's only): a search by any event's data finds the
    batch's run, and one by what no event carried does not."""
    a = emit(h, "order.pair", "c1", {"round": "found", "customer": "acme"})
    b = emit(h, "order.pair", "c2", {"round": "found", "customer": "globex"})
    assert a["run_id"] == b["run_id"] and b["outcome"] == "batched"
    h.wait(a["run_id"], timeout=20)
    for q, runs in (("acme", [a["run_id"]]), ("globex", [a["run_id"]]),
                    ("input.events.data.customer = globex", [a["run_id"]]),
                    ("events.data.customer:globex", [a["run_id"]]), ("initech", [])):
        found, _ = h.rt.store.runs.find_runs(parse_query(q), h.rt.clock())
        assert [r.run_id for r in found] == runs, q


def test_two_events_racing_for_the_last_place_make_one_full_batch_and_begin_another(
        h: Harness) -> None:
    for r in range(5):  # each round its own key: a batch holding one event, then a race
        first = emit(h, "order.pair", f"r{r}-0", {"round": r})
        go = threading.Barrier(2)
        answers: dict[str, dict[str, Any]] = {}

        def send(eid: str, r: int, go: threading.Barrier,
                 answers: dict[str, dict[str, Any]]) -> None:
            go.wait()
            answers[eid] = emit(h, "order.pair", eid, {"round": r})

        racers = [threading.Thread(target=send, args=(f"r{r}-{i}", r, go, answers))
                  for i in (1, 2)]
        for t in racers:
            t.start()
        for t in racers:
            t.join(timeout=30)
        joined = [e for e, a in answers.items() if a["run_id"] == first["run_id"]]
        began = [e for e, a in answers.items() if a["run_id"] != first["run_id"]]
        assert len(joined) == 1 and len(began) == 1, answers
        assert answers[joined[0]]["outcome"] == "batched"
        assert answers[began[0]]["outcome"] == "queued"
        full = h.wait(first["run_id"], timeout=20)  # full: started at once
        assert full["status"] == "success" and event_ids(full) == [f"r{r}-0", joined[0]]
        fresh = h.rt.runs.get(answers[began[0]]["run_id"])
        assert fresh.status.value == "queued" and fresh.input["events"][0]["id"] == began[0]


def test_concurrent_events_fill_batches_without_losing_or_doubling_one(h: Harness) -> None:
    threads, per_thread = 6, 8
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()
    go = threading.Barrier(threads)

    def send(t: int) -> None:
        go.wait()
        for i in range(per_thread):
            a = emit(h, "order.crowd", f"c{t}-{i}")
            with lock:
                answers.append({**a, "event": f"c{t}-{i}"})

    workers = [threading.Thread(target=send, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert len(answers) == threads * per_thread
    runs = sorted({a["run_id"] for a in answers})
    batches = {r: event_ids(h.wait(r, timeout=30)) for r in runs}
    seen = [e for ids in batches.values() for e in ids]
    assert sorted(seen) == sorted(f"c{t}-{i}" for t in range(threads)
                                  for i in range(per_thread))  # each event once
    assert all(1 <= len(ids) <= 4 for ids in batches.values()), batches
    # Each event's answer names the batch that holds it.
    holder = {e: r for r, ids in batches.items() for e in ids}
    assert {a["event"]: a["run_id"] for a in answers} == holder
    # Each thread's own events keep its order inside a batch.
    for ids in batches.values():
        for t in range(threads):
            mine = [int(e.split("-")[1]) for e in ids if e.startswith(f"c{t}-")]
            assert mine == sorted(mine)


def test_the_sweeper_starts_a_batch_whose_timer_was_lost(harness_factory: Any) -> None:
    # No worker takes the timer message: only the sweeper's pass over queued runs can
    # start the batch once its timeout (and the settle margin) has passed.
    harness: Harness = harness_factory(MANIFEST)
    harness.start_sweeper()
    a = emit(harness, "order.slow", "lost-1")
    run_id = a["run_id"]
    deadline = time.monotonic() + 30
    while harness.rt.runs.get(run_id).status.value == "queued":
        assert time.monotonic() < deadline, "the sweeper never started the batch"
        time.sleep(0.05)
    run = harness.rt.runs.get(run_id)
    assert run.status.value == "running" and run.input["events"][0]["id"] == "lost-1"
    # Its timeout passed (admission takes a start due within 50 ms).
    assert run.started_at is not None and run.started_at >= run.created_at + 2.9
