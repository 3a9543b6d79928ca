"""A wide fan-in's completions are folded: a worker counts the successes of a join's
dependencies (FOLD_FROM of them or more) in one write per flush, not one per dependency,
into small count items apart from the join's row (adapters/store/join_counts.py). The
count is the size of a set, so copies count once and the promotion still happens
exactly once; folds lost with their worker are the sweeper's to repair."""

from __future__ import annotations

import threading
import time
from typing import Any

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.store import Lease
from orchestrator.adapters.store.join_counts import COUNTS
from orchestrator.engine.context import RunContext
from orchestrator.engine.states import StepStatus
from orchestrator.services.execution.promotions import FOLD_FROM
from orchestrator.services.execution.tally import Tally
from tests.support.harness import Harness, claim_step, steps_of
from tests.support.testfns import Recorder

WIDTH = 12
assert WIDTH >= FOLD_FROM
CHILDREN = [f"c{i:02d}" for i in range(WIDTH)]
MANIFEST = (
    'backends:\n  fn: { url: "${FN}" }\nworkflows:\n  wide:\n    steps:\n'
    "      root: { backend: fn, route: /echo }\n"
    + "".join(
        f"      {c}: {{ backend: fn, route: /slow, payload: {{ seconds: 0.3 }},"
        " dependsOn: [root] }\n" for c in CHILDREN)
    + f"      join: {{ backend: fn, route: /echo, dependsOn: [{', '.join(CHILDREN)}] }}\n"
)


def join_counts(h: Harness) -> list[list[str]]:
    """The dependencies named by every count of `join` written from now on (its count
    items hold their places in its `dependsOn`: CHILDREN's order, one chunk). A count
    written into the join's own row fails the test."""
    seen: list[list[str]] = []
    lock = threading.Lock()

    def note(params: dict[str, Any], **_: Any) -> None:
        step = params.get("Key", {}).get("step", {}).get("S")
        if "ADD satisfied" not in params.get("UpdateExpression", ""):
            return
        assert step != "join", "a wide join's count was written into its row"
        if step == f"{COUNTS}join#0":
            places = params["ExpressionAttributeValues"][":n"]["NS"]
            with lock:
                seen.append([CHILDREN[int(p)] for p in places])

    h.rt.clients.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.UpdateItem", note)
    return seen


def counted(h: Harness, run_id: str) -> list[str]:
    """The dependencies the join's count item holds."""
    item = h.rt.clients.dynamodb.get_item(
        TableName=h.rt.settings.names.steps_table, ConsistentRead=True,
        Key={"run_id": {"S": run_id}, "step": {"S": f"{COUNTS}join#0"}})["Item"]
    return sorted(CHILDREN[int(p)] for p in item["satisfied"]["NS"])


def test_a_wide_fan_in_is_counted_in_fewer_writes_than_it_has_dependencies(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(MANIFEST)
    counts = join_counts(h)
    h.start_workers(threads=WIDTH)  # every child in flight at once, landing together
    run_id = h.start("wide")
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert sorted(d for batch in counts for d in batch) == CHILDREN  # each counted once
    assert len(counts) <= WIDTH // 2, counts
    calls = recorder.for_step(run_id, "join")
    assert len(calls) == 1
    assert sorted(calls[0].body["steps"]) == CHILDREN


def by_hand_up_to_the_join(h: Harness, run_id: str, fold: Any) -> None:
    """Run root and every child through the executor, handing the join's counts to
    `fold` (a worker's fold)."""
    rt = h.rt
    run = rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    ctx = RunContext.of(run)
    now = time.time()
    root = claim_step(rt, run_id, "root", 1, Lease("w#1", now + 60), now)
    rt.executor.succeed(root, ctx, "{}", None, 2, Tally(), keep_one=None)
    for i, child in enumerate(CHILDREN):
        row = rt.store.steps.satisfy(run_id, child, "root", 1, Lease(f"w#{i + 2}", now + 60),
                                     time.time(), plan=ctx.plan(child))
        assert row is not None and row.status is StepStatus.DISPATCHED
        rt.executor.succeed(row, ctx, "{}", None, 2, Tally(), keep_one=None, fold=fold)


def test_counts_given_twice_or_split_promote_the_join_once(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt = h.rt
    run_id = h.start("wide")
    folded: list[tuple[str, str, str, int]] = []
    by_hand_up_to_the_join(h, run_id, lambda *a: folded.append(a))
    assert [f[2] for f in folded] == CHILDREN and {f[3] for f in folded} == {WIDTH}
    half = WIDTH // 2
    assert not rt.executor.satisfy_many(run_id, "join", CHILDREN[:half], WIDTH)
    assert not rt.executor.satisfy_many(run_id, "join", CHILDREN[:2], WIDTH)  # copies
    assert rt.executor.satisfy_many(run_id, "join", CHILDREN[half - 1:], WIDTH)
    assert not rt.executor.satisfy_many(run_id, "join", CHILDREN[-2:], WIDTH)  # late copy
    join = rt.store.steps.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.READY
    assert counted(h, run_id) == CHILDREN
    assert join.satisfied == frozenset()  # the row holds no count


def test_folding_scopes_that_overlap_fold_until_the_last_one_ends(
    harness_factory: Any,
) -> None:
    # `dev --lambda` and the cost bench run a mapping's invocations at once in one
    # process: the first to end must not stop the others' folding.
    h = harness_factory(MANIFEST.replace("/slow, payload: { seconds: 0.3 }", "/echo"))
    rt = h.rt
    run_id = h.start("wide")
    run = rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    now = time.time()
    root = claim_step(rt, run_id, "root", 1, Lease("w#1", now + 60), now)
    rt.executor.succeed(root, RunContext.of(run), "{}", None, 2, Tally(), keep_one=None)
    counts = join_counts(h)
    w = rt.worker()
    with w.folding():  # the second invocation
        with w.folding():  # the first, which ends first
            pass
        for child in CHILDREN:
            w.handle(Dispatch(run_id=run_id, step=child, attempt=1, after="root",
                              ready_at=now))
        assert counts == []  # folded, not written yet
    assert len(counts) == 1 and sorted(counts[0]) == CHILDREN
    join = rt.store.steps.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.READY


def test_folds_lost_with_their_worker_are_repaired_by_the_sweeper(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("wide")
    lost: list[Any] = []
    by_hand_up_to_the_join(h, run_id, lambda *a: lost.append(a))  # never flushed
    assert len(lost) == WIDTH
    join = h.rt.store.steps.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.BLOCKED
    h.start_sweeper()
    h.start_workers()
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert steps_of(view)["join"]["attempts"] == 1
    assert len(recorder.for_step(run_id, "join")) == 1
