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
from orchestrator.services.execution.tally import Tally
from tests.support.durable_fns import LEDGER
from tests.support.harness import Harness, claim_step
from tests.support.testfns import Recorder

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
      nap:   { backend: fn, route: /latch }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  single:
    concurrency: { group: single, policy: skip }
    steps:
      hold: { backend: fn, route: /latch }
  queued:
    concurrency: { group: queued }
    steps:
      hold: { backend: fn, route: /latch }
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


def test_every_store_write_is_a_move_of_the_transition_table(harness_factory: Any,
                                                             recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    seen: list[tuple[str, frozenset[str], str | None]] = []
    steps = capture_into(h, seen)
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
    h.wait_for_step(sleepy, "nap", ("dispatched",))  # held at its latch until killed
    h.rt.runs.kill(sleepy, "enough")
    recorder.latch(sleepy).set()
    single = [h.start("single") for _ in range(2)]
    queued_run = h.start("queued")
    waiting = h.start("queued")
    h.rt.runs.kill(waiting, "not needed")
    # Each group's first run held it (at its latch) until now: the second `single` was
    # skipped and `waiting` killed while queued, however slow the machine.
    for r in [*single, queued_run]:
        recorder.latch(r).set()
    # A step claimed, then its run cancelled before the call: the claim gives it up.
    h.rt.queues.tamper = lambda msgs: [m for m in msgs if getattr(m, "step", "") != "only"]
    held = h.start("held")
    h.rt.queues.tamper = None
    now = time.time()
    row = claim_step(h.rt, held, "only", 1, Lease("w-held", now + 30), now)
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

    covered = check(seen, steps)
    assert {f"True:{n}" for n in STEP_MOVES if n not in DRIVER_MOVES} <= covered, sorted(covered)
    # Left out by their starts (one dependency each): promoted and claimed by a put.
    assert StepStatus.DISPATCHED.value in FIRST_WRITES
    assert {f"False:{n}" for n in RUN_MOVES if n not in DURABLE_RUN_MOVES} <= covered, \
        sorted(covered)


def check(seen: list[tuple[str, frozenset[str], str | None]], steps: str) -> set[str]:
    """Each captured write is a named move the table allows; the names of those seen."""
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
    return covered


def capture_into(h: Harness, seen: list[tuple[str, frozenset[str], str | None]]) -> str:
    """Capture every status-guarded UpdateItem on the runs and steps tables into `seen`
    (a botocore event: the real request; alone or in a transaction), and every guarded
    PutItem of a step row: the first write of a row the start left out, which moves it
    from its planned status (blocked), or a whole row put under its status guard; the
    steps table's name."""
    steps, runs = h.rt.settings.names.steps_table, h.rt.settings.names.runs_table

    def capture(params: dict[str, Any], **_: Any) -> None:
        if params["TableName"] in (steps, runs) and "#s" in params.get(
            "ExpressionAttributeNames", {}
        ):
            sources, target = walk(params)
            seen.append((params["TableName"], sources, target))

    def capture_put(params: dict[str, Any], **_: Any) -> None:
        # (A durable run's journal entries are put too, guarded by their keys.)
        if params["TableName"] == steps and "#s" in params.get("ExpressionAttributeNames", {}):
            target = params["Item"]["status"]["S"]
            if params["ConditionExpression"] == "attribute_not_exists(#s)":
                seen.append((steps, frozenset({StepStatus.BLOCKED.value}), target))
                FIRST_WRITES.append(target)
            else:  # a whole row put under its status guard (a plain success)
                sources, _ = walk({**params, "UpdateExpression": ""})
                seen.append((steps, sources, target))

    def capture_transaction(params: dict[str, Any], **_: Any) -> None:
        # A halting failure is written with its run's stop instant, in one transaction.
        for item in params["TransactItems"]:
            if "Update" in item:
                capture(item["Update"])

    events = h.rt.clients.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb.UpdateItem", capture)
    events.register("before-parameter-build.dynamodb.TransactWriteItems", capture_transaction)
    events.register("before-parameter-build.dynamodb.PutItem", capture_put)
    return steps


# The statuses of the guarded first writes of rows (captured PutItems), across tests.
FIRST_WRITES: list[str] = []


# The moves only a durable run's drivers make, and the run moves only durable runs make.
DRIVER_MOVES = {"suspend", "renew", "poke", "hold", "take-branch", "settle-branch"}
DURABLE_RUN_MOVES = {"pause", "note"}

DURABLE = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  chain: { backend: app }
  sleeper: { backend: app }
  approval: { backend: app }
  versioned: { backend: app, workflow: versioned, timeout: 30s }
  branches: { backend: app }
  slowchain: { backend: app, timeout: 1s }
"""


def test_every_write_of_a_durable_run_is_a_move_of_the_transition_table(
        build_harness: Any, app_url: str, tmp_path: Any) -> None:
    h: Harness = build_harness(DURABLE, tmp_path, {"APP": app_url})
    seen: list[tuple[str, frozenset[str], str | None]] = []
    steps = capture_into(h, seen)
    h.start_workers(1, threads=4)
    h.start_sweeper()
    try:
        chain = h.start("chain", {"steps": 5})
        sleeper = h.start("sleeper", {"sleep": "200ms"})
        branches = h.start("branches", {"sleep": "100ms"})
        # A chain longer than its call's timeout renews its lease as it goes.
        slow = h.start("slowchain", {"steps": 40})
        # A signal wait poked; a replay mismatch paused, then resumed (an operator's hold).
        approval = h.start("approval", {})
        versioned = h.start("versioned", {})
        for run_id in (approval, versioned):
            wait_for_signal(h, run_id)
        h.rt.signals.send(approval, "approve", {"ok": True})
        LEDGER.version[versioned] = 2
        h.rt.signals.send(versioned, "finish", {})
        deadline = time.monotonic() + 20
        while h.rt.runs.view(versioned, steps=False)["status"] != "paused":
            assert time.monotonic() < deadline, "the mismatch did not pause the run"
            time.sleep(0.05)
        LEDGER.version[versioned] = 1
        h.rt.durable.resume(versioned)
        # A reset of a run waiting for a signal (not paused): noted in its history.
        reset = h.start("approval", {})
        wait_for_signal(h, reset)
        h.rt.durable.reset(reset, 0)
        wait_for_signal(h, reset)
        h.rt.signals.send(reset, "approve", {"ok": True})
        # A cancel of a waiting run.
        killed = h.start("approval", {})
        wait_for_signal(h, killed)
        h.rt.runs.kill(killed, "not needed")
        ends = {r: h.wait(r, timeout=30)["status"]
                for r in (chain, sleeper, branches, slow, approval, versioned, reset, killed)}
    finally:
        h.close()
    assert ends == {chain: "success", sleeper: "success", branches: "success",
                    slow: "success", approval: "success", versioned: "success",
                    reset: "success", killed: "killed"}
    covered = check(seen, steps)
    made = {n.split(":", 1)[1] for n in covered if n.startswith("True:")}
    assert {"claim", "succeed", "suspend", "renew", "poke", "hold"} <= made, sorted(made)
    assert {"False:pause", "False:note"} <= covered, sorted(covered)


def wait_for_signal(h: Harness, run_id: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        row = h.rt.store.drivers.get_driver(run_id)
        if row is not None and row.waiting and row.waiting.get("kind") == "signal" \
                and row.lease_owner is None:
            return
        assert time.monotonic() < deadline, f"{run_id} never waited for a signal"
        time.sleep(0.02)


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
