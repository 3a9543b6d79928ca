"""Finding runs by what they carried: the search index's items in the control table, and
the query that reads them (`GET /runs?q=`). The terms and the query language are
engine/search.py's.

An index item is one term of one run: pk `find#<term>#<shard>`, sk `<ms>#<run id>`
(the run's creation time, so a term's partition lists its runs newest first). The shard
is the run id's (FIND_SHARDS of them), so a term every run has (`trigger.source=api`)
spreads its writes over that many partitions. An item carries `expires_at`: the run's
retention, counted from its creation for the terms written then (input, trigger), from
its finish for the others (output, error).

Writes: a run's creation writes its input's and trigger's terms before its row; its
finish, its error's (and a succeeding run its output's) before the finish's write.
Each is one BatchWriteItem of at most MAX_TERMS (24) items of under 1 KB: as many write
units, $1.25 a million on demand. Written before the row, so a process that dies in
between leaves a term naming a run that is not there (a query skips it), never a run
without its terms; a creation that loses to an earlier one of the same run id (a
trigger repeated) leaves terms under its own time, which a query skips too (the row's
creation time is not theirs). A term a write that then lost left (a debounce after its
burst closed, a finish that lost to a cancel) names a run whose row says otherwise: a
query checks each row it reads against its clauses (engine/search.py's `matches`, on the
row's input, error and trigger) and leaves out a run that does not carry what it asked.
An output is not on the run row (its sinks' rows hold it): a succeeding run's output
terms are taken on the index's word, and a run that did not succeed has none.

Reads (`find_runs`): one clause drives (its terms' partitions read newest first, in
pages, merged); each page of candidates is checked against the other clauses by
BatchGetItem of their items' keys (a point read each), then its rows are read (with the
fields the query names: a projection costs the same read units as the whole row), checked
against every clause, and the status and workflow filters applied, as a listing does.
No read scans a table: a query reads the driving partitions as deep as its page needs,
at most FIND_READS candidates a page before it answers with what it found and a cursor
to go on from."""

from __future__ import annotations

import heapq
import json
import zlib
from collections.abc import Iterator, Mapping
from itertools import groupby, islice
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num, run_from_item
from orchestrator.adapters.store.control_keys import ms_key
from orchestrator.adapters.store.run_listing import RunListing
from orchestrator.adapters.store.tables import Item
from orchestrator.engine.records import RunRecord
from orchestrator.engine.search import Clause, Query, field_of, matches, terms_of
from orchestrator.engine.states import RunStatus
from orchestrator.errors import StoreError, UsageError

__all__ = ["FIND_READS", "FIND_SHARDS", "RunSearch"]

FIND_SHARDS = 4
# Candidates a page of a query looks at, at most, before it answers.
FIND_READS = 2000
_PAGE = 100  # candidates checked together (a BatchGetItem holds 100 keys)


def _shard(run_id: str) -> int:
    return zlib.crc32(run_id.encode()) % FIND_SHARDS


def _pk(term: str, shard: int) -> str:
    return f"find#{term}#{shard}"


def _sk(created_at: float, run_id: str) -> str:
    return f"{ms_key(created_at)}#{run_id}"


# The fields of a run a query's check reads from its row (a trigger is read anyway:
# a listing shows it); an output is not on the row.
_HELD = ("input", "error")


def _carries(query: Query, found: set[str], item: Item, held: set[str],
             run: RunRecord) -> bool:
    """Whether the row `item` (read with the fields `held`, those of _HELD the query
    names) has what every clause of `query` asks, by the terms of it the index holds
    (`found`) checked against its own fields (engine/search.py's matches)."""
    fields: dict[str, Any] = {"trigger": _json(item, "trigger")}
    fields.update((f, _json(item, f)) for f in held)
    if run.status is not RunStatus.SUCCESS:
        fields["output"] = None  # indexed only with a success (a finish that lost)
    return matches(query, found, fields)


def _json(item: Item, key: str) -> Any:
    raw = item.get(key, {}).get("S")
    return None if raw is None else json.loads(raw)


class RunSearch(RunListing):
    """The search index's writes (with a run's creation and finish) and its query."""

    search = True  # whether runs are indexed (Store(search=False): not, nor searched)

    def index_run(self, run_id: str, created_at: float, fields: Mapping[str, Any],
                  expires_at: float) -> int:
        """Write the terms of `fields` (engine/search.py's terms_of) for the run: one
        BatchWriteItem. The number of terms written."""
        if not self.search:
            return 0
        terms = terms_of(fields)
        if not terms:
            return 0
        shard, sk = _shard(run_id), _sk(created_at, run_id)
        request: dict[str, Any] = {self.control_table: [
            {"PutRequest": {"Item": {"pk": {"S": _pk(t, shard)}, "sk": {"S": sk},
                                     "expires_at": num(expires_at)}}}
            for t in terms]}
        for _ in self.batch_rounds():
            with _translate(f"run {run_id}: search terms"):
                resp = self.ddb.batch_write_item(RequestItems=request)
            request = resp.get("UnprocessedItems") or {}
            if not request:
                return len(terms)
        raise StoreError(f"run {run_id}: search terms: DynamoDB kept items unwritten")

    # ---- the query ----------------------------------------------------------------------

    def _term_entries(self, term: str, below: str | None,
                      since: float | None) -> Iterator[tuple[str, str]]:
        """(sk, term) of each run `term` names, newest first, below `below` (an sk) and
        not created before `since`, across its shards."""
        parts = [self._partition_of(_pk(term, s), below, since) for s in range(FIND_SHARDS)]
        for sk in heapq.merge(*parts, reverse=True):
            yield sk, term

    def _partition_of(self, pk: str, below: str | None, since: float | None) -> Iterator[str]:
        if below is not None and since is not None and below < ms_key(since):
            # A cursor from before `since` (a page of a search with an earlier one):
            # nothing lies between, and DynamoDB refuses a BETWEEN whose bounds cross.
            return
        cond = "pk = :p"
        values: dict[str, Any] = {":p": {"S": pk}}
        if below is not None and since is not None:
            cond += " AND sk BETWEEN :lo AND :hi"
            values[":lo"], values[":hi"] = {"S": ms_key(since)}, {"S": below}
        elif below is not None:
            cond += " AND sk < :hi"
            values[":hi"] = {"S": below}
        elif since is not None:
            cond += " AND sk >= :lo"
            values[":lo"] = {"S": ms_key(since)}
        kwargs: dict[str, Any] = {"TableName": self.control_table,
                                  "KeyConditionExpression": cond,
                                  "ExpressionAttributeValues": values,
                                  "ProjectionExpression": "sk", "ScanIndexForward": False,
                                  "Limit": _PAGE}
        while True:
            with _translate("runs searched: a term's runs"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                sk = item["sk"]["S"]
                if below is None or sk < below:  # BETWEEN is inclusive
                    yield sk
            last = resp.get("LastEvaluatedKey")
            if last is None:
                return
            kwargs["ExclusiveStartKey"] = last
            kwargs["Limit"] = min(1000, kwargs["Limit"] * 2)

    def _candidates(self, clause: Clause, below: str | None,
                    since: float | None) -> Iterator[tuple[str, set[str]]]:
        """The sks of the runs matching `clause` (any of its terms), newest first, each
        once, with the terms of it the index holds for each."""
        merged = heapq.merge(*(self._term_entries(t, below, since) for t in clause.terms),
                             reverse=True)
        for sk, group in groupby(merged, key=lambda pair: pair[0]):
            yield sk, {term for _, term in group}

    def _having(self, clause: Clause, sks: list[str]) -> dict[str, set[str]]:
        """Which of `sks` match `clause`, with the terms of it the index holds for each:
        a point read of each of its terms' items."""
        terms = {_pk(t, s): t for t in clause.terms for s in range(FIND_SHARDS)}
        keys = [{"pk": {"S": _pk(t, _shard(sk.partition("#")[2]))}, "sk": {"S": sk}}
                for sk in sks for t in clause.terms]
        found: dict[str, set[str]] = {}
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {self.control_table: {
                "Keys": keys[i:i + 100], "ProjectionExpression": "pk, sk"}}
            for _ in self.batch_rounds():
                with _translate("runs searched: a clause's terms"):
                    resp = self.ddb.batch_get_item(RequestItems=request)
                for it in resp.get("Responses", {}).get(self.control_table, []):
                    found.setdefault(it["sk"]["S"], set()).add(terms[it["pk"]["S"]])
                request = resp.get("UnprocessedKeys") or {}
                if not request:
                    break
            else:
                raise StoreError("runs searched: DynamoDB kept keys unread")
        return found

    def find_runs(
        self,
        query: Query,
        now: float,
        *,
        workflow: str | None = None,
        status: str | None = None,
        since: float | None = None,
        limit: int = 20,
        start: Item | None = None,
    ) -> tuple[list[RunRecord], Item | None]:
        """Runs matching `query` (every clause), newest first, of `workflow` and
        `status` if given, created at `since` or later if given; and the cursor of the
        next page (None: this is the last). A page may hold fewer than `limit` runs
        while the cursor leads on (it read FIND_READS candidates)."""
        if not query:
            raise UsageError("q: nothing to search for")
        below = None
        if start is not None:
            try:
                below = str(start["find"]["S"])
            except KeyError:
                raise UsageError("cursor: not a cursor this search returned") from None
        # The clause with fewest alternatives drives (an exact path's one term rather
        # than a free word's four), the longest term among those (a rarer value).
        driver = min(query.clauses, key=lambda c: (len(c.terms), -max(map(len, c.terms))))
        others = [c for c in query.clauses if c is not driver]
        held = {field_of(t) for c in query.clauses for t in c.terms} & set(_HELD)
        it = self._candidates(driver, below, since)
        runs: list[RunRecord] = []
        listed: set[str] = set()
        looked = 0
        last: str | None = None
        while looked < FIND_READS:
            # As many candidates as the page still needs (and one more, to know whether
            # there are more): each read row costs its whole size in read units.
            page = list(islice(it, min(_PAGE, limit - len(runs) + 1)))
            if not page:
                return runs, None
            looked += len(page)
            # The terms the index holds of each candidate, of every clause so far.
            hits = dict(page)
            for clause in others:
                having = self._having(clause, list(hits))
                hits = {sk: found | having[sk] for sk, found in hits.items() if sk in having}
                if not hits:
                    break
            ids = {sk: sk.partition("#")[2] for sk in hits}
            rows = self._shown(sorted(set(ids.values())), also=held) if ids else {}
            for sk, _ in page:
                last = sk
                item = rows.get(ids.get(sk, ""))
                if item is None:
                    continue
                # Shown as a listing shows it: without the fields read for the check.
                run = run_from_item({k: v for k, v in item.items() if k not in held})
                if run.run_id in listed or abs(
                        round(run.created_at * 1000) - int(sk.partition("#")[0])) > 1:
                    # A term of an attempt at creating this run id that lost to an
                    # earlier one (a trigger sent twice): the run is listed at its own
                    # creation's entry (its row keeps whole milliseconds), once.
                    continue
                listed.add(run.run_id)
                if run.expires_at is not None and run.expires_at <= now:
                    continue
                if not _carries(query, hits[sk], item, held, run):
                    continue  # a term a write that lost left (see the module's doc)
                if workflow is not None and run.workflow != workflow:
                    continue
                if status is not None and run.shown_status != status:
                    continue
                runs.append(run)
                if len(runs) >= limit:
                    more = page[-1][0] != sk or next(it, None) is not None
                    return runs, {"find": {"S": sk}} if more else None
        return runs, None if last is None else {"find": {"S": last}}
