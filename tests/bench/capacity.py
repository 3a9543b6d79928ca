"""What AWS would bill for the DynamoDB and SQS requests the clients of a benchmark make,
computed with AWS's published rules from botocore's own events (the emulator's
`ReturnConsumedCapacity` answers are constants: moto says 1.0 for a 3 KB put and 0.5
for a strongly consistent 9 KB read, where DynamoDB bills 3 and 3; tests/bench/cost.py
checks that again on every run).

`Meter(clients, reader)` hooks `before-parameter-build`, `before-call` and `after-call`
of the counted DynamoDB and SQS clients; `reader` is a client of its own (no hooks, its
requests counted nowhere) that reads the items' sizes. Every request is attributed to a
role (the Lambda function it ran in, `Meter.role`, else the thread's name).

**Item size** (AWS, "DynamoDB item sizes and formats"): the sum over attributes of the
UTF-8 length of the name plus the value's size: a string its UTF-8 bytes; a number 1
byte per two significant digits (leading and trailing zeros trimmed) plus 1; binary its
raw bytes; a Boolean or null 1 byte; a list or map 3 bytes plus its elements, each with
1 byte of overhead (a map element also counts its name); a set the sum of its elements.
The 100 bytes of per-item overhead are storage only, not counted here.

**Writes** (AWS, "DynamoDB read and write operations", capacity unit consumption for
write operations; "Amazon DynamoDB pricing for on-demand capacity"):
- PutItem, UpdateItem, DeleteItem: 1 WRU per started 1 KB of the LARGER of the item's
  size before and after the write (a delete: its size before), at least 1;
- a write whose condition fails still consumes: by the existing item's size, at least 1
  (no index write follows);
- BatchWriteItem: each put or delete on its own, as above (unprocessed items excluded);
- TransactWriteItems ("Amazon DynamoDB Transactions: how it works", capacity management
  for transactions: "two underlying reads or writes of every item in the transaction:
  one to prepare the transaction and one to commit it"): each item 2 WRU per started KB
  of the larger of its images (a Put, Update or Delete as above, doubled; a
  ConditionCheck as a write of the item's size, doubled, though it writes nothing). Its
  index writes are not doubled: the indexes are not part of the transaction ("changes
  begin propagating to global secondary indexes" once it completes; a transaction cannot
  target an index), so each costs what the same write costs outside one (as measured
  against DynamoDB by the dynamodb-conformance suite and dynoxide, PR 188). A transaction
  cancelled by a condition (or a conflict) reports no consumed capacity, and AWS
  publishes no rule for it: it is costed as an upper bound, each item as if committed
  (2 WRU per KB of its current size, nothing on indexes), and counted
  (`cancelled_transactions`: the orchestrator cancels one only when two calls commit
  the same journal place, never in a healthy run).

**Global secondary indexes** (AWS, "Using Global Secondary Indexes in DynamoDB",
provisioned throughput considerations: write capacity units), per index of the table as
`DescribeTable` gives it, for a write that landed: an item that enters the index costs
1 WRU per started KB of its index entry (the table's key, the index's key and the
projected attributes: all of them for ALL, none for KEYS_ONLY); an item that leaves it
costs 1; a change of its index key costs 2 writes, a delete (1) and a put (by the entry's
size); a change of projected attributes only costs a put by the entry's size; anything
else costs nothing (so a KEYS_ONLY index costs nothing while its key does not change).
An item is in a (sparse) index when it has every key attribute of the index. The item's
images before and after a write come from `reader`: the last image read back after a
write of that item (kept per key), else a read before the write; the counted clients'
writes to one item are held one at a time between the read before and the read back, so
two writes racing on one item each see their own before and after.

**Reads** ("DynamoDB read and write operations", capacity unit consumption for reads):
- GetItem: 1 RRU per started 4 KB of the whole item (a projection does not reduce it)
  if strongly consistent, half if eventually consistent; an item not found costs the
  minimum (1, or 0.5);
- BatchGetItem: each key as one GetItem (unprocessed keys excluded);
- Query and Scan: the sizes of every item read (before any filter), summed per request
  and rounded up to 4 KB, at least one unit; halved when eventually consistent (an index
  query always is). The items read are found by asking `reader` the same request
  without its filter and projection (an index query gives the index entries, whose
  sizes are what it reads);
- transactional reads (TransactGetItems): twice a strongly consistent read.

**SQS** (AWS, "Amazon SQS pricing"): every action is a request, and each 64 KB chunk of
its payload is billed as one: a SendMessageBatch of ten small messages is one billed
request; a receive is billed by the messages it returns, an empty one as one. The
payload is the message bodies plus their message attributes (names, types, values)."""

from __future__ import annotations

import contextvars
import json
import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Index",
    "Meter",
    "TableShape",
    "Tally",
    "item_size",
    "read_units",
    "table_shapes",
    "value_size",
    "write_cost",
    "write_units",
]

KB = 1024
READ_UNIT = 4 * KB
SQS_CHUNK = 64 * KB
WRITE_OPS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
READ_OPS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}

Item = dict[str, dict[str, Any]]


# ---- sizes ---------------------------------------------------------------------------------


def _number_size(text: str) -> int:
    digits = text.lstrip("+-").split("e")[0].split("E")[0].replace(".", "").strip("0")
    return math.ceil(max(1, len(digits)) / 2) + 1


def _bytes(value: Any) -> int:
    return len(value) if isinstance(value, bytes | bytearray) else len(str(value).encode())


def value_size(value: dict[str, Any]) -> int:
    """The size of one attribute value (a DynamoDB-JSON `{type: value}`), its name apart."""
    (kind, v), = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return _number_size(v)
    if kind == "B":
        return _bytes(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(_number_size(n) for n in v)
    if kind == "BS":
        return sum(_bytes(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Item | None) -> int:
    """AWS's size of an item in bytes (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / KB))


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT))
    return float(units) if consistent else units / 2


# ---- tables --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Index:
    name: str
    keys: tuple[str, ...]
    projection: str  # ALL | KEYS_ONLY | INCLUDE
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableShape:
    name: str
    keys: tuple[str, ...]
    indexes: tuple[Index, ...]

    def key_of(self, item: Item) -> str:
        return json.dumps({k: item[k] for k in self.keys}, sort_keys=True)

    def entry(self, image: Item | None, index: Index) -> Item | None:
        """The item's entry in `index`, or None when it is not in it (sparse)."""
        if image is None or any(k not in image for k in index.keys):
            return None
        if index.projection == "ALL":
            return dict(image)
        names = set(self.keys) | set(index.keys) | set(index.include)
        return {k: v for k, v in image.items() if k in names}

    def index_units(self, old: Item | None, new: Item | None) -> dict[str, int]:
        """WRU per index for a write that turned `old` into `new`."""
        out: dict[str, int] = {}
        for index in self.indexes:
            before, after = self.entry(old, index), self.entry(new, index)
            if before is None and after is None:
                continue
            if before is None:
                units = write_units(item_size(after))
            elif after is None:
                units = 1
            elif any(before[k] != after[k] for k in index.keys):
                units = 1 + write_units(item_size(after))
            elif before != after:
                units = write_units(item_size(after))
            else:
                continue
            out[index.name] = units
        return out


def write_cost(shape: TableShape, before: Item | None, after: Item | None, *,
                transactional: bool = False) -> dict[str, int]:
    """WRU of one item's write that turned `before` into `after` (None: absent), by
    target ("table" and "table/index"): the table 1 WRU per started KB of the larger
    image, 2 in a transaction (prepare and commit); each index as `index_units`, in a
    transaction too (see the top)."""
    units = write_units(max(item_size(before), item_size(after)))
    out = {shape.name: units * (2 if transactional else 1)}
    for name, n in shape.index_units(before, after).items():
        out[f"{shape.name}/{name}"] = n
    return out


def table_shapes(dynamodb: Any, tables: list[str]) -> dict[str, TableShape]:
    """Each table's key and global secondary indexes, as DescribeTable gives them."""
    out = {}
    for name in tables:
        t = dynamodb.describe_table(TableName=name)["Table"]
        indexes = tuple(
            Index(g["IndexName"], tuple(k["AttributeName"] for k in g["KeySchema"]),
                  g["Projection"]["ProjectionType"],
                  tuple(g["Projection"].get("NonKeyAttributes", ())))
            for g in t.get("GlobalSecondaryIndexes", []))
        out[name] = TableShape(name, tuple(k["AttributeName"] for k in t["KeySchema"]), indexes)
    return out


# ---- what was consumed ---------------------------------------------------------------------


@dataclass
class Tally:
    """What one role's requests consumed."""

    requests: Counter[str] = field(default_factory=Counter)  # by operation
    wru: Counter[str] = field(default_factory=Counter)  # by "table" or "table/index"
    rru: defaultdict[str, float] = field(  # by "table" or "table/index"
        default_factory=lambda: defaultdict(float))
    wru_by_op: Counter[str] = field(default_factory=Counter)  # by "table:operation"
    sqs_billed: Counter[str] = field(default_factory=Counter)  # billed requests by operation
    failed_conditions: int = 0
    cancelled_transactions: int = 0
    empty_receives: int = 0

    def add(self, other: Tally) -> None:
        for mine, theirs in ((self.requests, other.requests), (self.wru, other.wru),
                             (self.wru_by_op, other.wru_by_op),
                             (self.sqs_billed, other.sqs_billed)):
            mine.update(theirs)
        for where, units in other.rru.items():
            self.rru[where] += units
        self.failed_conditions += other.failed_conditions
        self.cancelled_transactions += other.cancelled_transactions
        self.empty_receives += other.empty_receives

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests), "wru": dict(self.wru),
            "rru": {k: round(v, 1) for k, v in self.rru.items()},
            "wru_by_op": dict(self.wru_by_op), "sqs_billed": dict(self.sqs_billed),
            "failed_conditions": self.failed_conditions,
            "cancelled_transactions": self.cancelled_transactions,
            "empty_receives": self.empty_receives,
        }


class Meter:
    """Counts and costs the requests of `clients`' DynamoDB and SQS clients by role.

    `capacity` on: the DynamoDB capacity units too (its reads of item sizes cost time:
    keep it off where durations are measured). The SQS chunks cost nothing to count."""

    def __init__(self, clients: Any, reader: Any, shapes: dict[str, TableShape],
                 role_of: Callable[[], str] | None = None) -> None:
        self.reader = reader
        self.shapes = shapes
        self.capacity = False
        self._role: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            "metered_role", default=None)
        self.role_of = role_of or (lambda: threading.current_thread().name)
        self._lock = threading.Lock()
        self._tallies: dict[str, Tally] = defaultdict(Tally)
        self._images: dict[tuple[str, str], Item | None] = {}
        self._key_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        for client, service in ((clients.dynamodb, "dynamodb"), (clients.sqs, "sqs"),
                                (clients.s3, "s3")):
            events = client.meta.events
            events.register(f"before-parameter-build.{service}", self._keep_params)
            events.register(f"after-call.{service}", self._after)
        clients.dynamodb.meta.events.register("before-call.dynamodb", self._before_write)
        clients.dynamodb.meta.events.register("after-call-error.dynamodb", self._release)

    # ---- roles and results -------------------------------------------------------------

    @contextmanager
    def role(self, name: str) -> Iterator[None]:
        """Attribute the requests of this context (its thread, and the tasks and
        threads that copy its context) to `name` meanwhile."""
        token = self._role.set(name)
        try:
            yield
        finally:
            self._role.reset(token)

    def current_role(self) -> str:
        name = self._role.get()
        return name if name is not None else self.role_of()

    def take(self) -> dict[str, Tally]:
        """What each role consumed since the last take; forgets the item images (a
        pass that was not metered may have written since)."""
        with self._lock:
            out, self._tallies = dict(self._tallies), defaultdict(Tally)
            self._images.clear()
        return out

    def _tally(self) -> Tally:
        return self._tallies[self.current_role()]

    # ---- hooks -------------------------------------------------------------------------

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["metered_params"] = params

    def _write_keys(self, op: str, params: dict[str, Any]) -> list[tuple[str, str]]:
        keys: list[tuple[str, str]] = []

        def add(table: str, item: Item) -> None:
            shape = self.shapes.get(table)
            if shape is not None:
                keys.append((table, shape.key_of(item)))

        if op == "PutItem":
            add(params["TableName"], params["Item"])
        elif op in ("UpdateItem", "DeleteItem"):
            add(params["TableName"], params["Key"])
        elif op == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for r in requests:
                    if "PutRequest" in r:
                        add(table, r["PutRequest"]["Item"])
                    else:
                        add(table, r["DeleteRequest"]["Key"])
        elif op == "TransactWriteItems":
            for entry in params["TransactItems"]:
                (_, body), = entry.items()
                add(body["TableName"], body.get("Item") or body["Key"])
        return sorted(set(keys))

    def _before_write(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        if not self.capacity or model.name not in WRITE_OPS:
            return None
        keys = self._write_keys(model.name, context.get("metered_params", {}))
        held = []
        for key in keys:  # in one order: two batches never wait for each other
            lock = self._key_lock(key)
            if lock.acquire(timeout=30):
                held.append(lock)
        context["metered_held"] = held
        with self._lock:
            known = {key: self._images[key] for key in keys if key in self._images}
        known.update(self._read_many([key for key in keys if key not in known]))
        context["metered_old"] = {key: known[key] for key in keys}
        return None  # (a value here would answer the call in botocore's place)

    def _key_lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._lock:
            return self._key_locks[key]

    @staticmethod
    def _release(context: dict[str, Any], **_: Any) -> None:
        for lock in context.pop("metered_held", []):
            lock.release()

    def _image(self, table: str, key_json: str) -> Item | None:
        """The item as it is now, for a read: the last image read back after a write,
        else a read, not kept (only a writer, holding the item's lock, keeps what it
        read: a reader's answer may be older than a write that lands meanwhile)."""
        with self._lock:
            if (table, key_json) in self._images:
                return self._images[(table, key_json)]
        return self._read(table, key_json, keep=False)

    def _read(self, table: str, key_json: str, *, keep: bool = True) -> Item | None:
        got: Item | None = self.reader.get_item(
            TableName=table, Key=json.loads(key_json), ConsistentRead=True).get("Item")
        if keep:
            with self._lock:
                self._images[(table, key_json)] = got
        return got

    def _read_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Item | None]:
        """The items of `keys` as they are now (None: absent), kept: one read of up to a
        hundred, so that metering a batch of 25 rows does not slow it 25-fold."""
        if len(keys) == 1:
            return {keys[0]: self._read(*keys[0])}
        out: dict[tuple[str, str], Item | None] = dict.fromkeys(keys)
        for i in range(0, len(keys), 100):
            pending: dict[str, Any] = {}
            for table, key_json in keys[i:i + 100]:
                pending.setdefault(table, {"Keys": [], "ConsistentRead": True})
                pending[table]["Keys"].append(json.loads(key_json))
            while pending:
                resp = self.reader.batch_get_item(RequestItems=pending)
                for table, items in resp.get("Responses", {}).items():
                    for item in items:
                        out[(table, self.shapes[table].key_of(item))] = item
                pending = resp.get("UnprocessedKeys") or {}
        with self._lock:
            self._images.update(out)
        return out

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any,
               context: dict[str, Any], **_: Any) -> None:
        op = model.name
        params = context.get("metered_params", {})
        try:
            with self._lock:
                tally = self._tally()
                tally.requests[op] += 1
            service = model.service_model.service_name
            if service == "sqs":
                chunks = _sqs_chunks(op, params, parsed)
                with self._lock:
                    tally.sqs_billed[op] += chunks
                    if op == "ReceiveMessage" and not parsed.get("Messages"):
                        tally.empty_receives += 1
                return
            if service != "dynamodb":
                return  # S3: counted by operation only
            if not self.capacity:
                return
            ok = http_response.status_code < 300
            if op in WRITE_OPS:
                self._cost_write(tally, op, params, parsed, ok, context)
            elif op in READ_OPS and ok:
                self._cost_read(tally, op, params, parsed)
        finally:
            self._release(context)

    # ---- writes ------------------------------------------------------------------------

    def _cost_write(self, tally: Tally, op: str, params: dict[str, Any],
                    parsed: dict[str, Any], ok: bool, context: dict[str, Any]) -> None:
        old: dict[tuple[str, str], Item | None] = context.get("metered_old", {})
        code = parsed.get("Error", {}).get("Code", "")
        if not ok:
            if code == "ConditionalCheckFailedException":
                with self._lock:
                    tally.failed_conditions += 1
                    for (table, _), before in old.items():
                        units = write_units(item_size(before))
                        tally.wru[table] += units
                        tally.wru_by_op[f"{table}:{op} (condition failed)"] += units
            elif code == "TransactionCanceledException":
                # No rule published: an upper bound, each item as if committed (the top).
                with self._lock:
                    tally.cancelled_transactions += 1
                    for (table, _), before in old.items():
                        units = 2 * write_units(item_size(before))
                        tally.wru[table] += units
                        tally.wru_by_op[f"{table}:{op} (cancelled, upper bound)"] += units
            return  # a refused request (validation, throttling) consumes nothing
        skipped = _unprocessed(op, parsed, self.shapes)
        landed = [key for key in old if key not in skipped]
        now = self._read_many(landed)
        for key in landed:
            cost = write_cost(self.shapes[key[0]], old[key], now[key],
                              transactional=op == "TransactWriteItems")
            with self._lock:
                for target, units in cost.items():
                    tally.wru[target] += units
                    tally.wru_by_op[f"{target}:{op}"] += units

    # ---- reads -------------------------------------------------------------------------

    def _cost_read(self, tally: Tally, op: str, params: dict[str, Any],
                   parsed: dict[str, Any]) -> None:
        charges: list[tuple[str, float]] = []
        if op == "GetItem":
            table = params["TableName"]
            shape = self.shapes.get(table)
            if shape is not None:
                size = item_size(self._image(table, shape.key_of(params["Key"])))
                charges.append((table, read_units(size, bool(params.get("ConsistentRead")))))
        elif op == "BatchGetItem":
            unprocessed = parsed.get("UnprocessedKeys", {})
            for table, req in params["RequestItems"].items():
                shape = self.shapes.get(table)
                if shape is None:
                    continue
                skip = {shape.key_of(k) for k in unprocessed.get(table, {}).get("Keys", [])}
                for k in req["Keys"]:
                    key_json = shape.key_of(k)
                    if key_json not in skip:
                        size = item_size(self._image(table, key_json))
                        charges.append((table, read_units(size, bool(req.get("ConsistentRead")))))
        elif op in ("Query", "Scan"):
            where = params["TableName"] + (f"/{params['IndexName']}" if "IndexName" in
                                           params else "")
            size = sum(item_size(i) for i in self._items_read(op, params))
            charges.append((where, read_units(size, bool(params.get("ConsistentRead")))))
        elif op == "TransactGetItems":
            for entry in params["TransactItems"]:
                body = entry["Get"]
                shape = self.shapes.get(body["TableName"])
                if shape is not None:
                    size = item_size(self._image(body["TableName"], shape.key_of(body["Key"])))
                    charges.append((body["TableName"], 2 * read_units(size, True)))
        with self._lock:
            for where, units in charges:
                tally.rru[where] += units

    def _items_read(self, op: str, params: dict[str, Any]) -> list[Item]:
        """The items a Query or Scan read: the same request, without filter or projection."""
        request = {k: v for k, v in params.items() if k not in (
            "FilterExpression", "ProjectionExpression", "Select", "ReturnConsumedCapacity",
            "ExpressionAttributeNames", "ExpressionAttributeValues", "AttributesToGet",
            "QueryFilter", "ScanFilter", "ConditionalOperator")}
        used = " ".join(str(params.get(k, "")) for k in ("KeyConditionExpression",))
        names = {k: v for k, v in params.get("ExpressionAttributeNames", {}).items()
                 if re.search(re.escape(k) + r"\b", used)}
        values = {k: v for k, v in params.get("ExpressionAttributeValues", {}).items()
                  if re.search(re.escape(k) + r"\b", used)}
        if names:
            request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        call = self.reader.query if op == "Query" else self.reader.scan
        items: list[Item] = call(**request).get("Items", [])
        return items


def _unprocessed(op: str, parsed: dict[str, Any],
                 shapes: dict[str, TableShape]) -> set[tuple[str, str]]:
    if op != "BatchWriteItem":
        return set()
    out = set()
    for table, requests in parsed.get("UnprocessedItems", {}).items():
        shape = shapes.get(table)
        for r in requests if shape is not None else []:
            item = r["PutRequest"]["Item"] if "PutRequest" in r else r["DeleteRequest"]["Key"]
            out.add((table, shape.key_of(item)))  # type: ignore[union-attr]
    return out


def _message_bytes(body: str, attributes: dict[str, Any]) -> int:
    size = len(body.encode())
    for name, attr in attributes.items():
        size += len(name.encode()) + len(str(attr.get("DataType", "")).encode())
        value = attr.get("StringValue", attr.get("BinaryValue", b""))
        size += _bytes(value)
    return size


def _sqs_chunks(op: str, params: dict[str, Any], parsed: dict[str, Any]) -> int:
    """Billed requests: one per started 64 KB of the request's payload, at least one."""
    if op == "SendMessage":
        payload = _message_bytes(params.get("MessageBody", ""),
                                 params.get("MessageAttributes", {}))
    elif op == "SendMessageBatch":
        payload = sum(_message_bytes(e.get("MessageBody", ""), e.get("MessageAttributes", {}))
                      for e in params.get("Entries", []))
    elif op == "ReceiveMessage":
        payload = sum(_message_bytes(m.get("Body", ""), m.get("MessageAttributes", {}))
                      for m in parsed.get("Messages", []))
    else:
        payload = 0
    return max(1, math.ceil(payload / SQS_CHUNK))
