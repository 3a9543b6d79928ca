"""A wide join's count, kept apart from its row: which of its dependencies succeeded, in
small items of the steps table under the run's partition (sort keys from `~`, after the
run's step rows, beside a durable run's journal):

| step (sort key)   | what                                                           |
|-------------------|----------------------------------------------------------------|
| `~c#<join>#<k>`   | chunk k: `satisfied`, the places counted (0 to CHUNK - 1 in it) |
| `~c#<join>#`      | `satisfied`, the chunks complete (a join of one chunk has none) |

A join of `WIDE_JOIN` dependencies or more is counted here; a narrower one in its row's
`satisfied` set (step_promotions.satisfy). A dependency is named by its place in the join's
`dependsOn` (Definition.places): chunk `place // CHUNK`, number `place % CHUNK` in it.

Why apart: DynamoDB bills a write by the larger of the item's size before and after it,
whatever the write changes. A join's row holds its dependencies' names (500 of them
are 3.4 KB), and a set of the names counted grew on it to as much again: each count
written into the row cost 4 to 6 write units. A chunk item holds at most CHUNK small
numbers (under 1 KB with the longest run id and step name), so a count costs 1 unit for
each chunk it touches (one, mostly: a worker folds the completions it saw, which come
in dispatch order) and a chunk's completion 1 more, flat from 8 dependencies to 10,000.
The join's row is written as many times as any step's: created by the start, promoted,
claimed, recorded.

Idempotent: every count is a set (`ADD`), so a copy of a completion counts once. Every
call that finds a chunk complete marks it in the head (again an `ADD`), and every call
that finds every chunk complete promotes (a compare-and-swap on the join's row guarded
by `blocked`: exactly one wins). A count cut short between its writes is finished by the
next copy of any of its completions; lost for good (its worker died), it leaves the join
blocked with every dependency done, which the sweeper promotes (engine/reconcile.py).
Each write stamps the item's expiry (the steps' retention) as it counts."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.step_promotions import StepPromotions
from orchestrator.adapters.store.step_writes import Lease
from orchestrator.adapters.store.tables import Item, step_key
from orchestrator.engine.records import StepRecord

__all__ = ["CHUNK", "COUNTS", "WIDE_JOIN", "JoinCounts", "count_items"]

# A join with at least this many dependencies is counted apart from its row (and a
# worker folds its completions: services/promotions.FOLD_FROM is this).
WIDE_JOIN = 8
# Places per chunk item: 200 numbers of 1 to 3 digits are 500 bytes, which leaves room
# under 1 KB for the longest run id and step name (about 150 and 128 bytes).
CHUNK = 200
COUNTS = "~c#"


def _chunk_key(join: str, k: int | None) -> str:
    return f"{COUNTS}{join}#" if k is None else f"{COUNTS}{join}#{k}"


def _chunk_size(k: int, ndeps: int) -> int:
    return min(CHUNK, ndeps - k * CHUNK)


def _chunks(places: Collection[int], ndeps: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p in places:
        if not 0 <= p < ndeps:
            raise ValueError(f"place {p} is not one of {ndeps} dependencies")
        out.setdefault(p // CHUNK, []).append(p % CHUNK)
    return out


def count_items(run_id: str, join: str, places: Collection[int], ndeps: int,
                expires_at: float) -> list[Item]:
    """The items of a count that starts with `places` (a rerun's join whose reused
    dependencies count as done): one per chunk touched, and the head if one is complete."""
    chunks = _chunks(places, ndeps)
    exp = num(expires_at)
    items: list[Item] = [
        {**step_key(run_id, _chunk_key(join, k)), "expires_at": exp,
         "satisfied": {"NS": [str(x) for x in sorted(set(xs))]}}
        for k, xs in sorted(chunks.items())]
    done = [k for k, xs in chunks.items() if len(set(xs)) >= _chunk_size(k, ndeps)]
    if done and math.ceil(ndeps / CHUNK) > 1:
        items.append({**step_key(run_id, _chunk_key(join, None)), "expires_at": exp,
                      "satisfied": {"NS": [str(k) for k in sorted(done)]}})
    return items


class JoinCounts(StepPromotions):
    """The counts of wide joins, and the promotion they lead to."""

    def satisfy_many(
        self, run_id: str, step: str, places: Collection[int], ndeps: int, now: float,
        *, lease: Lease | None = None,
    ) -> StepRecord | None:
        """Count the dependencies at `places` (of the join's `ndeps`) as succeeded. The
        row if this call promoted the join (blocked -> ready, or dispatched under
        `lease`), else None: not complete yet, or promoted (or skipped) already."""
        if not self.count(run_id, step, places, ndeps, now):
            return None
        return self.promote(run_id, step, ndeps, lease, now, counted=True)

    def count(self, run_id: str, join: str, places: Collection[int], ndeps: int,
              now: float) -> bool:
        """Add `places` to the join's count; whether the count is then complete."""
        exp = num(now + self.step_retention)
        complete = []
        for k, xs in sorted(_chunks(places, ndeps).items()):
            counted = self._add(run_id, join, k, xs, exp)
            if counted >= _chunk_size(k, ndeps):
                complete.append(k)
        if not complete:
            return False
        chunks = math.ceil(ndeps / CHUNK)
        return chunks == 1 or self._add(run_id, join, None, complete, exp) >= chunks

    def _add(self, run_id: str, join: str, k: int | None, numbers: list[int],
             exp: dict[str, str]) -> int:
        """ADD `numbers` to one item's set: how many it then holds."""
        key = _chunk_key(join, k)
        values: dict[str, Any] = {":n": {"NS": sorted({str(x) for x in numbers})}, ":exp": exp}
        with _translate(f"step {run_id}/{join}: count {len(numbers)} in {key}"):
            resp = self.ddb.update_item(
                TableName=self.steps, Key=step_key(run_id, key),
                UpdateExpression="ADD satisfied :n SET expires_at = :exp",
                ExpressionAttributeValues=values,
                # The item is small: all of it back costs nothing more, and a set that
                # did not change (a copy) still comes back, unlike UPDATED_NEW's answer.
                ReturnValues="ALL_NEW",
            )
        return len(resp.get("Attributes", {}).get("satisfied", {}).get("NS", []))
