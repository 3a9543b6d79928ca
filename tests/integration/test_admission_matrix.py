"""Issue 37 §4, admission as a matrix: every trigger source (POST /runs with a chosen
run_id, POST /runs with an Idempotency-Key, a signed webhook delivery, an event, a
schedule fire, a rerun, a child run: POST /runs with a parent_run_id and a chosen
run_id, as a durable parent's call starts one) crossed with every admission stage
(dedupe, debounce, throttle, a concurrency group that queues, one that skips, a limit
of N, a backend's rate limit, a cancel while queued).

The triggers go over real HTTP (create_app on a uvicorn server) into a WorkflowEnv's
runtime, and the test pumps the worker on the environment's fake clock, so a 60 s
throttle or a one-hour gate costs milliseconds and nothing waits on real time. A
schedule fire is the scheduler's own `tick_one` at the tick's instant (it answers
nobody: its outcome is read from the run)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from infra.emulator import Emulator
from tests.support.matrix import (
    Answer,
    Calls,
    ManifestEnv,
    http_api,
    make_app,
    post_event,
    post_rerun,
    post_run,
    post_webhook,
    webhook_section,
)

WORK = {"backend": "app", "route": "/work"}
# The first step of the grouped workflows holds the run (and its group) until a person
# answers or an hour passes: on the fake clock, `run_until_idle` jumps there.
HOLD = {"approval": {"prompt": "hold the group", "timeout": "1h"}}


def _wf(name: str, work: dict[str, Any] = WORK, **rules: Any) -> dict[str, Any]:
    steps: dict[str, Any] = {"a": dict(work)}
    if "concurrency" in rules and isinstance(rules["concurrency"], dict | list):
        steps = {"hold": HOLD, "a": {**WORK, "dependsOn": ["hold"]}}
    # `concurrency: allow` where no group is given: a schedule fire's default (`skip`
    # while the previous fire's run goes) would otherwise add a stage to every case.
    rules.setdefault("concurrency", "allow")
    # A deep copy: a value shared between workflows would be dumped as a YAML anchor,
    # which the manifest loader refuses.
    return copy.deepcopy({"on": {"event": f"{name}.go"}, "schedule": {"every": "10s"},
                          **rules, "steps": steps})


WORKFLOWS = {
    "plain": _wf("plain"),
    # period longer than the schedule's interval: two fires fall in one burst.
    "debounced": _wf("debounced", debounce={"period": "60s", "maxWait": "5m"}),
    "throttled": _wf("throttled", throttle={"limit": 1, "period": "60s"}),
    "queued": _wf("queued", concurrency={"group": "gq", "policy": "queue"}),
    "skipping": _wf("skipping", concurrency={"group": "gs", "policy": "skip"}),
    # Limits of N (issue 41): two at once in all, keys (the input's n) taking turns.
    "pooled": _wf("pooled", concurrency=[{"limit": 2}, {"limit": 2, "key": "k${{ input.n }}"}],
                  priority="${{ input.p }}"),
    # A backend's limit (issue 41 §3) is per call, whatever started the run.
    "metered": _wf("metered", {"backend": "metered", "route": "/work"}),
}
# One call a minute to it: the second run's call waits for the rate's next slot.
METERED = {"metered": {"url": "${WORKFLOW_ENV_URL}", "limits": {"rate": "1/60s"}}}

SOURCES = ["api", "api-key", "webhook", "event", "schedule", "rerun", "child"]


@dataclass
class Ctx:
    env: ManifestEnv
    c: httpx.Client
    calls: Calls
    source: str
    seeds: dict[tuple[str, str], str] = field(default_factory=dict)
    parent: str = ""
    ticks: dict[tuple[str, str], float] = field(default_factory=dict)
    salt: str = ""

    def trigger(self, wf: str, n: int, ident: str) -> Answer:
        """One trigger of `wf` from this source; the same `ident` is the same trigger
        (a retried request, a redelivery, a second sweeper firing the same tick)."""
        s = self.source
        seed = self.seeds.get((wf, ident))
        ident = f"{self.salt}{ident}"
        if s == "api":
            return post_run(self.c, wf, {"n": n}, run_id=f"{wf}-{ident}")
        if s == "api-key":
            return post_run(self.c, wf, {"n": n}, key=f"{wf}-{ident}")
        if s == "webhook":
            return post_webhook(self.c, self.env, f"{wf}-hook", {"n": n}, f"msg_{wf}_{ident}")
        if s == "event":
            return post_event(self.c, f"{wf}.go", {"n": n}, f"{wf}-{ident}")
        if s == "schedule":
            return self._fire(wf, ident)
        if s == "child":
            return post_run(self.c, wf, {"n": n}, run_id=f"{wf}-child-{ident}",
                            parent=self.parent)
        assert s == "rerun"
        assert seed is not None
        return post_rerun(self.c, seed, run_id=f"{wf}-re-{ident}", input={"n": n})

    def _fire(self, wf: str, ident: str) -> Answer:
        sched = self.env.rt.scheduler
        spec = sched.scheduled[wf]
        tick = self.ticks.get((wf, ident))
        if tick is not None:  # a second sweeper fires the tick the first fired
            [run_id] = sched.fire(wf, spec, tick)
            return Answer(run_id, None, None)
        while True:
            due = float(sched.show(wf)["next_fire"])
            self.env.advance(max(0.0, due - self.env.now))
            # A cursor left behind by an earlier cell (the clock moved 10 min since) is
            # past the grace: this tick counts it missed and moves it on; fire the next.
            fired = sched.tick_one(wf, spec)
            if fired:
                break
        [run_id] = fired
        self.ticks[(wf, ident)] = due
        return Answer(run_id, None, None)

    def seed(self) -> None:
        """A rerun needs a stopped run to rerun: three per workflow, each started and
        cancelled before it ran anything, then the clock moved past every throttle."""
        for wf in WORKFLOWS:
            for ident in ("x", "y", "z"):
                old = post_run(self.c, wf, {"n": 0}).run_id
                if self.env.status(old) not in ("killed", "skipped"):
                    r = self.c.post(f"/runs/{old}/cancel", json={"reason": "seed"})
                    assert r.status_code == 200, r.text
                self.env.run_until_idle()
                assert self.env.status(old) in ("killed", "skipped")
                assert self.calls.of(old) == []
                self.seeds[(wf, ident)] = old
        self.env.advance("10m")

    # ---- reading -------------------------------------------------------------------

    def run(self, run_id: str) -> Any:
        return self.env.rt.runs.get(run_id)

    def n_of(self, run_id: str) -> Any:
        """The `n` the run was started with, wherever its source put it."""
        got = self.env.view(run_id)["input"]
        if self.source == "event":
            return got["data"]["n"]
        return None if got is None else got["n"]

    def started_entries(self, run_id: str) -> list[str]:
        return [e["type"] for e in self.env.rt.runs.history(run_id)
                if e.get("type") in ("run.started", "step.started", "run.running")]


@dataclass
class World:
    """One environment per trigger source, shared by that source's cells: each cell
    uses its own workflows' ids (a salt per cell), and ends with every run it made
    ended, so its group is free and its throttle budget spent only by itself."""

    env: ManifestEnv
    c: httpx.Client
    calls: Calls
    source: str
    seeds: dict[tuple[str, str], str]
    parent: str = ""
    cells: int = 0


@pytest.fixture(scope="module", params=SOURCES)
def world(request: pytest.FixtureRequest, emulator: Emulator) -> Iterator[World]:
    calls = Calls()
    env = ManifestEnv(make_app(calls), emulator=emulator, dags=WORKFLOWS,
                      extra={**webhook_section(list(WORKFLOWS)), "backends": METERED})
    with env, http_api(env) as c:
        w = World(env, c, calls, request.param, {})
        if w.source == "rerun":
            probe = Ctx(env, c, calls, w.source)
            probe.seed()
            w.seeds = probe.seeds
        if w.source == "child":
            w.parent = post_run(c, "plain", {"n": 0}).run_id
        yield w


@pytest.fixture
def ctx(world: World) -> Ctx:
    world.cells += 1
    # Past every throttle period and schedule tick of the cell before.
    world.env.advance("10m")
    return Ctx(world.env, world.c, world.calls, world.source, seeds=world.seeds,
               parent=world.parent, salt=f"c{world.cells}")


DUP = {"created": False, "duplicate": True, "debounced": False, "outcome": "duplicate"}


# ---- dedupe ------------------------------------------------------------------------------

def test_dedupe_a_repeated_trigger_is_one_run(ctx: Ctx) -> None:
    first = ctx.trigger("plain", 1, "x")
    again = ctx.trigger("plain", 1, "x")
    assert again.run_id == first.run_id
    if ctx.source == "rerun":
        # A rerun's answer says `created` only: the same chosen run_id is the same rerun.
        assert first.fields == {"created": True} and again.fields == {"created": False}
    elif first.fields is not None and again.fields is not None:
        assert first.fields["created"] is True and first.outcome == "created"
        assert again.fields == DUP and again.status_code == 200
    ctx.env.run_until_idle()
    assert ctx.env.status(first.run_id) == "success"
    assert ctx.calls.of(first.run_id) == ["a"]  # called once, not once per trigger
    if ctx.source == "child":  # linked to its parent once
        assert ctx.env.rt.children.of(ctx.parent).count(first.run_id) == 1


# ---- debounce ----------------------------------------------------------------------------

def test_debounce_two_triggers_are_one_run_on_the_last_input(ctx: Ctx) -> None:
    if ctx.source == "rerun":
        return debounce_does_not_apply_to_a_rerun(ctx)
    first = ctx.trigger("debounced", 1, "x")
    second = ctx.trigger("debounced", 2, "y")
    assert second.run_id == first.run_id
    assert ctx.env.status(first.run_id) == "queued"
    if first.fields is not None and second.fields is not None:
        assert first.outcome == "queued" and first.fields["created"] is True
        assert second.fields == {"created": False, "duplicate": False, "debounced": True,
                                 "outcome": "debounced"}
    # A repeat of the second trigger moves nothing (its start stays).
    due = ctx.run(first.run_id).admit_at
    third = ctx.trigger("debounced", 2, "y")
    assert third.run_id == first.run_id and ctx.run(first.run_id).admit_at == due
    if third.fields is not None:
        assert third.fields == DUP
    ctx.env.run_until_idle()
    assert ctx.env.status(first.run_id) == "success"
    assert ctx.calls.of(first.run_id) == ["a"]
    if ctx.source != "schedule":  # a fire's input is null
        assert ctx.n_of(first.run_id) == 2


def debounce_does_not_apply_to_a_rerun(ctx: Ctx) -> None:
    # README "Cancel and rerun": a rerun passes through the workflow's concurrency group
    # and throttle like any new run; debounce is a rule for triggers (API, events,
    # webhooks, schedules), and a rerun restarts one stopped run: each is its own run.
    first = ctx.trigger("debounced", 1, "x")
    second = ctx.trigger("debounced", 2, "y")
    assert first.run_id != second.run_id
    assert first.fields == second.fields == {"created": True}
    ctx.env.run_until_idle()
    for a in (first, second):
        assert ctx.env.status(a.run_id) == "success" and ctx.calls.of(a.run_id) == ["a"]
        assert ctx.n_of(a.run_id) == (1 if a is first else 2)


# ---- throttle ----------------------------------------------------------------------------

def test_throttle_delays_the_second_run_by_its_period(ctx: Ctx) -> None:
    first = ctx.trigger("throttled", 1, "x")
    second = ctx.trigger("throttled", 2, "y")
    assert first.run_id != second.run_id
    if second.fields is not None and ctx.source != "rerun":
        assert second.outcome == "queued" and second.fields["created"] is True
    ctx.env.advance(0)
    assert ctx.env.status(first.run_id) == "success"
    assert ctx.env.status(second.run_id) == "queued"
    a = ctx.run(first.run_id)
    assert ctx.run(second.run_id).admit_at >= a.started_at + 60 - 0.01
    ctx.env.run_until_idle()
    b = ctx.run(second.run_id)
    assert b.status.value == "success" and ctx.calls.of(second.run_id) == ["a"]
    assert b.started_at - a.started_at >= 60 - 0.01


# ---- concurrency -------------------------------------------------------------------------

def test_concurrency_queue_second_waits_until_the_first_ends(ctx: Ctx) -> None:
    first = ctx.trigger("queued", 1, "x")
    second = ctx.trigger("queued", 2, "y")
    assert first.run_id != second.run_id
    if second.fields is not None and ctx.source != "rerun":
        assert second.outcome == "queued"
    ctx.env.advance(0)
    assert ctx.env.status(first.run_id) == "running"  # at its gate, holding the group
    assert ctx.env.status(second.run_id) == "queued"
    assert ctx.calls.of(second.run_id) == []
    ctx.env.run_until_idle()
    a, b = ctx.run(first.run_id), ctx.run(second.run_id)
    assert a.status.value == b.status.value == "success"
    assert b.started_at >= a.finished_at
    assert ctx.calls.of(second.run_id) == ["a"]


def test_concurrency_skip_refuses_the_second(ctx: Ctx) -> None:
    first = ctx.trigger("skipping", 1, "x")
    second = ctx.trigger("skipping", 2, "y")
    assert first.run_id != second.run_id
    if second.fields is not None and ctx.source != "rerun":
        assert second.fields == {"created": True, "duplicate": False, "debounced": False,
                                 "outcome": "skipped"}
    assert ctx.env.status(second.run_id) == "skipped"
    ctx.env.run_until_idle()
    assert ctx.env.status(first.run_id) == "success"
    assert ctx.env.status(second.run_id) == "skipped"
    assert ctx.calls.of(second.run_id) == [] and ctx.started_entries(second.run_id) == []


def test_concurrency_limit_of_two_third_waits_for_a_place(ctx: Ctx) -> None:
    first = ctx.trigger("pooled", 1, "x")
    second = ctx.trigger("pooled", 2, "y")
    third = ctx.trigger("pooled", 3, "z")
    assert len({first.run_id, second.run_id, third.run_id}) == 3
    ctx.env.advance(0)
    assert [ctx.env.status(a.run_id) for a in (first, second, third)] == [
        "running", "running", "queued"]
    assert ctx.calls.of(third.run_id) == []
    view = ctx.env.view(third.run_id)["admission"]
    assert [lim["limit"] for lim in view["limits"]] == [2, 2]
    ctx.env.run_until_idle()
    runs = [ctx.run(a.run_id) for a in (first, second, third)]
    assert [r.status.value for r in runs] == ["success"] * 3
    assert runs[2].started_at >= min(runs[0].finished_at, runs[1].finished_at)
    # The repeat of a trigger that waited is the same run, not a fourth.
    again = ctx.trigger("pooled", 3, "z")
    if ctx.source != "schedule" or again.run_id == third.run_id:
        assert again.run_id == third.run_id


# ---- a backend's limit -------------------------------------------------------------------

def test_a_backend_rate_spaces_the_calls_of_two_runs(ctx: Ctx) -> None:
    first = ctx.trigger("metered", 1, "x")
    second = ctx.trigger("metered", 2, "y")
    assert first.run_id != second.run_id
    ctx.env.advance(0)
    called = [a for a in (first, second) if ctx.calls.of(a.run_id) == ["a"]]
    held = [a for a in (first, second) if ctx.calls.of(a.run_id) == []]
    assert len(called) == len(held) == 1
    assert ctx.env.status(held[0].run_id) == "running"  # admitted; its call waits
    [step] = ctx.env.view(held[0].run_id)["steps"]
    assert step["waiting_for"]["backend"] == "metered", step
    assert step["waiting_for"]["limit"] == "rate", step
    ctx.env.run_until_idle()
    a, b = ctx.run(called[0].run_id), ctx.run(held[0].run_id)
    assert a.status.value == b.status.value == "success"
    assert ctx.calls.of(held[0].run_id) == ["a"]
    assert b.finished_at - a.finished_at >= 60 - 0.01


# ---- cancel while queued -----------------------------------------------------------------

def test_cancel_while_queued_ends_killed_and_never_starts(ctx: Ctx) -> None:
    first = ctx.trigger("queued", 1, "x")
    second = ctx.trigger("queued", 2, "y")
    ctx.env.advance(0)
    assert ctx.env.status(second.run_id) == "queued"
    r = ctx.c.post(f"/runs/{second.run_id}/cancel", json={"reason": "not needed"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "killed"
    ctx.env.run_until_idle()
    b = ctx.run(second.run_id)
    assert b.status.value == "killed" and b.kill_reason == "not needed"
    assert b.started_at is None and ctx.calls.of(second.run_id) == []
    assert ctx.started_entries(second.run_id) == []
    assert ctx.env.status(first.run_id) == "success"
    # A repeat of the cancelled trigger does not bring it back.
    again = ctx.trigger("queued", 2, "y")
    if ctx.source != "schedule" or again.run_id == second.run_id:
        assert again.run_id == second.run_id
        assert ctx.env.status(second.run_id) == "killed"


# ---- found by a search, cancelled in bulk -------------------------------------------------

def test_a_queued_run_is_found_by_what_it_carried_and_cancelled_in_bulk(ctx: Ctx) -> None:
    """Issue 42 across the sources: a run from each is in the search index (its input,
    or a schedule's trigger), and a bulk cancel naming it by that search cancels it
    and nothing else."""
    first = ctx.trigger("queued", 4240, "x")
    second = ctx.trigger("queued", 4242, "y")
    ctx.env.advance(0)
    assert ctx.env.status(second.run_id) == "queued"
    q = {"event": "input.data.n = 4242", "schedule": "trigger.source = schedule"
         }.get(ctx.source, "input.n = 4242")
    r = ctx.c.get("/runs", params={"q": q, "workflow": "queued", "status": "queued"})
    assert r.status_code == 200, r.text
    assert [x["run_id"] for x in r.json()["runs"]] == [second.run_id]
    job = ctx.c.post("/bulk-actions", json={"action": "cancel", "q": q, "workflow": "queued",
                                            "status": "queued", "reason": "bulk"})
    assert job.status_code == 202, job.text
    ctx.env.run_until_idle()
    done = ctx.c.get(f"/bulk-actions/{job.json()['job_id']}").json()
    assert done["status"] == "done" and done["counts"]["done"] == 1, done
    assert [o["run_id"] for o in done["runs"]] == [second.run_id]
    b = ctx.run(second.run_id)
    assert b.status.value == "killed" and b.kill_reason == "bulk"
    assert ctx.calls.of(second.run_id) == []
    assert ctx.env.status(first.run_id) == "success"
