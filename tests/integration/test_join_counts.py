"""A wide join's count, kept apart from its row in items of at most CHUNK places
(adapters/store/join_counts.py): whatever the order, the splits and the copies of its
completions, the join is promoted once, by the count that completes it; a count cut
short between its writes is finished by a copy; a rerun's reused dependencies count
from the start; and no count item bills more than one write unit."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from typing import Any

from orchestrator.adapters.store.join_counts import CHUNK, COUNTS, count_items
from orchestrator.engine.states import StepStatus
from tests.bench.capacity import item_size
from tests.support.harness import Harness

WIDTH = 2 * CHUNK + 50  # three chunks: two full, one not
CHILDREN = [f"c{i:03d}" for i in range(WIDTH)]
MANIFEST = (
    'backends:\n  fn: { url: "${FN}" }\nworkflows:\n  wide:\n    steps:\n'
    "      root: { backend: fn, route: /echo }\n"
    + "".join(f"      {c}: {{ backend: fn, route: /echo, dependsOn: [root] }}\n"
              for c in CHILDREN)
    + f"      join: {{ backend: fn, route: /echo, dependsOn: [{', '.join(CHILDREN)}] }}\n"
)


def count_writes(h: Harness) -> list[dict[str, Any]]:
    """Every count item written from now on (the items as they stand after the write,
    read back), and a check that nothing counts into the join's row."""
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    def note(params: dict[str, Any], **_: Any) -> None:
        if "ADD satisfied" in params.get("UpdateExpression", ""):
            assert params["Key"]["step"]["S"].startswith(COUNTS), params["Key"]

    def after(parsed: dict[str, Any], **_: Any) -> None:
        item = parsed.get("Attributes", {})
        if item.get("step", {}).get("S", "").startswith(COUNTS):
            with lock:
                seen.append(item)

    events = h.rt.clients.dynamodb.meta.events
    events.register("provide-client-params.dynamodb.UpdateItem", note)
    events.register("after-call.dynamodb.UpdateItem", after)
    return seen


def test_a_join_wider_than_a_chunk_is_promoted_once_by_split_and_copied_counts(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    store = h.rt.store.steps
    run_id = h.start("wide")  # no worker: the counts are given here
    writes = count_writes(h)
    rng = random.Random(22)
    order = list(range(WIDTH))
    rng.shuffle(order)
    promoted = []
    given = 0
    while given < WIDTH:
        n = rng.randint(1, 12)
        batch = order[given:given + n]
        given += n
        if given >= WIDTH:
            # A copy of counts given before comes first: it completes nothing.
            assert store.satisfy_many(run_id, "join", order[:5], WIDTH, time.time()) is None
        row = store.satisfy_many(run_id, "join", batch + order[:2], WIDTH, time.time())
        if row is not None:
            promoted.append(given)
    assert promoted == [given]  # by the count that completed it, and only that one
    # Late copies promote nothing twice.
    assert store.satisfy_many(run_id, "join", order[:40], WIDTH, time.time()) is None
    join = store.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.READY
    assert join.satisfied == frozenset()  # the join's row holds no count
    assert writes and max(item_size(i) for i in writes) < 1024


def test_a_count_cut_short_between_its_writes_is_finished_by_a_copy(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    store = h.rt.store.steps
    run_id = h.start("wide")
    # Every dependency counted, but the write marking the first chunk complete was
    # lost with its worker: the head names the other two only.
    steps = h.rt.settings.names.steps_table
    for item in count_items(run_id, "join", range(CHUNK, WIDTH), WIDTH, time.time() + 60):
        h.rt.clients.dynamodb.put_item(TableName=steps, Item=item)
    assert store.satisfy_many(run_id, "join", range(CHUNK - 1), WIDTH, time.time()) is None
    # The last place of the first chunk comes; the chunk is complete, the head too.
    row = store.satisfy_many(run_id, "join", [CHUNK - 1], WIDTH, time.time())
    assert row is not None and row.status is StepStatus.READY
    # Now cut short after the chunk's write: a copy of any of its places finishes it.
    run2 = h.start("wide")
    for item in count_items(run2, "join", range(CHUNK, WIDTH), WIDTH, time.time() + 60):
        h.rt.clients.dynamodb.put_item(TableName=steps, Item=item)
    for item in count_items(run2, "join", range(CHUNK), WIDTH, time.time() + 60)[:1]:
        h.rt.clients.dynamodb.put_item(TableName=steps, Item=item)  # chunk 0, no head
    row = store.satisfy_many(run2, "join", [7], WIDTH, time.time())
    assert row is not None and row.status is StepStatus.READY


def test_a_reruns_reused_dependencies_count_from_its_start(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    store = h.rt.store.steps
    run_id = h.start("wide")
    join = store.get_step(run_id, "join")
    assert join is not None and join.status is StepStatus.BLOCKED
    # A rerun's start writes its join with the reused dependencies satisfied
    # (engine/rerun.py): here all but the last three.
    reused = frozenset(CHILDREN[:-3])
    store.put_steps([replace(join, run_id="re-" + run_id, satisfied=reused)])
    rerun = "re-" + run_id
    assert store.satisfy_many(rerun, "join", [WIDTH - 3, WIDTH - 2], WIDTH, time.time()) is None
    row = store.satisfy_many(rerun, "join", [WIDTH - 1], WIDTH, time.time())
    assert row is not None and row.status is StepStatus.READY
