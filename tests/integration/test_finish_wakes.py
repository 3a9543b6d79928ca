"""A success and a finish move the wake index only when a follow-up needs it.

A success recorded while its lease holds keeps its claim's wake (its lease's end), a
sink's too: a crash between the record and the run's finish is repaired there. A finish
moves the run's wake only for a run whose finish has follow-ups (a concurrency group's
lock, a parent waiting); any other run keeps the wake its start gave it. Each moved wake
is two writes to an index (engine/wakes.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

from orchestrator.engine.states import RunStatus
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  grouped:
    concurrency: { group: g }
    steps:
      one: { backend: fn, route: /echo }
"""


def run_item(h: Harness, run_id: str) -> dict[str, Any]:
    item = h.rt.clients.dynamodb.get_item(
        TableName=h.rt.settings.names.runs_table, Key={"run_id": {"S": run_id}},
        ConsistentRead=True)["Item"]
    return dict(item)


def step_items(h: Harness, run_id: str) -> dict[str, dict[str, Any]]:
    resp = h.rt.clients.dynamodb.query(
        TableName=h.rt.settings.names.steps_table, ConsistentRead=True,
        KeyConditionExpression="run_id = :r", ExpressionAttributeValues={":r": {"S": run_id}})
    return {i["step"]["S"]: i for i in resp["Items"]}


def test_a_run_without_follow_ups_keeps_its_starts_wake_and_its_sink_its_claims(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("chain")
    started = run_item(h, run_id)["wake_at"]["N"]
    h.start_workers()
    assert h.wait(run_id)["status"] == "success"
    run = run_item(h, run_id)
    assert run["wake_at"]["N"] == started  # the finish left it: no index write
    assert float(run["finished_at"]["N"]) != float(started)
    for name, item in step_items(h, run_id).items():
        # Each success kept its claim's wake (its lease's end), the sink's too.
        wake = float(item["wake_at"]["N"])
        assert wake > float(item["finished_at"]["N"]), name


def test_a_run_holding_a_group_moves_its_wake_to_its_finish(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers()
    run_id = h.start("grouped")
    assert h.wait(run_id)["status"] == "success"
    run = run_item(h, run_id)
    assert run["wake_at"]["N"] == run["finished_at"]["N"]  # its release is checked there
    # Its sink's wake is its finish too: a crash before the run's finish (and its
    # release, which the group's next run waits for) is repaired at the next sweep.
    one = step_items(h, run_id)["one"]
    assert one["wake_at"]["N"] == one["finished_at"]["N"]


def test_a_finish_lost_after_the_sinks_success_is_made_by_the_sweep(
    harness_factory: Any,
) -> None:
    """The sink's worker dies between its success and the run's finish (here: its
    finish and its count never reach DynamoDB): the sweeper finishes the run at the
    first of its wakes to pass (its start's, here, or its sink's lease end)."""
    h = harness_factory(MANIFEST)
    rt = h.rt
    runs_table = rt.settings.names.runs_table
    lost: list[str] = []
    main = threading.main_thread()

    class Died(Exception):
        pass

    def die(params: dict[str, Any], model: Any, **_: Any) -> None:
        if threading.current_thread() is main or params.get("TableName") != runs_table:
            return
        if model.name == "UpdateItem":  # the finish, or the count that would lead to it
            lost.append(model.name)
            raise Died("the worker died here")

    rt.clients.dynamodb.meta.events.register("provide-client-params.dynamodb", die)
    h.start_workers()
    run_id = h.start("chain")
    deadline = time.monotonic() + 20
    while step_items(h, run_id).get("two", {}).get("status", {}).get("S") != "success":
        assert time.monotonic() < deadline, "the sink never succeeded"
        time.sleep(0.05)
    assert lost, "no finish was attempted"
    assert rt.runs.view(run_id)["status"] == "running"
    rt.clients.dynamodb.meta.events.unregister("provide-client-params.dynamodb", die)
    sink = step_items(h, run_id)["two"]
    lease_end = float(sink["wake_at"]["N"])
    assert lease_end > float(sink["finished_at"]["N"])
    h.start_sweeper()
    view = h.wait(run_id, timeout=30)
    assert view["status"] == RunStatus.SUCCESS.value
