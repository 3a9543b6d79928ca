"""Schedules on an injected clock (no real waiting): ticks, DST, two schedulers at once,
missed fires, pause/resume/trigger, forEach rows and the overlap policy per key."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.engine.states import RunStatus
from orchestrator.errors import UsageError
from orchestrator.runtime import Runtime
from orchestrator.services.triggers.scheduler import LAST_RUNS
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  hourly:
    schedule: { every: 1h }
    steps:
      one: { backend: fn, route: /echo }
  berlin:
    schedule: { cron: "30 2 * * *", timezone: Europe/Berlin }
    steps:
      one: { backend: fn, route: /echo }
  tenants:
    schedule: { every: 1h }
    forEach: { items: [{ id: a }, { id: b }], key: id }
    concurrency: skip
    steps:
      hold: { backend: fn, route: /hold, payload: { seconds: 30 } }
  replaced:
    schedule: { every: 1h }
    forEach: { backend: fn, route: /rows, key: id }
    concurrency: replace
    steps:
      one: { backend: fn, route: /echo }
  wide:
    schedule: { every: 1h }
    forEach: { items: WIDE_ROWS, key: id }
    concurrency: allow
    steps:
      one: { backend: fn, route: /echo }
  bad-key:
    schedule: { every: 1h }
    forEach: { items: [{ id: a }, { name: b }], key: id }
    steps:
      one: { backend: fn, route: /echo }
  broken-rows:
    schedule: { every: 1h }
    forEach: { backend: fn, route: /echo, key: id }
    steps:
      one: { backend: fn, route: /echo }
  throttled:
    schedule: { every: 1h }
    forEach: { items: ROWS_100, key: id }
    throttle: { limit: 1000, period: 1s }
    steps:
      one: { backend: fn, route: /echo }
  one-at-a-time:
    schedule: { every: 1h }
    forEach: { items: ROWS_20, key: id }
    concurrency: { group: nightly, policy: queue }
    steps:
      hold: { backend: fn, route: /hold, payload: { seconds: 30 } }
  debounced:
    schedule: { every: 1h }
    forEach: { items: ROWS_20, key: id }
    debounce: { period: 1m }
    steps:
      one: { backend: fn, route: /echo }
""".replace("WIDE_ROWS", "[" + ", ".join(f"{{ id: r{i:03d} }}" for i in range(250)) + "]") \
    .replace("ROWS_100", "[" + ", ".join(f"{{ id: t{i:03d} }}" for i in range(100)) + "]") \
    .replace("ROWS_20", "[" + ", ".join(f"{{ id: z{19 - i:02d} }}" for i in range(20)) + "]")


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def clocked(h: Harness, start: float) -> tuple[Runtime, list[float], Callable[[float], None]]:
    now = [start]
    rt = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients,
                       clock=lambda: now[0])

    def to(t: float) -> None:
        now[0] = t

    return rt, now, to


def ticking(h: Harness, start: float) -> tuple[Runtime, set[str]]:
    """A clock a millisecond later at every read (so arrivals are ordered), and the
    names of the threads that read it (one: the rows started one after another)."""
    now = [start]
    threads: set[str] = set()

    def clock() -> float:
        threads.add(threading.current_thread().name)
        now[0] += 0.001
        return now[0]

    rt = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients, clock=clock)
    return rt, threads


def runs_of(rt: Runtime, workflow: str) -> list[Any]:
    runs, _ = rt.store.runs.list_runs(workflow, rt.clock(), limit=100)
    return runs


def test_every_fires_each_tick_once_even_with_two_schedulers(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt, _now, to = clocked(h, at("2026-06-01T10:20:00"))
    other = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients, clock=rt.clock)
    assert rt.scheduler.tick_one("hourly", rt.manifest.workflows["hourly"]) == []
    state = rt.scheduler.show("hourly")
    assert state["next_fire"] == at("2026-06-01T11:00:00")
    to(at("2026-06-01T11:00:05"))
    fired = rt.scheduler.tick_one("hourly", rt.manifest.workflows["hourly"])
    twice = other.scheduler.tick_one("hourly", rt.manifest.workflows["hourly"])
    assert len(fired) == 1 and twice == []
    # Two schedulers that both read the cursor before either moved it: the same run.
    to(at("2026-06-01T12:00:01"))
    wf = rt.manifest.workflows["hourly"]
    a = rt.scheduler.fire("hourly", wf, at("2026-06-01T12:00:00"))
    b = other.scheduler.fire("hourly", wf, at("2026-06-01T12:00:00"))
    assert a == b
    runs = runs_of(rt, "hourly")
    assert len(runs) == 2
    assert runs[-1].trigger == {"source": "schedule", "tick": at("2026-06-01T11:00:00")}


def test_cron_fires_once_on_the_autumn_dst_change(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt, now, to = clocked(h, at("2026-10-24T12:00:00"))
    wf = rt.manifest.workflows["berlin"]
    fired: list[float] = []
    t = now[0]
    while t < at("2026-10-26T12:00:00"):  # through the night 03:00 CEST -> 02:00 CET
        to(t)
        if rt.scheduler.tick_one("berlin", wf):
            fired.append(t)
        t += 600
    days = [datetime.fromtimestamp(f, UTC).strftime("%Y-%m-%dT%H:%M") for f in fired]
    # 02:30 local happened twice on the 25th; the job ran once (02:30 CEST = 00:30Z).
    assert days == ["2026-10-25T00:30", "2026-10-26T01:30"]
    assert len(runs_of(rt, "berlin")) == 2


def test_missed_ticks_are_not_replayed(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt, _now, to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["hourly"]
    rt.scheduler.tick_one("hourly", wf)
    to(at("2026-06-01T15:10:00"))  # down from 10:20 to 15:10: five ticks missed
    assert rt.scheduler.tick_one("hourly", wf) == []
    state = rt.scheduler.show("hourly")
    assert state["missed"] == 5 and state["next_fire"] == at("2026-06-01T16:00:00")
    to(at("2026-06-01T16:00:30"))  # within the grace: fired, 30 s late
    assert len(rt.scheduler.tick_one("hourly", wf)) == 1
    assert len(runs_of(rt, "hourly")) == 1


def test_pause_resume_and_trigger(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt, now, to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["hourly"]
    rt.scheduler.pause("hourly")
    to(at("2026-06-01T11:00:01"))
    assert rt.scheduler.tick_one("hourly", wf) == []
    assert rt.scheduler.show("hourly")["paused"] is True
    to(at("2026-06-01T12:30:00"))
    resumed = rt.scheduler.resume("hourly")
    assert resumed["paused"] is False and resumed["next_fire"] == at("2026-06-01T13:00:00")
    manual = rt.scheduler.trigger("hourly")["runs"]
    assert len(manual) == 1 and "manual" in manual[0]
    assert rt.store.runs.get_run(manual[0], now[0]).trigger["source"] == "manual"
    assert rt.scheduler.show("hourly")["next_fire"] == at("2026-06-01T13:00:00")
    # Over the API.
    with BackgroundServer(create_app(rt)) as server, httpx.Client(base_url=server.url) as c:
        listed = {s["workflow"]: s for s in c.get("/schedules").json()["schedules"]}
        assert listed["berlin"]["schedule"] == "cron '30 2 * * *' in Europe/Berlin"
        assert c.post("/schedules/hourly/pause").json()["paused"] is True
        assert c.post("/schedules/hourly/resume").json()["paused"] is False
        assert len(c.post("/schedules/hourly/trigger").json()["runs"]) == 1
        missing = c.post("/schedules/nope/pause")
        assert missing.status_code == 404 and "hourly" in missing.json()["error"]["message"]


def test_for_each_skip_applies_per_key(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt, _now, _to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["tenants"]
    first = rt.scheduler.fire("tenants", wf, at("2026-06-01T11:00:00"))
    assert len(first) == 2
    views = [rt.runs.view(r) for r in first]
    assert [v["input"] for v in views] == [{"id": "a"}, {"id": "b"}]
    assert all(v["status"] == "running" for v in views)  # no worker: they stay running
    second = rt.scheduler.fire("tenants", wf, at("2026-06-01T12:00:00"))
    assert [rt.runs.get(r).status for r in second] == [RunStatus.SKIPPED] * 2
    # Tenant a's run ends; b's goes on. The next fire runs a and skips only b.
    rt.runs.cancel(first[0], "done with a")
    third = rt.scheduler.fire("tenants", wf, at("2026-06-01T13:00:00"))
    assert [rt.runs.get(r).status for r in third] == [RunStatus.RUNNING, RunStatus.SKIPPED]
    assert rt.runs.get(third[1]).error["code"] == "concurrency_busy"


def test_for_each_rows_from_a_function_and_replace(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    rt, _now, to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["replaced"]
    first = rt.scheduler.fire("replaced", wf, at("2026-06-01T11:00:00"))
    assert [rt.runs.get(r).input for r in first] == [{"id": "r1", "plan": "pro"},
                                                     {"id": "r2", "plan": "team"}]
    second = rt.scheduler.fire("replaced", wf, at("2026-06-01T12:00:00"))
    assert all(rt.runs.get(r).status is RunStatus.KILLED for r in first)
    assert rt.runs.get(first[0]).kill_reason == f"replaced by run {second[0]}"
    assert all(rt.runs.get(r).status is RunStatus.RUNNING for r in second)
    # A row source that does not answer a list: the fire fails, the error is shown.
    bad = rt.manifest.workflows["broken-rows"]
    rt.scheduler.tick_one("broken-rows", bad)  # 10:20: the cursor is set to 11:00
    to(at("2026-06-01T11:00:01"))
    rt.scheduler.tick()  # logs the failure and carries on with the other schedules
    broken = rt.scheduler.show("broken-rows")
    assert "must be a JSON array" in broken["last_error"]["message"]
    assert runs_of(rt, "broken-rows") == []
    assert broken["next_fire"] == at("2026-06-01T11:00:00")  # retried by the next sweep


def test_a_wide_for_each_fire_starts_every_row_once_and_keeps_a_bounded_cursor(
    harness_factory: Any,
) -> None:
    # 250 rows, started several at a time: each once, in row order, and the schedule's
    # item keeps the first LAST_RUNS ids and the count (10,000 ids are over an item's
    # 400 KB: a cursor that could not be written fired its tick on every sweep).
    h = harness_factory(MANIFEST)
    rt, _now, to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["wide"]
    rt.scheduler.tick_one("wide", wf)  # sets the cursor to 11:00
    to(at("2026-06-01T11:00:01"))
    fired = rt.scheduler.tick_one("wide", wf)
    assert [rt.runs.get(r).input for r in fired] == [{"id": f"r{i:03d}"} for i in range(250)]
    assert len(set(fired)) == 250
    shown = rt.scheduler.show("wide")
    assert shown["last_runs"] == fired[:LAST_RUNS] and shown["last_run_count"] == 250
    assert shown["next_fire"] == at("2026-06-01T12:00:00") and shown["last_error"] is None
    # The same tick fired again (two sweepers) makes no run twice.
    again = rt.scheduler.fire("wide", wf, at("2026-06-01T11:00:00"))
    assert again == fired
    assert len(runs_of_all(rt, "wide")) == 250


def test_a_for_each_row_without_its_key_starts_no_run(harness_factory: Any) -> None:
    # Every row is checked before any run starts: a bad row loses nothing, and
    # leaves no half-fired tick.
    h = harness_factory(MANIFEST)
    rt, _now, _to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["bad-key"]
    with pytest.raises(UsageError, match="has no key field 'id'"):
        rt.scheduler.fire("bad-key", wf, at("2026-06-01T11:00:00"))
    assert runs_of(rt, "bad-key") == []


def test_a_throttled_for_each_fire_starts_its_rows_in_order(harness_factory: Any) -> None:
    # A throttle is one item (its `tat`) shared by every row: rows started in parallel
    # contended on it (a tick could fail after the throttle's rounds), and which row got
    # the first slot was the fastest thread's. The rows start one after another.
    h = harness_factory(MANIFEST)
    rt, _now, to = clocked(h, at("2026-06-01T10:20:00"))
    wf = rt.manifest.workflows["throttled"]
    rt.scheduler.tick_one("throttled", wf)  # sets the cursor to 11:00
    to(at("2026-06-01T11:00:01"))
    fired = rt.scheduler.tick_one("throttled", wf)
    shown = rt.scheduler.show("throttled")
    assert shown["last_error"] is None and shown["last_run_count"] == 100
    runs = [rt.runs.get(r) for r in fired]
    assert [r.input for r in runs] == [{"id": f"t{i:03d}"} for i in range(100)]
    assert len({r.run_id for r in runs_of_all(rt, "throttled")}) == 100
    # One slot each, period / limit = 1 ms apart, in row order.
    slots = [r.admit_at for r in runs]
    assert all(s is not None for s in slots)
    assert slots == sorted(slots) and len(set(slots)) == 100


def test_a_group_for_each_fire_queues_its_rows_in_row_order(harness_factory: Any) -> None:
    # A queue group admits in arrival order: the rows arrive in row order (z19 first,
    # which sorts last by run id), one after another, never as threads happen to run.
    h = harness_factory(MANIFEST)
    rt, threads = ticking(h, at("2026-06-01T11:00:01"))
    wf = rt.manifest.workflows["one-at-a-time"]
    fired = rt.scheduler.fire("one-at-a-time", wf, at("2026-06-01T11:00:00"))
    assert threads == {threading.current_thread().name}  # no row raced another
    runs = [rt.runs.get(r) for r in fired]
    assert [r.input["id"] for r in runs] == [f"z{19 - i:02d}" for i in range(20)]
    assert [r.status for r in runs] == [RunStatus.RUNNING] + [RunStatus.QUEUED] * 19
    created = [r.created_at for r in runs]
    assert created == sorted(created) and len(set(created)) == 20
    # The group's lock passes down the rows in their order.
    for i in range(1, 4):
        rt.runs.cancel(fired[i - 1], "next row")
        rt.admission.arrive(rt.runs.get(fired[i]))
        assert [rt.runs.get(r).status for r in fired[i:i + 2]] == [RunStatus.RUNNING,
                                                                   RunStatus.QUEUED]


def test_a_debounced_for_each_fire_ends_on_its_last_row(harness_factory: Any) -> None:
    # A debounce is one burst for every row (an empty key): each row is a trigger that
    # moves the burst's run onto its input, so the run is the last row's. Rows started
    # in parallel contended on the burst ("is contended" failed the tick) and the input
    # was whichever thread wrote last.
    h = harness_factory(MANIFEST)
    rt, threads = ticking(h, at("2026-06-01T11:00:01"))
    wf = rt.manifest.workflows["debounced"]
    fired = rt.scheduler.fire("debounced", wf, at("2026-06-01T11:00:00"))
    assert threads == {threading.current_thread().name}  # no row raced another
    assert len(fired) == 20 and len(set(fired)) == 1
    assert [r.run_id for r in runs_of_all(rt, "debounced")] == fired[:1]
    run = rt.runs.get(fired[0])
    assert run.status is RunStatus.QUEUED and run.input == {"id": "z00"}


def runs_of_all(rt: Runtime, workflow: str) -> list[Any]:
    out: list[Any] = []
    cursor = None
    while True:
        runs, cursor = rt.store.runs.list_runs(workflow, rt.clock(), limit=100, start=cursor)
        out += runs
        if not cursor:
            return out


def test_the_sweeper_ticks_the_schedules(harness_factory: Any) -> None:
    text = MANIFEST.replace("schedule: { every: 1h }\n    steps:\n      one: { backend: fn,"
                            " route: /echo }\n  berlin",
                            "schedule: { every: 1s }\n    steps:\n      one: { backend: fn,"
                            " route: /echo }\n  berlin", 1)
    h = harness_factory(text)
    h.start_workers()
    h.start_sweeper()
    deadline = time.monotonic() + 20
    while len(runs_of(h.rt, "hourly")) < 2:
        assert time.monotonic() < deadline, "the sweeper never fired the schedule"
        time.sleep(0.2)
    run = runs_of(h.rt, "hourly")[-1]
    assert run.trigger["source"] == "schedule"
    assert h.wait(run.run_id)["status"] == "success"
