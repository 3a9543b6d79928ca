"""Limits that protect a backend (`backends.<name>.limits`), end to end: the real engine
on moto, the backend a real FunctionApp on uvicorn that counts its calls in flight and
records when each started (tests/support/limited_fns.py).

- concurrency: with many runs of every kind (a DAG's calls, fan-out items, a durable
  workflow's calls) on two workers, the backend never sees more calls at once than
  its limit, and a step held back says so in its run's view;
- rate: starts are spaced by the rate's interval;
- a 429 with Retry-After holds every call to the backend off for the time asked (and
  the step that got it is retried no earlier);
- a slot whose holder vanished is taken back once its lease has passed;
- a durable run waits released, and says so;
- the call that frees a slot wakes the next step in line at once, and a wait whose
  timer was lost is woken by the sweeper;
- a release with nobody in line is one write (no look at the line), and a step that
  joins the line while a release finds it empty is still woken by the next release."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.backend_limits import BackendLimitStore
from orchestrator.api.ui.pages import run_live_html
from orchestrator.cli.render import render_run
from orchestrator.engine.backend_limits import Limits
from orchestrator.services.coordination.backend_limits import BackendLimits
from tests.support.harness import BuildHarness, Harness, steps_of
from tests.support.limited_fns import SECRET, Gauge, create_app
from tests.support.polling import until

GAUGE = Gauge()


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    with BackgroundServer(create_app(GAUGE)) as server:
        yield server.url


def manifest(limits: str) -> str:
    return f"""
backends:
  api: {{ url: "${{API}}", secret: {SECRET}, timeout: 10s, limits: {limits} }}
workflows:
  dag:
    steps:
      a: {{ backend: api, route: /work, payload: {{ seconds: 0.2 }} }}
      b: {{ backend: api, route: /work, dependsOn: [a], payload: {{ seconds: 0.2 }} }}
  one:
    steps:
      a: {{ backend: api, route: /work, payload: {{ seconds: 0.01 }} }}
  long:
    steps:
      a: {{ backend: api, route: /work, payload: {{ seconds: 1.0 }} }}
  fan:
    steps:
      each:
        backend: api
        route: /work
        payload: {{ seconds: 0.2 }}
        fanOut: {{ items: "input.items", maxParallel: 5 }}
  busy:
    steps:
      a: {{ backend: api, route: /busy, retry: {{ max: 3, delay: 100ms }} }}
  worky: {{ backend: api }}
"""


@pytest.fixture
def make(build_harness: BuildHarness, tmp_path: Path,
         api_url: str) -> Iterator[Callable[[str], Harness]]:
    made: list[Harness] = []

    def build(limits: str) -> Harness:
        GAUGE.reset()
        h = build_harness(manifest(limits), tmp_path, {"API": api_url})
        made.append(h)
        return h

    yield build
    for h in made:
        h.close()


def held_back(h: Harness, run_ids: list[str]) -> Callable[[], dict[str, Any] | None]:
    """A run's view (as GET /runs/{id} sends it) in which a step waits for its backend,
    if any."""
    def check() -> dict[str, Any] | None:
        for run_id in run_ids:
            view = json.loads(h.rt.runs.view_body(run_id))
            if view.get("waiting_for") or any(
                    s.get("waiting_for") for s in view.get("steps", [])):
                return view
        return None
    return check


def test_calls_in_flight_never_pass_the_limit_across_runs_kinds_and_workers(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 2 }")
    h.start_workers(2, threads=4)
    h.start_sweeper()
    runs = [h.start("dag", {}) for _ in range(4)]
    runs += [h.start("fan", {"items": list(range(5))}) for _ in range(2)]
    runs += [h.start("worky", {"steps": 3, "seconds": 0.2}) for _ in range(2)]
    view = until("a step held back", held_back(h, runs))
    shown = render_run(view, ascii_only=True)
    assert "waiting for backend api (limit 2 in flight)" in shown, shown
    waiting = view.get("waiting_for") or next(
        s["waiting_for"] for s in view["steps"] if s.get("waiting_for"))
    assert waiting["backend"] == "api" and waiting["limit"] == "concurrency", waiting

    def on_the_dashboard() -> bool:
        return any("waiting for backend api (limit 2 in flight)"
                   in run_live_html(h.rt, run_id, {})[0] for run_id in runs)
    until("shown on the dashboard", on_the_dashboard)
    for run_id in runs:
        assert h.wait(run_id, timeout=60)["status"] == "success", run_id
    # 8 DAG calls, 10 items, 6 durable step bodies: all ran, never more than 2 at once.
    assert len(GAUGE.starts) >= 24
    assert GAUGE.peak == 2, GAUGE.peak
    # Every slot went back.
    item = BackendLimitStore(h.rt.store.control).state("api", time.time())
    assert dict(item.holders) == {}


def test_starts_are_spaced_by_the_rate(make: Callable[[str], Harness]) -> None:
    h = make('{ rate: "5/1s" }')
    h.start_workers(2, threads=4)
    h.start_sweeper()
    runs = [h.start("one", {}) for _ in range(6)]
    for run_id in runs:
        assert h.wait(run_id, timeout=30)["status"] == "success"
    starts = GAUGE.times()
    assert len(starts) == 6
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 0.2 s apart when their slots were taken; at the backend's side, give or take the
    # HTTP calls' own latency, which a loaded machine stretches for one call now and
    # then (a late call seems close to the next: 0.08 s seen). Unlimited, they all start
    # within a few milliseconds.
    assert min(gaps) >= 0.05, gaps
    assert all(a + b >= 2 * 0.2 - 0.1 for a, b in itertools.pairwise(gaps)), gaps
    assert starts[-1] - starts[1] >= 4 * 0.2 - 0.1, starts


def test_a_429_with_retry_after_holds_the_backend_off_for_the_time_asked(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 4 }")
    h.start_workers(1, threads=4)
    h.start_sweeper()
    busy = h.start("busy", {})
    first = until("the 429 answered", lambda: GAUGE.times("busy:"))[0]
    items = BackendLimitStore(h.rt.store.control)
    until("held off", lambda: items.state("api", time.time()).not_before > first, timeout=5)
    other = h.start("one", {})  # another run, another step, the same backend
    view = until("held off", held_back(h, [other]), timeout=5)
    assert steps_of(view)["a"]["waiting_for"]["limit"] == "retry_after", view
    assert h.wait(busy)["status"] == "success"
    assert h.wait(other)["status"] == "success"
    busy_calls = GAUGE.times("busy:")
    assert len(busy_calls) == 2
    # The retry and the other run's call both came no earlier than asked (1 s).
    assert busy_calls[1] - first >= 1.0, busy_calls
    assert GAUGE.times(f"{other}/")[0] - first >= 1.0
    # The 429 counted as an attempt, as any retryable answer does.
    assert steps_of(h.wait(busy))["a"]["attempts"] == 2


def test_a_slot_whose_holder_vanished_is_taken_back_once_its_lease_passed(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 1 }")
    items = BackendLimitStore(h.rt.store.control)
    now = time.time()
    items.open("api")
    # A call whose worker died mid-call: its slot's lease ends in 2 s.
    assert items.take("api", "gone-worker", now + 2.0, now, concurrency=1, interval=None)
    h.start_workers(1, threads=2)
    h.start_sweeper()
    run_id = h.start("one", {})
    until("held back", held_back(h, [run_id]), timeout=5)
    assert h.wait(run_id, timeout=30)["status"] == "success"
    assert GAUGE.times()[0] >= now + 1.99  # (the lease is kept to the millisecond)
    assert "gone-worker" not in items.state("api", time.time()).holders


def test_a_durable_run_waits_for_its_backend_released_and_says_so(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 1 }")
    items = BackendLimitStore(h.rt.store.control)
    now = time.time()
    items.open("api")
    assert items.take("api", "gone-worker", now + 3.0, now, concurrency=1, interval=None)
    h.start_workers(1, threads=2)
    h.start_sweeper()
    run_id = h.start("worky", {"steps": 2, "seconds": 0.01})
    view = until("held back", held_back(h, [run_id]), timeout=5)
    assert view["waiting_for"]["backend"] == "api", view
    assert view["waiting_for"]["limit"] == "concurrency"
    # Released: no worker holds the run while it waits.
    driver = h.rt.store.steps.get_step(run_id, "$run")
    assert driver is not None and driver.lease_owner is None
    assert "waiting for backend api (limit 1 in flight)" in render_run(view, ascii_only=True)
    assert h.wait(run_id, timeout=30)["status"] == "success"
    assert GAUGE.times()[0] >= now + 2.99


def test_a_wait_whose_timer_was_lost_is_woken_by_the_sweeper(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 1 }")
    items = BackendLimitStore(h.rt.store.control)
    now = time.time()
    items.open("api")
    assert items.take("api", "gone-worker", now + 1.0, now, concurrency=1, interval=None)
    dropped: list[Any] = []

    def drop_first_timer(messages: list[Any]) -> list[Any]:
        kept = []
        for m in messages:
            timer = getattr(m, "due_at", None) is not None and getattr(m, "step", "") == "a"
            if timer and not dropped:
                dropped.append(m)
                continue
            kept.append(m)
        return kept

    h.rt.queues.tamper = drop_first_timer
    h.start_workers(1, threads=2)
    h.start_sweeper()
    run_id = h.start("one", {})
    until("held back", held_back(h, [run_id]), timeout=5)
    assert h.wait(run_id, timeout=30)["status"] == "success"
    assert dropped and dropped[0].run_id == run_id


def test_the_call_that_frees_a_slot_wakes_the_next_in_line(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 1 }")
    h.start_workers(1, threads=4)
    h.start_sweeper()
    first = h.start("long", {})
    began = until("the first call in flight", lambda: GAUGE.times())[0]
    second = h.start("one", {})
    until("in line", held_back(h, [second]), timeout=5)
    assert h.wait(second, timeout=30)["status"] == "success"
    assert h.wait(first)["status"] == "success"
    (then,) = GAUGE.times(f"{second}/")
    # Handed the slot when the first call ended (about 1 s in), not at its own recheck
    # (30 s after it was refused).
    assert began + 1.0 <= then < began + 3.0, (began, then)
    # Its wait is one transition of its history, after its start, not written over it.
    types = [e["type"] for e in h.rt.runs.history(second) if e.get("step")]
    assert "step.waiting" in types, types
    assert types.index("step.started") < types.index("step.waiting"), types
    assert types[-1] == "step.succeeded", types


def test_a_take_sent_again_after_its_first_send_landed_holds_its_slot(
        make: Callable[[str], Harness]) -> None:
    """botocore resends a write whose answer timed out: the second send of a take finds
    the holder its first send wrote, and holds the slot (it is not refused, leaving the
    slot held by nobody's call until its lease ends)."""
    from orchestrator.adapters.store.backend_limits import BackendLimitStore

    h = make("{ concurrency: 2 }")
    items = BackendLimitStore(h.rt.store.control)
    items.open("api")
    now = time.time()
    assert items.take("api", "r/a#1", now + 5, now, concurrency=2, interval=None)
    assert items.take("api", "r/a#1", now + 5, now, concurrency=2, interval=None)
    assert items.take("api", "r/b#1", now + 5, now, concurrency=2, interval=None)
    # Full: another holder, and a stale resend with another lease, are refused.
    assert not items.take("api", "r/c#1", now + 5, now, concurrency=2, interval=None)
    assert not items.take("api", "r/a#1", now + 9, now, concurrency=2, interval=None)
    assert set(items.state("api", now).holders) == {"r/a#1", "r/b#1"}


@contextmanager
def requests_of(h: Harness) -> Iterator[list[tuple[str, str]]]:
    """The DynamoDB requests this thread sends meanwhile, as (operation, partition),
    seen by botocore's own events on the runtime's client."""
    me = threading.get_ident()
    seen: list[tuple[str, str]] = []

    def note(model: Any, params: dict[str, Any], **_: Any) -> None:
        if threading.get_ident() == me:
            pk = (params.get("Key") or params.get("Item") or {}).get("pk", {}).get("S") \
                or params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S", "")
            seen.append((model.name, pk))

    events = h.rt.clients.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb", note)
    try:
        yield seen
    finally:
        events.unregister("before-parameter-build.dynamodb", note)


def gate_of(h: Harness) -> BackendLimits:
    return BackendLimits(h.rt.store, h.rt.queues, time.time, lease_margin=30.0)


TAKE_OR_GIVE = ("UpdateItem", "blimit#api")
LOOK = ("Query", "blimitq#api")


def test_a_release_with_nobody_in_line_does_not_look_at_the_line(
        make: Callable[[str], Harness]) -> None:
    h = make("{ concurrency: 2 }")
    gate, limits = gate_of(h), Limits("api", concurrency=2)
    assert gate.enter(limits, "r/a#1", 10.0) is None  # (the first one opens the item)
    with requests_of(h) as seen:
        assert gate.enter(limits, "r/b#1", 10.0) is None
        gate.leave(limits, "r/b#1", None)
    assert seen == [TAKE_OR_GIVE, TAKE_OR_GIVE], seen
    # Someone in line: the release looks, and takes its place away to wake it (its
    # run is not there: nothing to dispatch).
    gate.queue(limits, "r/w", "r", "w", time.time())
    with requests_of(h) as seen:
        gate.leave(limits, "r/a#1", None)
    assert seen[:2] == [TAKE_OR_GIVE, LOOK], seen
    assert BackendLimitStore(h.rt.store.control).line("api", time.time()).empty
    # The next release finds the line empty and lowers the marker (one guarded
    # write); the one after is a single write again.
    assert gate.enter(limits, "r/c#1", 10.0) is None
    with requests_of(h) as seen:
        gate.leave(limits, "r/c#1", None)
    assert seen == [TAKE_OR_GIVE, LOOK, TAKE_OR_GIVE], seen
    assert gate.enter(limits, "r/d#1", 10.0) is None
    with requests_of(h) as seen:
        gate.leave(limits, "r/d#1", None)
    assert seen == [TAKE_OR_GIVE], seen


def test_an_expired_place_keeps_the_line_marker_up(make: Callable[[str], Harness]) -> None:
    """A place past its expiry that DynamoDB has not deleted yet may hide live ones
    after it (the look reads the first few): the line is not taken for empty."""
    h = make("{ concurrency: 2 }")
    gate, limits = gate_of(h), Limits("api", concurrency=2)
    items = BackendLimitStore(h.rt.store.control)
    assert gate.enter(limits, "r/a#1", 10.0) is None
    long_ago = time.time() - 2 * 3600
    items.join("api", "gone/x", "gone", "x", long_ago, long_ago)
    line = items.line("api", time.time())
    assert line.waiters == [] and not line.empty
    gate.leave(limits, "r/a#1", None)
    assert gate.enter(limits, "r/b#1", 10.0) is None
    freed = items.give_back("api", "r/b#1")
    assert freed.held and freed.queued, freed


def test_a_step_joining_the_line_while_a_release_finds_it_empty_is_still_woken(
        make: Callable[[str], Harness]) -> None:
    """The release looks at the line (the marker is up) and finds it empty; before it
    lowers the marker, another call takes the slot it freed and a step joins the line
    and waits. The release's guarded write then leaves the marker up, so the other
    call's release wakes the step at once (not its recheck, 30 s later)."""
    h = make("{ concurrency: 1 }")
    gate, limits = gate_of(h), Limits("api", concurrency=1)
    items = BackendLimitStore(h.rt.store.control)
    assert gate.enter(limits, "holder-a", 60.0) is None
    now = time.time()
    # The marker up over an empty line: a step waited, then left the line.
    items.join("api", "old/x", "old", "x", now, now)
    items.leave("api", "old/x", now)
    h.start_workers(1, threads=2)
    h.start_sweeper()
    me = threading.get_ident()
    meanwhile: list[str] = []

    def between_the_look_and_the_marker(**_: Any) -> None:
        if threading.get_ident() != me or meanwhile:
            return
        meanwhile.append("")
        assert gate.enter(limits, "holder-c", 60.0) is None
        meanwhile[0] = h.start("one", {})
        until("in line", held_back(h, meanwhile), timeout=10)

    events = h.rt.clients.dynamodb.meta.events
    events.register("after-call.dynamodb.Query", between_the_look_and_the_marker)
    try:
        gate.leave(limits, "holder-a", None)
    finally:
        events.unregister("after-call.dynamodb.Query", between_the_look_and_the_marker)
    (run_id,) = meanwhile
    assert run_id, "the release did not look at the line"
    assert not GAUGE.times(f"{run_id}/")
    released = time.time()
    gate.leave(limits, "holder-c", None)
    assert h.wait(run_id, timeout=10)["status"] == "success"
    (then,) = GAUGE.times(f"{run_id}/")
    assert released <= then < released + 5.0, (released, then)
