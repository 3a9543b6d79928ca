"""Listing runs newest first, of one workflow or of all, optionally of one status
(`GET /runs`): the keys from a listing index, then the rows they name.

The listing indexes are KEYS_ONLY: `by-workflow-keys` (workflow, created_at) and
`recent-keys` (listed, created_at; `listed` spreads every run over LIST_SHARDS keys).
An index entry is written when a run is created and never again: nothing a later write
changes (status, times, counts, flags) is in it. The ALL-projected `by-workflow` and
`recent` they replace copied the whole row, so every write of a run row (its finish
above all) cost a write unit in each, and a run with a large input or definition more.
What a listing shows of a run is read from its row (one BatchGetItem per page, an
eventually consistent read: 0.5 read unit a run), and a status filter applies to it.

A stack deployed before holds the old indexes until its migration creates the new ones
(README, "Upgrading a deployed stack"): a listing reads the old index of the same keys
while the new one is missing or backfilling (the capability is checked by the query
itself, and again after LEGACY_RECHECK seconds), and the new one once it answers."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby, islice
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import LIST_SHARDS, LISTED_LEGACY, run_from_item
from orchestrator.adapters.store.tables import Item, Tables
from orchestrator.engine.records import RunRecord
from orchestrator.errors import StoreError, UsageError

__all__ = ["LEGACY_RECHECK", "LISTINGS", "RunListing"]

# Each listing: (its index, the index it replaces; same keys, ALL-projected).
LISTINGS = {"by-workflow": ("by-workflow-keys", "by-workflow"),
            "recent": ("recent-keys", "recent")}
# After a query found the new index missing, the old one is read for this long before
# the new one is tried again.
LEGACY_RECHECK = 60.0
# What a listing shows of a run (the definition and input can be large).
_SHOWN = ("run_id, workflow, #s, created_at, finished_at, expires_at, started_at, #t,"
          " rerun_of, listed, paused")
_SHOWN_NAMES = {"#s": "status", "#t": "trigger"}
# A page with a status filter reads at most this many pages' worth of runs before it
# answers with what it found and a cursor to go on from.
_READS_PER_PAGE = 20


def _no_index(exc: StoreError) -> bool:
    """Whether a query failed because its index is not there to read (not created yet,
    still backfilling, or dropped): AWS says ValidationException, moto
    ResourceNotFoundException."""
    error = getattr(exc.__cause__, "response", {}).get("Error", {})
    message = str(error.get("Message", "")).lower()
    return (error.get("Code") in ("ValidationException", "ResourceNotFoundException")
            and any(s in message for s in ("specified index", "backfilling", "invalid index")))


class RunListing(Tables):
    """Reads of the runs table's listing indexes, and of the rows they name."""

    _legacy_until = 0.0  # until when the old listing indexes are read first

    def _query_listing(self, listing: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One Query of `listing`'s index (the new one, or the old one while a deployed
        stack lacks it). The two have the same keys: a page's LastEvaluatedKey from one
        goes on in the other."""
        new, old = LISTINGS[listing]
        first = old if time.monotonic() < self._legacy_until else new
        try:
            return self._query(first, kwargs)
        except StoreError as exc:
            if not _no_index(exc):
                raise
        # Missing: the stack is being migrated (or was, and the old one is gone now).
        self._legacy_until = time.monotonic() + LEGACY_RECHECK if first == new else 0.0
        return self._query(old if first == new else new, kwargs)

    def _query(self, index: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        with _translate(f"runs listed by {index}"):
            resp: dict[str, Any] = self.ddb.query(TableName=self.runs, IndexName=index,
                                                  ScanIndexForward=False, **kwargs)
        return resp

    def _keys(self, listing: str, cond: str, values: dict[str, Any], page: int,
              start: Item | None = None) -> Iterator[Item]:
        """The index entries of one key, newest first, read `page` at a time as they are
        taken."""
        kwargs: dict[str, Any] = {"KeyConditionExpression": cond,
                                  "ExpressionAttributeValues": values, "Limit": page}
        if start:
            kwargs["ExclusiveStartKey"] = start
        while True:
            resp = self._query_listing(listing, kwargs)
            yield from resp.get("Items", [])
            last = resp.get("LastEvaluatedKey")
            if last is None:
                return
            kwargs["ExclusiveStartKey"] = last

    def _shown(self, run_ids: list[str], also: Iterable[str] = ()) -> dict[str, Item]:
        """The rows of `run_ids` as a listing shows them (eventually consistent, like
        the index that named them; a run gone meanwhile is left out), with the
        attributes `also` (a search's check reads the fields it names)."""
        more = sorted(set(also))
        projection = _SHOWN + "".join(f", #{a}" for a in more)
        names = {**_SHOWN_NAMES, **{f"#{a}": a for a in more}}
        found: dict[str, Item] = {}
        for i in range(0, len(run_ids), 100):
            request: dict[str, Any] = {self.runs: {
                "Keys": [{"run_id": {"S": r}} for r in run_ids[i : i + 100]],
                "ProjectionExpression": projection, "ExpressionAttributeNames": names,
            }}
            for _ in self.batch_rounds():
                with _translate("runs listed: their rows"):
                    resp = self.ddb.batch_get_item(RequestItems=request)
                for item in resp.get("Responses", {}).get(self.runs, []):
                    found[item["run_id"]["S"]] = item
                request = resp.get("UnprocessedKeys") or {}
                if not request:
                    break
            else:
                raise StoreError("runs listed: DynamoDB kept keys unread")
        return found

    def _page(self, entries: Iterable[Item], now: float, status: str | None, limit: int,
              cursor: Callable[[Item], Item]) -> tuple[list[RunRecord], Item | None]:
        """Up to `limit` runs of `entries` (index entries, newest first) as their rows
        show them, of `status` if given, and the cursor after the last one taken (None:
        there is no more). Only as many rows are read as the page still needs."""
        runs: list[RunRecord] = []
        it = iter(entries)
        last: Item | None = None
        for _ in range(_READS_PER_PAGE):
            batch = list(islice(it, limit - len(runs)))
            if not batch:
                return runs, None
            rows = self._shown([e["run_id"]["S"] for e in batch])
            for entry in batch:
                last = entry
                item = rows.get(entry["run_id"]["S"])
                if item is None:
                    continue  # deleted (expired) since the index named it
                run = run_from_item(item)
                if run.expires_at is not None and run.expires_at <= now:
                    continue
                if status is None or run.shown_status == status:
                    runs.append(run)
            if len(runs) >= limit and last is not None:
                more = next(it, None) is not None
                return runs, cursor(last) if more else None
        # A rare status: what was found so far, and where to go on from.
        return runs, None if last is None else cursor(last)

    def list_runs(
        self,
        workflow: str | None,
        now: float,
        *,
        status: str | None = None,
        limit: int = 20,
        start: Item | None = None,
    ) -> tuple[list[RunRecord], Item | None]:
        """Runs newest first (of one workflow, or all), optionally of one status, and
        the cursor of the next page (None: this is the last).

        A status filter is applied to the rows read, so a page may hold fewer than
        `limit` runs while the cursor still leads on (reading stops after
        _READS_PER_PAGE pages' worth of runs)."""
        if workflow is None:
            return self._list_all(now, status=status, limit=limit, start=start)
        entries = self._keys("by-workflow", "workflow = :w", {":w": {"S": workflow}},
                             limit + 1, start)
        return self._page(entries, now, status, limit,
                          lambda e: {k: e[k] for k in ("run_id", "workflow", "created_at")})

    def _list_all(
        self, now: float, *, status: str | None, limit: int, start: Item | None
    ) -> tuple[list[RunRecord], Item | None]:
        """Every workflow's runs newest first: each partition of the `recent` listing
        read newest first from the cursor's place on (the run it names excluded),
        merged. The order is (created_at, run_id), so runs started in the same
        millisecond in two partitions come in one order page after page. The cursor is
        the last run's key."""
        below: tuple[int, str] | None = None
        if start is not None:
            try:
                below = (int(start["created_at"]["N"]), start["run_id"]["S"])
            except (KeyError, ValueError):
                raise UsageError("cursor: not a cursor this API returned") from None
        parts = [self._partition(p, below, limit + 1)
                 for p in [*(f"runs#{i}" for i in range(LIST_SHARDS)), LISTED_LEGACY]]
        merged = (e for _, e in heapq.merge(*parts, key=lambda pair: pair[0], reverse=True))
        return self._page(merged, now, status, limit, lambda e: {
            "run_id": e["run_id"], "created_at": e["created_at"],
            "listed": e.get("listed", {"S": LISTED_LEGACY})})

    def _partition(self, part: str, below: tuple[int, str] | None,
                   page: int) -> Iterator[tuple[tuple[int, str], Item]]:
        """The entries of one partition of `recent` ordered before `below`, newest
        first, with their order keys. Runs of the same millisecond come in no order
        from the index (it sorts by created_at alone): each such group is put in the
        merge's order (run ids descending) before it is given out."""
        values: dict[str, Any] = {":p": {"S": part}}
        cond = "listed = :p"
        if below is not None:
            cond += " AND created_at <= :c"
            values[":c"] = {"N": str(below[0])}
        entries = self._keys("recent", cond, values, page)
        for created, group in groupby(entries, key=lambda e: int(e["created_at"]["N"])):
            for entry in sorted(group, key=lambda e: e["run_id"]["S"], reverse=True):
                key = (created, entry["run_id"]["S"])
                if below is None or key < below:
                    yield key, entry
