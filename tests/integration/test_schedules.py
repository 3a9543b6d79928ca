"""Schedules on an injected clock (no real waiting): ticks, DST, two schedulers at once,
missed fires, pause/resume/trigger, forEach rows and the overlap policy per key."""

from __future__ import annotations

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
""".replace("WIDE_ROWS", "[" + ", ".join(f"{{ id: r{i:03d} }}" for i in range(250)) + "]")


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def clocked(h: Harness, start: float) -> tuple[Runtime, list[float], Callable[[float], None]]:
    now = [start]
    rt = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients,
                       clock=lambda: now[0])

    def to(t: float) -> None:
        now[0] = t

    return rt, now, to


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
