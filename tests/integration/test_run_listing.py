"""Listing every workflow's runs reads the `recent` index's partitions (LIST_SHARDS of
them, and the one rows written before sharding used) and merges them newest first: no
one partition key takes every start's write, and a listing pages through every run once,
in one order."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.adapters.store.codec import LIST_SHARDS, LISTED_LEGACY, listed_key

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
