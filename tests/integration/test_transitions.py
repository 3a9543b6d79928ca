"""Every guarded write the store makes, walked against the one transition table.

A workload that makes every move of `engine.states` (promotions, claims, outcomes,
skips, stops, redispatches, admission, finishes) runs against the emulator; every
UpdateItem sent to the runs and steps tables is captured on its way (a botocore event,
the real request) and checked: the statuses its condition accepts and the status it sets
are a named move, and that move is allowed by the table."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from orchestrator.adapters.store import Lease
from orchestrator.engine.states import (
    RUN_MOVES,
    RUN_TRANSITIONS,
    STEP_MOVES,
    STEP_TRANSITIONS,
    Move,
    RunStatus,
    StepStatus,
)
from orchestrator.errors import Code
from orchestrator.services.executor import Tally
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  shapes:
    steps:
      root:  { backend: fn, route: /echo }
      left:  { backend: fn, route: /echo, dependsOn: [root] }
      right: { backend: fn, route: /flaky, payload: { fail: 1 }, dependsOn: [root],
               retry: { max: 2, delay: 10ms } }
      join:  { backend: fn, route: /echo, dependsOn: [left, right] }
  nightly:
    onFailure: halt
    steps:
      fetch-orders:  { backend: fn, route: /status, payload: { code: 500 },
                       retry: { max: 1, delay: 10ms } }
      load-orders:   { backend: fn, route: /echo, dependsOn: [fetch-orders] }
      fetch-reviews: { backend: fn, route: /slow, payload: { seconds: 1 } }
      load-reviews:  { backend: fn, route: /echo, dependsOn: [fetch-reviews] }
  sleepy:
    steps:
      nap:   { backend: fn, route: /slow, payload: { seconds: 1 } }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  single:
    concurrency: { group: single, policy: skip }
    steps:
      hold: { backend: fn, route: /hold, payload: { seconds: 0.5 } }
  queued:
    concurrency: { group: queued }
    steps:
      hold: { backend: fn, route: /hold, payload: { seconds: 0.5 } }
  held:
    steps:
      only: { backend: fn, route: /echo }
  paced:
    throttle: { limit: 1, period: 1s }
    steps:
      call: { backend: fn, route: /echo }
"""

GUARD = re.compile(r"#s (?:= (:\w+)|IN \(([^)]*)\))")
TARGET = re.compile(r"SET (?:.*?, )?#s = (:\w+)")


def statuses(values: dict[str, Any], names: list[str]) -> frozenset[str]:
    return frozenset(values[n]["S"] for n in names)


def walk(request: dict[str, Any]) -> tuple[frozenset[str], str | None]:
    """(the statuses its guard accepts, the status it sets) of one UpdateItem."""
    values = request.get("ExpressionAttributeValues", {})
    cond = request.get("ConditionExpression", "")
    guard = GUARD.search(cond)
    sources: frozenset[str] = frozenset()
    if guard:
        names = [guard[1]] if guard[1] else [n.strip() for n in guard[2].split(",")]
        sources = statuses(values, names)
    target = TARGET.search(request["UpdateExpression"])
    return sources, values[target[1]]["S"] if target else None


def matches(move: Move, sources: frozenset[str], target: str | None) -> bool:
    return sources <= {s.value for s in move.sources} and target == (
        None if move.target is None else move.target.value
    )


def test_every_store_write_is_a_move_of_the_transition_table(harness_factory: Any) -> None:
    h: Harness = harness_factory(MANIFEST)
    seen: list[tuple[str, frozenset[str], str | None]] = []
    steps, runs = h.rt.settings.names.steps_table, h.rt.settings.names.runs_table

    def capture(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] in (steps, runs) and "#s" in params.get(
            "ExpressionAttributeNames", {}
        ):
            sources, target = walk(params)
            seen.append((params["TableName"], sources, target))

    events = h.rt.clients.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb.UpdateItem", capture)
    h.start_workers(threads=8)
    # Lost messages of left: first the one that was to promote and claim it (the sweeper
    # promotes it), then the sweeper's own dispatch (the sweeper sends it again).
    dropped: list[Any] = []

    def drop_left(msgs: list[Any]) -> list[Any]:
        dropped.extend(m for m in msgs if getattr(m, "step", "") == "left")
        return [m for m in msgs if getattr(m, "step", "") != "left"]

    h.rt.queues.tamper = drop_left
    shapes = h.start("shapes")
    deadline = time.monotonic() + 10
    while not dropped:  # root succeeded and left's message was dropped
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # right's retry waits 10 ms for its timer: a minute-ahead sweep taken meanwhile would
    # send that one again too. Once right is done, left is the only step left behind.
    h.wait_for_step(shapes, "right", ("success",))
    assert h.rt.sweeper(clock=lambda: time.time() + 60).sweep().promoted == 1
    assert len(dropped) == 2
    h.rt.queues.tamper = None
    assert h.rt.sweeper(clock=lambda: time.time() + 120).sweep().redispatched == 1
    nightly = h.start("nightly")
    sleepy = h.start("sleepy")
    h.wait_for_step(sleepy, "nap", ("dispatched",))
    h.rt.runs.kill(sleepy, "enough")
    single = [h.start("single") for _ in range(2)]
    queued_run = h.start("queued")
    waiting = h.start("queued")
    h.rt.runs.kill(waiting, "not needed")
    # A step claimed, then its run cancelled before the call: the claim gives it up.
    h.rt.queues.tamper = lambda msgs: [m for m in msgs if getattr(m, "step", "") != "only"]
    held = h.start("held")
    h.rt.queues.tamper = None
    now = time.time()
    row = h.rt.store.claim(held, "only", 1, Lease("w-held", now + 30), now)
    h.rt.runs.kill(held, "before the call")
    h.rt.worker(worker_id="w-held").execute(row, Tally())
    h.rt.executor.finish_if_done(held)
    paced = [h.start("paced") for _ in range(2)]
    views = {r: h.wait(r, timeout=30)["status"] for r in [shapes, nightly, sleepy, *single,
                                                           queued_run, waiting, held, *paced]}
    assert views[shapes] == "success" and dropped
    assert views[nightly] == "failed" and views[sleepy] == "killed"
    assert sorted(views[r] for r in single) == ["skipped", "success"]
    assert views[waiting] == "killed" and views[held] == "killed"

    # Every error of every run and step is data: a registered code and a message.
    codes = {c.value for c in Code}
    for r in views:
        view = h.rt.runs.view(r)
        for err in [view["error"], *(s["error"] for s in view["steps"])]:
            if err is not None:
                assert err["code"] in codes and isinstance(err["message"], str), err

    assert seen
    covered: set[str] = set()
    for table, sources, target in seen:
        moves = STEP_MOVES if table == steps else RUN_MOVES
        table_of = STEP_TRANSITIONS if table == steps else RUN_TRANSITIONS
        kind = StepStatus if table == steps else RunStatus
        assert sources, f"an unguarded status write on {table}: -> {target}"
        named = [name for name, m in moves.items() if matches(m, sources, target)]
        assert named, f"{table}: {sorted(sources)} -> {target} is no named move"
        covered.update(f"{table == steps}:{n}" for n in named)
        for src in sources:
            if target is not None:
                assert kind(target) in table_of[kind(src)], (src, target)  # type: ignore[index]
            else:
                assert not kind(src).terminal, f"a terminal {src} row written"
    assert {f"True:{n}" for n in STEP_MOVES} <= covered, sorted(covered)
    assert {f"False:{n}" for n in RUN_MOVES} <= covered, sorted(covered)


def test_an_illegal_move_cannot_be_defined() -> None:
    with pytest.raises(ValueError, match="not in the table"):
        Move("resurrect", frozenset({StepStatus.SUCCESS}), StepStatus.READY)
    with pytest.raises(ValueError, match="terminal"):
        Move("touch", frozenset({RunStatus.FAILED}))
    tables: list[tuple[dict[str, Move], dict[Any, Any]]] = [
        (STEP_MOVES, STEP_TRANSITIONS), (RUN_MOVES, RUN_TRANSITIONS)]
    for moves, table in tables:
        for move in moves.values():
            for src in move.sources:
                assert move.target is None or move.target in table[src]
