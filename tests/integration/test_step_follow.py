"""A follower of a DAG run (GET /runs/{id}) reads what can have changed since its last
look, and sees exactly what a whole read sees (services/reads/step_follow.py).

Each test moves the rows itself, through the store's own guarded writes (no worker: each
look is taken when nothing moves), and compares every look with a whole read of the same
rows. What each look asked of the emulator is counted from the client's own requests."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.adapters.store import Lease
from orchestrator.engine.context import RunContext
from orchestrator.engine.states import StepStatus
from tests.support.harness import Harness, claim_step

N = 30
MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
$CHAIN
  branches:
    onFailure: continue-independent
    steps:
      root:  { backend: fn, route: /echo }
      bad:   { backend: fn, route: /echo, dependsOn: [root] }
      below: { backend: fn, route: /echo, dependsOn: [bad] }
      good:  { backend: fn, route: /echo, dependsOn: [root] }
      join:  { backend: fn, route: /echo, dependsOn: [below, good] }
""".replace("$CHAIN", "\n".join(
    f"      s{i:02d}: {{ backend: fn, route: /echo"
    + (f", dependsOn: [s{i - 1:02d}] }}" if i else " }") for i in range(N)))


class Asked:
    """The requests a look made, and the items their answers carried."""

    def __init__(self, h: Harness) -> None:
        self.calls: list[tuple[str, int]] = []
        self.scanned: list[int] = []  # each query's rows read (before its filter)
        events = h.rt.clients.dynamodb.meta.events
        events.register("after-call.dynamodb", self._seen)

    def _seen(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        items = len(parsed.get("Items", [])) + sum(
            len(v) for v in parsed.get("Responses", {}).values())
        self.calls.append((model.name, items))
        if "ScannedCount" in parsed:
            self.scanned.append(parsed["ScannedCount"])

    def take(self) -> list[tuple[str, int]]:
        out, self.calls = self.calls, []
        return out


def whole(h: Harness, run_id: str) -> list[dict[str, Any]]:
    """The view's steps from a whole read, by a service that never looked before."""
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    rows = RunContext.of(run).rows(h.rt.store.steps.query_steps(run_id, shown=True))
    from orchestrator.services.reads.views import run_view

    return run_view(run, rows, h.rt.executor.load_output)["steps"]  # type: ignore[no-any-return]


def look(h: Harness, run_id: str) -> list[dict[str, Any]]:
    steps = h.rt.runs.view(run_id)["steps"]
    assert steps == whole(h, run_id)
    return steps  # type: ignore[no-any-return]


def succeed(h: Harness, run_id: str, step: str, dependant: str | None, now: float) -> None:
    """What a worker does: record `step`'s success, then promote and claim its dependant
    (created from the plan: the start left it out)."""
    h.rt.store.steps.record_success(run_id, step, 1, "w", output_json=f'{{"{step}": 1}}',
                                    output_ref=None, size=9, now=now)
    if dependant is not None:
        ctx = h.rt.executor.context(run_id)
        assert h.rt.store.steps.satisfy(run_id, dependant, step, 1, Lease("w", 30.0), now,
                                        plan=ctx.plan(dependant)) is not None


def run_the_chain(h: Harness, run_id: str, *, look_before_the_last: bool = False) -> None:
    """Every step of the chain succeeds, each promoting and claiming the next; the run
    is finished. `look_before_the_last`: a look while the last step is in flight."""
    now = time.time()
    claim_step(h.rt, run_id, "s00", 1, Lease("w", 30.0), now)
    for i in range(N - 1):
        succeed(h, run_id, f"s{i:02d}", f"s{i + 1:02d}", now)
    if look_before_the_last:
        look(h, run_id)
    succeed(h, run_id, f"s{N - 1:02d}", None, now)
    h.rt.executor.finish_if_done(run_id)


def test_a_chain_look_reads_the_step_in_flight_and_the_ones_that_ended(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("chain")
    asked = Asked(h)
    now = time.time()
    look(h, run_id)
    asked.take()
    claim_step(h.rt, run_id, "s00", 1, Lease("w", 30.0), now)
    for i in range(N - 1):
        succeed(h, run_id, f"s{i:02d}", f"s{i + 1:02d}", now)
        if i % 3:
            continue  # some looks come after several steps
        asked.take()
        asked.scanned.clear()
        steps = h.rt.runs.view(run_id)["steps"]
        calls = asked.take()
        (scanned,) = asked.scanned
        assert steps == whole(h, run_id)
        assert {s["step"]: s["status"] for s in steps}[f"s{i + 1:02d}"] == "dispatched"
        # One read of the run, one query that answered the one step in flight, and the
        # steps that ended since the previous look, by key.
        assert [c for c in calls if c[0] == "Query"] == [("Query", 1)], calls
        assert sum(n for op, n in calls if op == "BatchGetItem") <= 3, calls
        # The query read the rows from the first step kept as not terminal on (the one
        # in flight at the previous look) to the last row written: not the ones that
        # had ended by then.
        assert scanned == (i + 1) - max(i - 2, 0) + 1, (i, scanned)
    succeed(h, run_id, f"s{N - 1:02d}", None, now)
    steps = look(h, run_id)
    assert {s["status"] for s in steps} == {"success"}


def test_a_run_that_succeeded_is_brought_up_to_date_and_then_costs_no_query(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("chain")
    look(h, run_id)
    run_the_chain(h, run_id, look_before_the_last=True)
    asked = Asked(h)
    view = h.rt.runs.view(run_id)
    calls = asked.take()
    assert view["status"] == "success"
    assert view["steps"] == whole(h, run_id)
    assert [op for op, _ in calls if op != "GetItem"] == ["Query", "BatchGetItem"], calls
    asked.take()
    for _ in range(2):
        assert h.rt.runs.view(run_id)["steps"] == view["steps"]
        assert [op for op, _ in asked.take()] == ["GetItem"]  # the run alone


def test_skips_below_a_failure_and_a_join_are_seen_as_a_whole_read_sees_them(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("branches")
    now = time.time()
    look(h, run_id)
    claim_step(h.rt, run_id, "root", 1, Lease("w", 30.0), now)
    look(h, run_id)
    ctx = h.rt.executor.context(run_id)
    h.rt.store.steps.record_success(run_id, "root", 1, "w", output_json="1", output_ref=None,
                                    size=1, now=now)
    for step in ("bad", "good"):
        h.rt.store.steps.satisfy(run_id, step, "root", 1, Lease("w", 30.0), now,
                                 plan=ctx.plan(step))
    look(h, run_id)
    h.rt.store.steps.record_failure(run_id, "bad", 1, "w", error={"code": "http_error",
                                                                  "message": "no"}, now=now)
    look(h, run_id)
    # The failure's branch is skipped below it (the row the start left out is created
    # skipped), and the join with it.
    for step, statuses in (("below", (StepStatus.BLOCKED,)), ("join", (StepStatus.BLOCKED,))):
        h.rt.store.steps.skip(run_id, step, statuses, "dependency did not succeed", now,
                              plan=ctx.plan(step))
    steps = look(h, run_id)
    assert {s["step"]: s["status"] for s in steps} == {
        "root": "success", "bad": "failed", "below": "skipped", "good": "dispatched",
        "join": "skipped"}
    h.rt.store.steps.record_success(run_id, "good", 1, "w", output_json="2", output_ref=None,
                                    size=1, now=now)
    steps = look(h, run_id)
    assert {s["step"]: s["status"] for s in steps}["good"] == "success"


def test_a_cancelled_run_is_read_whole(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("chain")
    look(h, run_id)
    h.rt.runs.kill(run_id, "enough")
    steps = look(h, run_id)
    assert {s["status"] for s in steps} == {"skipped"}


def test_a_run_id_used_again_after_its_run_expired_is_read_afresh(
    harness_factory: Any,
) -> None:
    """A succeeded run is kept with every row terminal (its looks make no query). Its id,
    once the run expired, may name a new run: that run's rows are read, not the old."""
    h = harness_factory(MANIFEST)
    (run, _) = h.rt.runs.start("chain", None, "reused-id")
    run_id = run.run_id
    run_the_chain(h, run_id)
    assert {s["status"] for s in look(h, run_id)} == {"success"}
    # Expired: DynamoDB's TTL deleted the run's row and its step rows.
    ddb, store = h.rt.clients.dynamodb, h.rt.store
    ddb.delete_item(TableName=store.names.runs_table, Key={"run_id": {"S": run_id}})
    for row in store.steps.query_steps(run_id):
        ddb.delete_item(TableName=store.names.steps_table,
                                    Key={"run_id": {"S": run_id}, "step": {"S": row.step}})
    (again, created) = h.rt.runs.start("chain", None, "reused-id")
    assert created and again.created_at != run.created_at
    steps = look(h, run_id)  # equal to a whole read of the new run's rows
    assert {s["step"]: s["status"] for s in steps}["s00"] != "success"
