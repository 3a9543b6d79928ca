"""Listing every workflow's runs reads the `recent-keys` index's partitions (LIST_SHARDS
of them, and the one rows written before sharding used) and merges them newest first: no
one partition key takes every start's write, and a listing pages through every run once,
in one order. A stack deployed with the old, ALL-projected listing indexes lists the
same before, during and after its migration to the KEYS_ONLY ones."""

from __future__ import annotations

import time
from typing import Any

from infra.indexes import index_steps
from infra.stack import Deadline, converge_indexes
from infra.template import data_resources_template
from orchestrator.adapters.store.codec import LIST_SHARDS, LISTED_LEGACY, listed_key
from tests.support.legacy import RUNS_INDEXES_BEFORE_22

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  a:
    steps:
      one: { backend: fn, route: /echo }
  b:
    steps:
      one: { backend: fn, route: /echo }
"""


def test_runs_spread_over_partitions_list_newest_first_page_after_page(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    rt = h.rt
    ids = [rt.runs.start("a" if i % 2 else "b", {"i": i})[0].run_id for i in range(30)]
    # One run written before sharding, under the single old partition key.
    legacy = rt.runs.start("a", {"old": True})[0].run_id
    rt.clients.dynamodb.update_item(
        TableName=rt.settings.names.runs_table, Key={"run_id": {"S": legacy}},
        UpdateExpression="SET listed = :l", ExpressionAttributeValues={":l": {"S": LISTED_LEGACY}})
    assert len({listed_key(r) for r in ids}) > LIST_SHARDS // 2  # spread, not one key
    seen: list[Any] = []
    cursor = None
    for _ in range(20):
        page, cursor = rt.store.runs.list_runs(None, time.time(), limit=7, start=cursor)
        assert len(page) <= 7
        seen += page
        if cursor is None:
            break
    assert cursor is None
    listed = [r.run_id for r in seen]
    assert sorted(listed) == sorted([*ids, legacy])  # every run, once
    order = [(r.created_at, r.run_id) for r in seen]
    # Newest first (created_at is kept to the millisecond in the index).
    assert [int(c * 1000) for c, _ in order] == sorted((int(c * 1000) for c, _ in order),
                                                       reverse=True)


def test_a_status_filter_pages_across_partitions(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt = h.rt
    ids = [rt.runs.start("a", {"i": i})[0].run_id for i in range(12)]
    for run_id in ids[:5]:
        rt.executor.kill(run_id, "test")
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        page, cursor = rt.store.runs.list_runs(None, time.time(), status="killed", limit=2,
                                               start=cursor)
        seen += [r.run_id for r in page]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids[:5])


def _listings(rt: Any) -> dict[str, list[tuple[str, str]]]:
    """Every listing the API offers, paged through: (run id, status) newest first."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, workflow, status in (("all", None, None), ("a", "a", None),
                                   ("killed", None, "killed"), ("a running", "a", "running")):
        seen: list[tuple[str, str]] = []
        cursor = None
        for _ in range(30):
            page, cursor = rt.store.runs.list_runs(workflow, time.time(), status=status, limit=3,
                                              start=cursor)
            seen += [(r.run_id, r.shown_status) for r in page]
            if cursor is None:
                break
        assert cursor is None
        out[name] = seen
    return out


def test_a_stack_with_the_old_listing_indexes_lists_the_same_all_through_its_migration(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST)
    rt = h.rt
    table = rt.settings.names.runs_table
    props = data_resources_template(rt.settings.prefix)["Resources"]["RunsTable"]["Properties"]
    # The table as a stack deployed before issue 22 has it: ALL-projected listing indexes.
    old = {**props, "GlobalSecondaryIndexes": RUNS_INDEXES_BEFORE_22}
    converge_indexes(rt.clients, table, old, Deadline("old layout", 30))
    queried: list[str] = []
    rt.clients.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.Query",
        lambda params, **_: queried.append(params.get("IndexName", "")))
    ids = [rt.runs.start("a" if i % 3 else "b", {"i": i})[0].run_id for i in range(10)]
    for run_id in ids[:4]:
        rt.executor.kill(run_id, "test")
    want = _listings(rt)
    assert [r for r, _ in want["all"]] == list(reversed(ids))
    assert [r for r, _ in want["killed"]] == list(reversed(ids[:4]))
    assert [r for r, _ in want["a running"]] == [ids[i] for i in reversed(range(4, 10))
                                                  if i % 3]
    assert {q for q in queried if q} <= {"by-workflow", "recent", "by-workflow-keys",
                                         "recent-keys"}
    assert {"by-workflow", "recent"} <= set(queried)  # read from the old indexes
    # The migration, one index at a time (what `orchestrator deploy` staged on AWS):
    # every listing the same after each step.
    for step in index_steps(RUNS_INDEXES_BEFORE_22, props["GlobalSecondaryIndexes"]):
        converge_indexes(rt.clients, table, {**props, "GlobalSecondaryIndexes": step},
                         Deadline("migration step", 30))
        queried.clear()
        assert _listings(rt) == want
    assert set(queried) == {"by-workflow-keys", "recent-keys"}  # the old ones are gone
