"""What a run cost: its AWS requests, counted where they are made and stored with the run
at no extra request.

- **Counting.** `install(client)` registers one handler on a boto3 client's events
  (`request-created`, which botocore emits once per request it makes, each of its own
  retries included, just before the request is signed and sent: unlike `before-send`,
  every handler of it runs, so an emulator that answers requests in-process from a
  `before-send` handler of its own hides none). A request made inside
  `metered(run_id)` (a contextvar: per thread, and per asyncio task) is counted for
  that run, by "service.Operation"
  (e.g. "dynamodb.UpdateItem"). A request made outside any `metered` scope (a listing,
  a sweep's scan of the wake index, a schedule's tick, an empty receive) is no run's.
- **Who is metered.** The worker around each message it handles (the message names
  its run), the API around a run's start, cancel and signals, the sweeper around the
  work it does for one run. A request that carries several runs' work (a receive of ten
  messages, a batch delete of their receipts) is the first run's: the counts are whole
  requests, never fractions.
- **Pending counts.** Counts wait in this process's `Meter` for the run (one per run id,
  shared by the threads working for it, the newest `KEEP` runs kept) until a write of
  that run is made anyway: `carry(run_id, op)` hands them to the write, which stores them
  on its row (adapters/store/tables.py: `$`-prefixed numeric attributes, one per
  operation, added to what the row holds). The write counts itself: its own request is
  in what it carries (and the event of its first send is not counted again); a retry
  of it by botocore is counted afresh, for the next write. A write that fails gives
  back what it carried.
- **What is lost.** A request made after the last write of its run in this process
  (the finish write's own retries, a poll loop's batch delete of the last messages,
  an API process's dispatch of a run's roots, sent after the run's row is written, when
  the worker runs in another process) waits in its
  Meter for a later write of the same run in this process; if none comes, it is
  dropped (with the Meter, when the process ends or `KEEP` newer runs push it out).
  Counts are a lower bound, never an invention.

Stored keys are short (`CODES`: "dU" is dynamodb.UpdateItem): every byte of a row is
billed at each of its writes (1 WRU per KB), and only operations with counts are stored.
An operation outside `CODES` is stored under its service's "other" code."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "CODES",
    "PREFIX",
    "Meter",
    "carry",
    "charge",
    "current",
    "decode",
    "encode",
    "install",
    "metered",
    "pending",
    "summed",
]

# The stored attributes' prefix: no other attribute of a run or step row starts with it.
PREFIX = "$"
# service.Operation -> the short code it is stored under (a row's attribute PREFIX+code).
CODES: dict[str, str] = {
    "dynamodb.GetItem": "dG",
    "dynamodb.PutItem": "dP",
    "dynamodb.UpdateItem": "dU",
    "dynamodb.DeleteItem": "dD",
    "dynamodb.Query": "dQ",
    "dynamodb.Scan": "dS",
    "dynamodb.BatchGetItem": "dBG",
    "dynamodb.BatchWriteItem": "dBW",
    "dynamodb.TransactWriteItems": "dTW",
    "dynamodb.TransactGetItems": "dTG",
    "dynamodb.other": "d?",
    "sqs.SendMessage": "qS",
    "sqs.SendMessageBatch": "qSB",
    "sqs.ReceiveMessage": "qR",
    "sqs.DeleteMessage": "qD",
    "sqs.DeleteMessageBatch": "qDB",
    "sqs.ChangeMessageVisibility": "qV",
    "sqs.ChangeMessageVisibilityBatch": "qVB",
    "sqs.other": "q?",
    "s3.PutObject": "sP",
    "s3.GetObject": "sG",
    "s3.HeadObject": "sH",
    "s3.DeleteObject": "sD",
    "s3.ListObjectsV2": "sL",
    "s3.other": "s?",
}
_OPS = {code: op for op, code in CODES.items()}
METERED = ("dynamodb", "sqs", "s3")
# Runs whose pending counts a process keeps (least recently counted first out).
KEEP = 4096

_current: ContextVar[str | None] = ContextVar("orchestrator_metered_run", default=None)


class Meter:
    """One run's pending counts in this process (thread-safe)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        # Requests already in a carried count, whose event is not counted again.
        self.credits: dict[str, int] = {}
        self.lock = threading.Lock()

    def sent(self, op: str) -> None:
        with self.lock:
            if self.credits.get(op):
                self.credits[op] -= 1
                return
            self.counts[op] = self.counts.get(op, 0) + 1

    def add(self, counts: Mapping[str, int]) -> None:
        with self.lock:
            for op, n in counts.items():
                if n:
                    self.counts[op] = self.counts.get(op, 0) + n

    def take(self, own: str | None, *, skip_send: bool) -> dict[str, int]:
        """Every pending count, and one for `own` (a write about to be sent); with
        `skip_send`, its send will come through `sent` and is not counted again."""
        with self.lock:
            counts, self.counts = self.counts, {}
            if own is not None:
                counts[own] = counts.get(own, 0) + 1
                if skip_send:
                    self.credits[own] = self.credits.get(own, 0) + 1
        return counts


_meters: OrderedDict[str, Meter] = OrderedDict()
_meters_lock = threading.Lock()


def _meter(run_id: str) -> Meter:
    with _meters_lock:
        m = _meters.get(run_id)
        if m is None:
            m = _meters[run_id] = Meter()
            while len(_meters) > KEEP:
                _meters.popitem(last=False)
        else:
            _meters.move_to_end(run_id)
        return m


def _on_request(event_name: str = "", **_: Any) -> None:
    run_id = _current.get()
    if run_id is None:
        return  # on no run's behalf
    # "request-created.dynamodb.UpdateItem" -> "dynamodb.UpdateItem"
    _meter(run_id).sent(event_name.split(".", 1)[1])


def install(client: Any) -> Any:
    """Count `client`'s requests for the runs they are made for; returns the client."""
    client.meta.events.register("request-created", _on_request,
                                unique_id="orchestrator-metering")
    return client


def current() -> str | None:
    """The run the requests made here are counted for, if any."""
    return _current.get()


@contextmanager
def metered(run_id: str | None) -> Iterator[None]:
    """Count the requests made inside for `run_id` (None: for no run)."""
    token = _current.set(run_id)
    try:
        yield
    finally:
        _current.reset(token)


def charge(run_id: str, op: str, n: int = 1) -> None:
    """Count `n` requests made outside `run_id`'s scope for it (a receive, counted once
    its messages say whose they are)."""
    _meter(run_id).add({op: n})


def pending(run_id: str) -> dict[str, int]:
    """The counts of `run_id` not carried yet (a copy)."""
    m = _meter(run_id)
    with m.lock:
        return dict(m.counts)


@contextmanager
def carry(run_id: str, own: str | None) -> Iterator[dict[str, int]]:
    """The pending counts of `run_id`, for a write of that run to store: `own` is the
    write's own operation, counted in them (its first send is then not counted again).
    If the write raises, the counts go back to the run's meter."""
    here = _current.get()
    # Its own request is counted here unless the handler counts it: for the run in
    # scope, when that is another run's.
    counts = _meter(run_id).take(own if here in (None, run_id) else None,
                                 skip_send=here == run_id)
    try:
        yield counts
    except BaseException:
        _meter(run_id).add(counts)
        raise


def encode(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts by stored attribute name (PREFIX + code), nonzero ones only."""
    out: dict[str, int] = {}
    for op, n in counts.items():
        if n:
            code = CODES.get(op) or CODES.get(f"{op.split('.', 1)[0]}.other", "d?")
            out[PREFIX + code] = out.get(PREFIX + code, 0) + n
    return out


def decode(item: Mapping[str, Any]) -> dict[str, int]:
    """The counts a DynamoDB item holds, by "service.Operation"."""
    out: dict[str, int] = {}
    for key, value in item.items():
        if key.startswith(PREFIX) and "N" in value:
            op = _OPS.get(key[len(PREFIX):], key[len(PREFIX):])
            out[op] = out.get(op, 0) + int(value["N"])
    return out


def summed(*counts: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for op, n in c.items():
            out[op] = out.get(op, 0) + n
    return out
