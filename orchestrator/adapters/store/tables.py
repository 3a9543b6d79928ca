"""The two DynamoDB tables behind `Store`, and what its row classes share: the client and
table names (`Tables`), a step row's key, and the history entry each transition appends."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import encode
from orchestrator.adapters.store.codec import history_entry, num
from orchestrator.adapters.tallies import Tallies
from orchestrator.engine.attempts import backoff
from orchestrator.engine.states import Move
from orchestrator.engine.wakes import WakeTimes
from orchestrator.errors import ConditionFailed
from orchestrator.settings import ResourceNames
from orchestrator.strict_json import dumps

__all__ = [
    "BATCH_TRIES", "HISTORY", "Item", "Tables", "WakeKey", "batch_rounds", "history_clause",
    "landed", "short_error", "status_guard", "status_set", "step_key", "with_requests",
]

Item = dict[str, Any]

HISTORY = "#h = list_append(if_not_exists(#h, :nil), :h)"

# What DynamoDB leaves of a batch request (UnprocessedItems, UnprocessedKeys: it lacked
# the capacity) is sent again, up to BATCH_TRIES sendings in all, each after a pause that
# doubles from BATCH_PAUSE up to BATCH_PAUSE_CAP, jittered: sent again at once, it meets
# the same want of capacity (AWS asks for an exponential backoff).
BATCH_TRIES = 10
BATCH_PAUSE = 0.05
BATCH_PAUSE_CAP = 1.0


def batch_rounds(sleep: Callable[[float], object],
                 rand: Callable[[], float] = random.random) -> Iterator[int]:
    """The sendings of one batch request (0 to BATCH_TRIES - 1), with the pause before
    each after the first (engine/attempts.py's backoff: half of it fixed, half random).
    The caller breaks out when nothing is left unprocessed."""
    for i in range(BATCH_TRIES):
        if i:
            sleep(backoff("exponential", BATCH_PAUSE, BATCH_PAUSE_CAP, i, rand()))
        yield i


def status_guard(move: Move, values: dict[str, Any], only: Any = None) -> str:
    """The condition `#s IN (...)` of `move` (narrowed to `only`, which must be among
    its sources), with its values added to `values`."""
    sources = move.sources if only is None else frozenset(only)
    if not sources <= move.sources:
        raise ValueError(f"move {move.name}: {sorted(sources)} not among its sources")
    names = []
    for i, st in enumerate(sorted(sources)):
        values[f":from{i}"] = {"S": st.value}
        names.append(f":from{i}")
    return f"#s = {names[0]}" if len(names) == 1 else f"#s IN ({', '.join(names)})"


def status_set(move: Move, values: dict[str, Any]) -> str:
    """The `#s = :to` assignment of `move`, with its value added to `values`."""
    assert move.target is not None, move.name
    values[":to"] = {"S": move.target.value}
    return "#s = :to"


def history_clause(values: dict[str, Any], at: float, kind: str, **fields: Any) -> str:
    """The SET clause that appends one history entry (names need `#h`)."""
    values[":nil"] = {"L": []}
    values[":h"] = {"L": [history_entry(at, kind, **fields)]}
    return HISTORY


_ADD = re.compile(r"(?:^|\s)ADD\s")


def with_requests(update: str, counts: Mapping[str, int], names: dict[str, str],
                  values: dict[str, Any]) -> str:
    """`update` made to also add `counts` (a write's carried request counts,
    adapters/metering.py) to its row's, each operation's in an attribute of its own:
    DynamoDB adds to top-level numbers only. Names and values go in `names`, `values`."""
    pairs = []
    for i, (attr, n) in enumerate(sorted(encode(counts).items())):
        names[f"#rq{i}"] = attr
        values[f":rq{i}"] = num(n)
        pairs.append(f"#rq{i} :rq{i}")
    if not pairs:
        return update
    found = _ADD.search(update)
    if found is None:
        return f"{update} ADD {', '.join(pairs)}"
    # One ADD clause a write: these join the one it has.
    return f"{update[:found.end()]}{', '.join(pairs)}, {update[found.end():]}"


def short_error(error: dict[str, Any]) -> dict[str, Any]:
    """An error as kept in history: its code and the first 300 characters."""
    raw = error.get("message") or error.get("reason") or ""
    # A function's error body is JSON: keep it JSON, never a language's printout of it.
    message = raw if isinstance(raw, str) else dumps(raw)
    return {"code": error.get("code"), "message": message[:300]}


def landed(exc: ConditionFailed, move: Move, mine: Item, found: Item | None = None) -> Item:
    """The row a failed guard found (`found`, else the one `exc` carries), if it is this
    very write's effect: the row has the move's status and every attribute of `mine`
    (values only this write sets, such as its own timestamp). That is the write landing
    once and its answer being lost: botocore sent it again (a read timeout) and the
    second copy found the first one's effect. Anything else re-raises `exc`."""
    item = exc.item if found is None else found
    want_all = {"status": {"S": str(move.target or "")}, **mine}
    if not item:
        raise exc
    for name, want in want_all.items():
        have = item.get(name)
        if have is None or have.keys() != want.keys():
            raise exc
        if "N" in want:
            if Decimal(have["N"]) != Decimal(want["N"]):
                raise exc
        elif have != want:
            raise exc
    return item


def step_key(run_id: str, step: str) -> Item:
    return {"run_id": {"S": run_id}, "step": {"S": step}}


@dataclass(frozen=True)
class WakeKey:
    """A row whose wake fell in a sweep's window, as the `wake` index gives it: the
    row's key (`step` None for a run row) and its wake time."""

    run_id: str
    wake_at: float
    step: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> WakeKey:
        step = item.get("step")
        return cls(str(item["run_id"]["S"]), float(item["wake_at"]["N"]),
                   None if step is None else str(step["S"]))


class Tables:
    """The DynamoDB client and the names of the runs and steps tables."""

    def __init__(
        self,
        dynamodb: Any,
        names: ResourceNames,
        *,
        step_retention: float = 30 * 24 * 3600.0,
        wake: WakeTimes | None = None,
        blobs: Any = None,
        inline_limit: int = 32 * 1024,
        tallies: Tallies | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.ddb = dynamodb
        # The pause between the sendings of a batch request's unprocessed part.
        self.sleep = sleep
        # What this process's writes did, counted for the stack's metrics (runs started
        # and finished: adapters/tallies.py), flushed by its heartbeat.
        self.tallies = tallies or Tallies()
        # Where a value too large for an item goes (a durable run's journal entries).
        self.blobs = blobs
        self.inline_limit = inline_limit
        self.runs = names.runs_table
        self.steps = names.steps_table
        # The search index's items (run_search.py) are the control table's.
        self.control_table = names.control_table
        # Every write stamps the row's next wake (engine/wakes.py) in the same request.
        self.wake = wake or WakeTimes()
        # A step row's terminal write stamps its expiry (the longest run retention) in
        # the same request, so finishing a run does not write its rows again.
        self.step_retention = step_retention

    def batch_rounds(self) -> Iterator[int]:
        """`batch_rounds` with this store's sleep."""
        return batch_rounds(self.sleep)

    def landed(self, exc: ConditionFailed, move: Move, mine: Item, table: str,
               key: Item) -> Item:
        """`landed` on the row the failed guard found: the copy the failure carries
        (ReturnValuesOnConditionCheckFailure=ALL_OLD) or, from an endpoint that ignores
        that parameter and sends none (dynalite), the row read again, strongly
        consistent. A read can only see a later state than the guard did, which fails the
        check, never passes it wrongly: no other write sets the values of `mine`. AWS and
        moto send the row whenever there is one: they are read again only where none is."""
        found = exc.item
        if found is None:
            with _translate(f"{table}: the row a failed guard found"):
                found = self.ddb.get_item(TableName=table, Key=key,
                                          ConsistentRead=True).get("Item")
        return landed(exc, move, mine, found)

    def woken(self, table: str, shard: int, after: float, upto: float) -> list[WakeKey]:
        """The keys of the rows of `table` whose wake falls in (after, upto], from the
        sparse `wake` index (eventually consistent: callers re-read what they act on)."""
        keys: list[WakeKey] = []
        kwargs: dict[str, Any] = {
            "TableName": table,
            "IndexName": "wake",
            "KeyConditionExpression": "wake_shard = :s AND wake_at BETWEEN :a AND :b",
            "ExpressionAttributeValues": {
                ":s": {"N": str(shard)}, ":a": num(after + 0.001), ":b": num(upto),
            },
        }
        while True:
            with _translate(f"wakes of {table}"):
                resp = self.ddb.query(**kwargs)
            keys.extend(WakeKey.from_item(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return keys
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
