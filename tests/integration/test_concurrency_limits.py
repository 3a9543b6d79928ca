"""Issue 41 §1-2: concurrency limits of N (a list of them, every one of which a run must
fit), keys that take turns, and priority with ageing.

Runs hold their limits at an approval gate (`hold`) until the test cancels them, on a
WorkflowEnv's fake clock, so every admission is counted and nothing waits on real
time. The functions are served by uvicorn; the stack is moto."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.durable import Context, workflow
from infra.emulator import Emulator
from tests.support.matrix import Calls, ManifestEnv, http_api, make_app

WORK = {"backend": "app", "route": "/work"}
HOLD = {"approval": {"prompt": "hold the limit", "timeout": "1h"}}
STEPS = {"hold": HOLD, "a": {**WORK, "dependsOn": ["hold"]}}


def _wf(**rules: Any) -> dict[str, Any]:
    return copy.deepcopy({**rules, "steps": STEPS})


WORKFLOWS = {
    # Fair turns: tenants share the 3; one tenant may take them all.
    "pooled": _wf(concurrency=[{"limit": 3}, {"limit": 5, "key": "${{ input.tenant }}"}]),
    # Both limits bind: 3 in all, 2 a tenant.
    "capped": _wf(concurrency=[{"limit": 3}, {"limit": 2, "key": "${{ input.tenant }}"}]),
    "ranked": _wf(concurrency={"limit": 1}, priority="${{ input.p }}"),
    "shared1": _wf(concurrency={"group": "pool", "limit": 2}),
    "shared2": _wf(concurrency={"group": "pool", "limit": 2}),
    "skipper": _wf(concurrency={"limit": 2, "policy": "skip"}),
    "newest": _wf(concurrency={"limit": 2, "policy": "cancel-running"}),
    # Batches of events (§4) fit the limit as any run does: a full batch waits its turn.
    "batched": {**_wf(concurrency={"limit": 1}), "on": {"event": "parcel.in"},
                "batch": {"size": 2, "timeout": "60s"}},
    # A debounced burst (per key) whose start has come waits for the limit like any run.
    "settled": {**_wf(concurrency={"limit": 1}),
                "debounce": {"period": "10s", "key": "${{ input.k }}"}},
    # A backend's rate (§3): one call an hour, so a second run's call waits for it.
    "metered": {"cancelOn": {"event": "meter.stop", "if": "input.n == event.data.n"},
                "steps": {"a": {"backend": "metered", "route": "/work"}}},
    # A run that fails (its step fails for good; the run halts) lets its place go too.
    "failing": {"concurrency": {"limit": 1},
                "steps": {"hold": HOLD, "boom": {"backend": "app", "route": "/boom",
                                                 "dependsOn": ["hold"]}}},
}


@workflow("coded")
async def coded(ctx: Context, input: Any) -> Any:
    """A durable workflow that holds its limit until it is signalled (or cancelled)."""
    return await ctx.wait_for_signal("go", timeout="1h")


@pytest.fixture(scope="module")
def world(emulator: Emulator) -> Iterator[tuple[ManifestEnv, httpx.Client, Calls]]:
    calls = Calls()
    app = make_app(calls)
    app.workflow(coded)
    env = ManifestEnv(app, emulator=emulator, dags=WORKFLOWS, extra={"backends": {
                          "metered": {"url": "${WORKFLOW_ENV_URL}",
                                      "limits": {"rate": "1/1h"}}}},
                      options={"coded": {"concurrency": [
                          {"limit": 2}, {"limit": 1, "key": "${{ input.tenant }}"}]}})
    with env, http_api(env) as c:
        yield env, c, calls


@pytest.fixture
def env(world: tuple[ManifestEnv, httpx.Client, Calls]) -> Iterator[ManifestEnv]:
    env = world[0]
    env.advance("2h")  # every hold of the test before has timed out and ended
    yield env
    env.advance("2h")


def status(env: ManifestEnv, *run_ids: str) -> list[str]:
    return [env.status(r) for r in run_ids]


def running(env: ManifestEnv, run_ids: list[str]) -> list[str]:
    return [r for r in run_ids if env.status(r) == "running"]


def finish(env: ManifestEnv, run_id: str) -> None:
    """The run ends (cancelled at its hold): its limits let the next run go."""
    assert env.rt.runs.cancel(run_id, "done holding")
    env.advance(0)


def test_a_limit_of_n_and_a_limit_per_key_both_bind(env: ManifestEnv) -> None:
    a = [env.start("capped", {"tenant": "a"}) for _ in range(4)]
    b = [env.start("capped", {"tenant": "b"}) for _ in range(3)]
    env.advance(0)
    # 2 for tenant a (its own limit), then 1 of b's: 3 in all.
    assert running(env, a) == a[:2] and running(env, b) == b[:1]
    assert status(env, *a[2:], *b[1:]) == ["queued"] * 4
    going = running(env, a + b)
    while going:
        finish(env, going[0])
        going = running(env, a + b)
        assert len(going) <= 3 and len(running(env, a)) <= 2 and len(running(env, b)) <= 2
        fits = [t for t in (a, b) if len(running(env, t)) < 2
                and any(env.status(r) == "queued" for r in t)]
        if fits:
            assert len(going) == 3  # a free place goes to a run that fits it
    assert status(env, *a, *b) == ["killed"] * 7
    view = env.view(a[3])
    limits = view["admission"]["limits"]
    assert [(lim["group"], lim["key"], lim["limit"]) for lim in limits] == [
        ("workflow:capped", "", 3), ("workflow:capped/1", "a", 2)]
    assert limits[0]["turns"] == "a"  # the keyless limit takes turns by the tenant


def test_a_tenants_backlog_lets_a_newcomer_in_within_n_admissions(env: ManifestEnv) -> None:
    n = 3
    a = [env.start("pooled", {"tenant": "big"}) for _ in range(60)]
    env.advance(0)
    assert running(env, a) == a[:n]
    b = env.start("pooled", {"tenant": "small"})
    assert env.status(b) == "queued"
    admitted: list[str] = []
    going = a[:n]
    while env.status(b) != "running":
        finish(env, going.pop(0))
        now = running(env, [*a, b])
        admitted += [r for r in now if r not in going]
        going = [r for r in going if r in now] + [r for r in now if r not in going]
        assert len(admitted) <= n, admitted
    assert b in admitted and set(admitted) - {b} <= set(a[n:])


def test_priority_orders_the_waiting_runs(env: ManifestEnv) -> None:
    holder = env.start("ranked", {"p": 0})
    low = env.start("ranked", {"p": 0})
    env.advance(1)
    mid = env.start("ranked", {"p": 50})
    env.advance(1)
    high = env.start("ranked", {"p": 100})
    env.advance(1)
    last = env.start("ranked", {"p": 0})
    env.advance(0)
    order = []
    current = holder
    for _ in range(4):
        finish(env, current)
        [current] = running(env, [low, mid, high, last])
        order.append(current)
    assert order == [high, mid, low, last]
    assert env.view(high)["admission"]["priority"] == 100
    finish(env, current)


def test_waiting_ages_a_run_past_newer_ones_of_higher_priority(env: ManifestEnv) -> None:
    holder = env.start("ranked", {"p": 0})
    old = env.start("ranked", {"p": 0})
    env.advance(601)  # more than 100 points x 6 s
    new = env.start("ranked", {"p": 100})
    finish(env, holder)
    assert status(env, old, new) == ["running", "queued"]
    finish(env, old)
    # Not yet aged enough: 599 s is worth 99 points and some.
    recent = env.start("ranked", {"p": 0})
    env.advance(599)
    urgent = env.start("ranked", {"p": 100})
    finish(env, new)
    assert status(env, recent, urgent) == ["queued", "running"]
    finish(env, urgent)
    finish(env, recent)


def test_post_runs_priority_overrides_the_workflows(
    world: tuple[ManifestEnv, httpx.Client, Calls], env: ManifestEnv,
) -> None:
    c = world[1]
    holder = env.start("ranked", {"p": 0})
    first = c.post("/runs", json={"workflow": "ranked", "input": {"p": 100}})
    env.advance(1)
    second = c.post("/runs", json={"workflow": "ranked", "input": {"p": 0}, "priority": 100})
    assert first.status_code == second.status_code == 201, (first.text, second.text)
    a, b = first.json()["run_id"], second.json()["run_id"]
    assert env.view(b)["admission"]["priority"] == 100
    env.advance(1)
    finish(env, holder)
    assert status(env, a, b) == ["running", "queued"]  # equal priority: arrival order
    bad = c.post("/runs", json={"workflow": "ranked", "input": {}, "priority": 101})
    assert bad.status_code == 422 and "priority" in bad.text, bad.text
    assert bad.json()["error"]["code"]
    finish(env, a)
    finish(env, b)


def test_a_group_limit_is_shared_by_the_workflows_that_name_it(env: ManifestEnv) -> None:
    one = env.start("shared1")
    two = env.start("shared2")
    three = env.start("shared1")
    env.advance(0)
    assert status(env, one, two, three) == ["running", "running", "queued"]
    finish(env, two)
    assert env.status(three) == "running"


def test_skip_refuses_a_run_past_the_limit(env: ManifestEnv) -> None:
    ids = [env.start("skipper") for _ in range(3)]
    env.advance(0)
    assert status(env, *ids) == ["running", "running", "skipped"]
    err = env.view(ids[2])["error"]
    assert err["code"] == "concurrency_busy" and "at its limit of 2" in err["message"]
    finish(env, ids[0])
    again = env.start("skipper")
    assert env.status(again) == "running"


def test_cancel_running_replaces_the_oldest_holder(env: ManifestEnv) -> None:
    ids = [env.start("newest")]
    env.advance(1)
    ids.append(env.start("newest"))
    env.advance(1)
    third = env.start("newest")
    env.advance(0)
    assert status(env, *ids, third) == ["killed", "running", "running"]
    assert env.rt.runs.get(ids[0]).kill_reason == f"replaced by run {third}"


def test_a_holder_that_finished_without_letting_go_is_dropped_by_the_sweeper(
    env: ManifestEnv,
) -> None:
    # A run admitted elsewhere whose end never let go (its process died): a holder
    # whose run is gone.
    control = env.rt.store.control
    assert control.take_limits([("workflow:ranked#", 1)], "ghost-run") == []
    waiting = env.start("ranked", {"p": 0})
    env.advance(0)
    assert env.status(waiting) == "queued"
    env.advance(30)  # past the settle: a sweep looks at it again
    assert env.status(waiting) == "queued"  # nothing else moves it
    env.rt.sweeper(clock=env.clock).sweep(since=0)
    assert env.status(waiting) == "running"
    assert "ghost-run" not in control.holders("workflow:ranked#", env.now).runs
    finish(env, waiting)


def test_a_durable_workflows_runs_fit_their_limits(env: ManifestEnv) -> None:
    ids = []
    for t in ("a", "a", "b", "c"):
        ids.append(env.start("coded", {"tenant": t}))
        env.advance(1)
    assert status(env, *ids) == ["running", "queued", "running", "queued"]
    env.send_signal(ids[0], "go", 1)
    env.advance(0)
    assert env.result(ids[0]) == 1
    # a's second goes before c's: a's turn came first (they share the 2).
    assert status(env, *ids[1:]) == ["running", "running", "queued"]
    env.send_signal(ids[2], "go", 3)
    env.advance(0)
    assert status(env, *ids[1:]) == ["running", "success", "running"]
    for rid in (ids[1], ids[3]):
        finish(env, rid)


def test_a_run_that_fails_or_times_out_lets_its_place_go(env: ManifestEnv) -> None:
    ids = []
    for _ in range(3):
        ids.append(env.start("failing"))
        env.advance(1)  # three arrivals in order (the fake clock stands still otherwise)
    first, second, third = ids
    assert status(env, first, second, third) == ["running", "queued", "queued"]
    env.rt.approvals.answer(first, "hold", True, None, "test")
    env.advance(0)
    assert status(env, first, second, third) == ["failed", "running", "queued"]
    env.advance("61m")  # its gate times out: the run ends, and the next one goes
    assert env.status(second) in ("failed", "killed", "skipped")
    assert env.status(third) != "queued"


def test_a_run_that_took_its_limit_and_did_not_start_is_started_by_the_sweeper(
    env: ManifestEnv,
) -> None:
    """A hand-off took the limit for a waiting run and died before starting it: the
    run holds its place, queued; the next sweep starts it."""
    control = env.rt.store.control
    holder = env.start("ranked", {"p": 0})
    env.advance(1)
    stuck = env.start("ranked", {"p": 0})
    env.advance(1)
    later = env.start("ranked", {"p": 0})
    assert status(env, holder, stuck, later) == ["running", "queued", "queued"]
    control.let_go_of("workflow:ranked#", [holder])  # as the dead hand-off had
    assert control.take_limits([("workflow:ranked#", 1)], stuck, fresh=True) == []
    finish(env, holder)
    assert status(env, stuck, later) == ["queued", "queued"]  # nothing moves them
    env.advance(30)
    env.rt.sweeper(clock=env.clock).sweep(since=0)
    assert status(env, stuck, later) == ["running", "queued"]
    finish(env, stuck)
    assert env.status(later) == "running"
    finish(env, later)


def test_a_key_that_renders_empty_shares_no_other_limits_item(env: ManifestEnv) -> None:
    """`[{limit: 3}, {limit: 2, key: tenant}]` with no tenant in the input: the keyed
    limit's item is its own (`workflow:capped/1`), so the run starts."""
    ids = [env.start("capped", {}) for _ in range(3)]
    env.advance(0)
    assert status(env, *ids) == ["running", "running", "queued"]
    for rid in ids:
        finish(env, rid)


# ---- where limits meet the other features ----------------------------------------------

def test_a_rejected_gate_stops_a_limited_run_and_lets_its_place_go(env: ManifestEnv) -> None:
    holder = env.start("ranked", {"p": 0})
    env.advance(1)
    waiting = env.start("ranked", {"p": 0})
    env.advance(0)
    assert status(env, holder, waiting) == ["running", "queued"]
    env.rt.approvals.answer(holder, "hold", False, "not this one", "ada")
    env.advance(0)
    assert status(env, holder, waiting) == ["killed", "running"]
    assert "rejected by ada" in (env.rt.runs.get(holder).kill_reason or "")
    assert set(env.rt.store.control.holders("workflow:ranked#", env.now).runs) == {waiting}
    finish(env, waiting)


def test_batches_of_events_wait_their_turn_for_the_limit(
    world: tuple[ManifestEnv, httpx.Client, Calls], env: ManifestEnv,
) -> None:
    salt = uuid.uuid4().hex[:8]
    runs = []
    for i in range(5):
        [run_id] = env.emit("parcel.in", {"i": i}, event_id=f"{salt}-p{i}")
        runs.append(run_id)
        env.advance(1)
    first, second, third = runs[0], runs[2], runs[4]
    assert runs == [first, first, second, second, third]
    # The first batch is full and holds the limit; the second is full and waits for
    # it; the third is not full yet.
    assert status(env, first, second, third) == ["running", "queued", "queued"]
    limits = env.view(second)["admission"]["limits"]
    assert [(lim["group"], lim["limit"]) for lim in limits] == [("workflow:batched", 1)]
    env.advance("2m")  # the third batch's timeout: it is due, and waits for the limit
    assert status(env, first, second, third) == ["running", "queued", "queued"]
    finish(env, first)
    assert status(env, second, third) == ["running", "queued"]
    finish(env, second)
    assert env.status(third) == "running"
    finish(env, third)
    events = [[e["id"] for e in env.view(r)["input"]["events"]] for r in (first, second, third)]
    assert events == [[f"{salt}-p0", f"{salt}-p1"], [f"{salt}-p2", f"{salt}-p3"],
                      [f"{salt}-p4"]]
    assert all(world[2].of(r) == [] for r in (first, second, third))  # held, cancelled


def waiting_for(env: ManifestEnv, run_id: str) -> dict[str, Any] | None:
    [step] = env.view(run_id)["steps"]
    found: dict[str, Any] | None = step.get("waiting_for")
    return found


def test_stops_reach_a_run_waiting_for_its_backend(
    world: tuple[ManifestEnv, httpx.Client, Calls], env: ManifestEnv,
) -> None:
    """A run whose call waits for its backend's rate is stopped by a cancel and by a
    cancelOn event: it never calls, and its wait takes no slot from a later run."""
    calls, c = world[2], world[1]
    first = env.start("metered", {"n": 1})
    env.advance(1)
    by_api = env.start("metered", {"n": 2})
    by_event = env.start("metered", {"n": 3})
    env.advance(0)
    assert env.status(first) == "success" and calls.of(first) == ["a"]
    for run_id in (by_api, by_event):
        assert env.status(run_id) == "running" and calls.of(run_id) == []
        assert (waiting_for(env, run_id) or {}).get("limit") == "rate", env.view(run_id)
    r = c.post(f"/runs/{by_api}/cancel", json={"reason": "not needed"})
    assert r.status_code == 200, r.text
    eid = f"stop-{uuid.uuid4().hex[:8]}"
    assert env.rt.events.emit("meter.stop", {"n": 3}, event_id=eid)["cancelled"] == [by_event]
    env.advance(0)
    assert status(env, by_api, by_event) == ["killed", "killed"]
    assert env.rt.runs.get(by_event).kill_reason == f"cancelled by event meter.stop ({eid})"
    env.advance("61m")  # their timers come: they call nothing
    assert calls.of(by_api) == calls.of(by_event) == []
    later = env.start("metered", {"n": 4})
    env.advance(0)
    # The rate's next slot was still free: neither stopped run's wake took it.
    assert env.status(later) == "success" and calls.of(later) == ["a"]


def test_a_debounced_run_waiting_for_its_limit_takes_no_more_triggers(
    env: ManifestEnv,
) -> None:
    """Its burst ended when its start came: a trigger while it waits for its place
    begins a new burst (a new run), and the waiting run starts on its own input."""
    holder = env.start("settled", {"k": "h"})
    env.advance(11)
    assert env.status(holder) == "running"
    first = env.start("settled", {"k": "d", "v": 1})
    env.advance(11)  # its period is over: it is due, and waits for the limit
    assert env.status(first) == "queued"
    second = env.start("settled", {"k": "d", "v": 2})
    assert second != first
    assert env.view(first)["input"] == {"k": "d", "v": 1}
    finish(env, holder)
    assert status(env, first, second) == ["running", "queued"]
    env.advance(11)
    assert env.status(second) == "queued"  # due, behind `first`
    finish(env, first)
    assert env.status(second) == "running"
    assert env.view(second)["input"] == {"k": "d", "v": 2}
    finish(env, second)
