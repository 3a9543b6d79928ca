"""A run with one sink ends in the write after that sink's success: no count, no read of
the run, no query of its rows. Where that finish does not hold (a cancel or a halt
flagged meanwhile, a run too old for its rows' expiry to be taken on trust), the step is
counted as before and the verified finish decides."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from orchestrator.adapters.store import Lease
from orchestrator.engine.context import RunContext
from orchestrator.engine.states import RunStatus
from orchestrator.services.execution.tally import Tally
from tests.support.harness import Harness, claim_step

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one:   { backend: fn, route: /echo }
      two:   { backend: fn, route: /echo, dependsOn: [one] }
      three: { backend: fn, route: /echo, dependsOn: [two] }
  forked:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo }
  grouped:
    concurrency: { group: g }
    steps:
      one: { backend: fn, route: /echo }
"""


def worker_requests(h: Harness) -> list[tuple[str, str]]:
    """(operation, table) of every DynamoDB request made off the main thread from now
    on: the workers' (the test's own reads run on the main thread)."""
    seen: list[tuple[str, str]] = []
    main = threading.main_thread()

    def note(params: dict[str, Any], model: Any, **_: Any) -> None:
        if threading.current_thread() is not main:
            seen.append((model.name, str(params.get("TableName", ""))))

    h.rt.clients.dynamodb.meta.events.register("provide-client-params.dynamodb", note)
    return seen


def test_a_chain_is_finished_by_its_last_steps_worker_with_one_write(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    seen = worker_requests(h)
    h.start_workers()
    run_id = h.start("chain")
    view = h.wait(run_id)
    assert view["status"] == "success"
    runs, steps = h.rt.settings.names.runs_table, h.rt.settings.names.steps_table
    # The run row: read once for the first step's context, written once (the finish).
    assert seen.count(("UpdateItem", runs)) == 1
    assert ("Query", steps) not in seen
    last = max(s["finished_at"] for s in view["steps"])
    assert view["finished_at"] >= last
    types = [e["type"] for e in h.rt.runs.history(run_id)]
    assert types[-1] == "run.success" and types.count("run.success") == 1


def test_a_run_with_two_sinks_is_still_counted_and_verified(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    seen = worker_requests(h)
    h.start_workers()
    run_id = h.start("forked")
    assert h.wait(run_id)["status"] == "success"
    assert ("Query", h.rt.settings.names.steps_table) in seen


def test_a_run_holding_a_group_releases_it_when_its_one_sink_finishes_it(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers()
    first, second = h.start("grouped"), h.start("grouped")
    assert h.wait(first)["status"] == "success"
    assert h.wait(second)["status"] == "success"  # admitted by the first one's release


def sink_done(h: Harness, run_id: str) -> tuple[Any, RunContext]:
    """Run `chain` by hand up to its sink's recorded success: (that row, the context)."""
    rt = h.rt
    t0 = time.time()
    done: Any = None
    run = rt.store.runs.get_run(run_id, t0)
    assert run is not None
    for step, dep in (("one", None), ("two", "one"), ("three", "two")):
        if dep is not None:  # the start left its row out: the promotion creates it
            rt.store.steps.promote(run_id, step, 1, None, t0, all_deps=[dep],
                                   plan=RunContext.of(run).plan(step))
        claim_step(rt, run_id, step, 1, Lease("w", t0 + 60), t0)
        done = rt.store.steps.record_success(run_id, step, 1, "w", output_json="{}",
                                             output_ref=None, size=2, now=time.time())
    run = rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    return done, RunContext.of(run)


def test_a_cancel_between_the_sinks_success_and_the_finish_wins(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    rt = h.rt
    run_id = h.start("chain")
    done, ctx = sink_done(h, run_id)
    assert ctx.ends_with == "three"
    rt.store.runs.request_kill(run_id, "changed my mind", time.time())
    assert not rt.executor.end_with(done, ctx)  # guarded: the cancel is flagged
    tally = Tally()
    tally.add(run_id)
    rt.executor.flush(tally)
    assert rt.runs.view(run_id)["status"] == RunStatus.KILLED.value


def test_a_run_older_than_its_rows_expiry_allows_is_finished_by_the_verified_path(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST, ttl_success=100.0, ttl_failed=100.0)
    rt = h.rt
    run_id = h.start("chain")
    done, ctx = sink_done(h, run_id)
    old = dataclasses.replace(ctx, started_at=ctx.started_at - 20)  # > a tenth of 100 s
    assert not rt.executor.end_with(done, old)
    assert rt.runs.view(run_id)["status"] == "running"
    assert rt.executor.end_with(done, ctx)
    run = rt.store.runs.get_run(run_id, time.time())
    assert run is not None and run.status is RunStatus.SUCCESS
    # It expires no later than its first row (each stamped at its finish + 100 s).
    rows = rt.store.steps.query_steps(run_id)
    assert run.expires_at is not None and all(r.expires_at is not None for r in rows)
    assert run.expires_at <= min(r.expires_at or 0.0 for r in rows)
