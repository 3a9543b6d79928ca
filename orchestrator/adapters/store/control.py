"""The control table: every item around runs that is neither a run nor a step.

This module is the table's schema: the only code that spells its keys (the builders
below, one per item kind) or reads its attributes (the codecs and the named reads of
`Control`). Services pass keys made here and get typed values back; a test
(tests/unit/test_control_schema.py) keeps DynamoDB's encoding out of the rest of
`orchestrator/`. Deployed tables hold these items: the strings never change.

One table, one item kind per key prefix, each changed only by conditional writes:

| pk                          | sk                      | what                                |
|-----------------------------|-------------------------|-------------------------------------|
| `idem#<key>`                | `-`                     | an Idempotency-Key and its run      |
| `delivery#<hook>#<sha256>`  | `-`                     | a webhook delivery id already taken |
| `event#<name>`              | `<ms>#<id>`             | an event, kept for its retention    |
| `eventid#<name>#<id>`       | `-`                     | an event id already taken           |
| `evw#<name>#<subject>`      | `e#<ms>#<id>`           | an event, where waits look for it   |
| `evw#<name>#<subject>`      | `w#<run>#<scope>#<pos>` | a durable run waiting for an event  |
| `schedule#<workflow>`       | `-`                     | a schedule's cursor and pause flag  |
| `lock#<group>#<key>`        | `-`                     | the run holding a concurrency group |
| `waiting#<group>#<key>`     | `<ms>#<run id>`         | runs queued for a group, in order   |
| `throttle#<workflow>#<key>` | `-`                     | a throttle budget (its next slot)   |
| `apikey#<sha256>`           | `-`                     | an API key, stored hashed           |
| `hook#<sha256>`             | `-`                     | a hook, by token hash (`used`: spent) |
| `secret#hooks`              | `-`                     | the key hook tokens are made with   |
| `children#<parent run>`     | `<child run id>`        | a child run of a run                |
| `approval#<run>`            | `<step>`                | an approval gate and its answer     |
| `approvals#pending`         | `<ms>#<run>#<step>`     | the inbox: one item per open gate   |
| `approvallink#<sha256>`     | `-`                     | a gate's single-use answer link     |
| `state#<entity>`            | `<key>`                 | a durable state cell (`ctx.state`)  |
| `mutex#<key>`               | `-`                     | a lock's holder (`ctx.lock`, `lock:`) |
| `mutexq#<key>`              | `<ms>#<holder>`         | what waits for a lock, in arrival order |
| `mutexheld#<run>`           | `<key>`                 | a lock a run holds (released at its end) |
| `debounce#<workflow>#<key>` | `-`                     | a debounced burst: its queued run   |
| `fanout#<run>#<step>`       | `<index>`               | a fan_out step's item: its outcome  |
| `sweep#wake`                | `<shard>`               | a wake shard's sweeper and cursors  |
| `sweep#full`                | `-`                     | when the last full sweep ran        |

`<ms>` is a time as 15 zero-padded digits of milliseconds (`ms_key`), so a partition
sorts by time. An `evw#` subject is the event's key, `` (none) or `*` (any): see
services/event_waits.py for which partitions an event and a wait write.

Values that are documents (a delivery's run ids, an event payload) are JSON strings in
`doc`; attributes that conditions test are plain attributes (`holder`, `run_id`, `tat`,
`spec`, `next_fire`, `paused`, `owner`, ...). Items with `expires_at` expire by TTL, and
reads here ignore an expired item that DynamoDB has not deleted yet."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, NewType

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = [
    "ANY_SUBJECT",
    "APPROVALS_PENDING",
    "EVENT_WAITS_FROM",
    "HOOK_SECRET",
    "NO_SK",
    "REPAIR_WITHIN",
    "Claim",
    "Control",
    "Item",
    "Pk",
    "Schedule",
    "Sk",
    "WaitingRun",
    "apikey_key",
    "approval_key",
    "approval_link_key",
    "approval_sk",
    "child_sk",
    "children_key",
    "delivery_key",
    "doc_of",
    "event_id_key",
    "event_key",
    "event_sk",
    "event_wait_event",
    "event_wait_events_after",
    "event_wait_keys",
    "event_wait_sk",
    "fanout_item_sk",
    "fanout_key",
    "hook_key",
    "hook_used",
    "idempotency_key",
    "inbox_sk",
    "lock_key",
    "login_key",
    "ms_key",
    "mutex_held_key",
    "mutex_key",
    "mutex_queue_key",
    "mutex_waiter_sk",
    "schedule_key",
    "sk_of",
    "state_key",
    "state_sk",
    "throttle_key",
    "wait_event_keys",
    "waiting_key",
    "waiting_sk",
]

Item = dict[str, Any]

# A control item's partition and sort keys: made only by the builders below, so a key
# spelled anywhere else does not type-check.
Pk = NewType("Pk", str)
Sk = NewType("Sk", str)

# The sort key of an item alone in its partition.
NO_SK = Sk("-")

# How long after an id was first claimed a duplicate may still complete what the first
# request left undone (its process died between the claim and the run's creation).
# Later, a run that is missing has expired and must stay gone.
REPAIR_WITHIN = 600.0


def ms_key(t: float) -> str:
    """A time as a sort key: 15-digit zero-padded milliseconds (sorts as it should)."""
    return f"{int(t * 1000):015d}"


# ---- keys: one builder per item kind ---------------------------------------------------


def idempotency_key(key: str) -> Pk:
    """An Idempotency-Key of `POST /runs`."""
    return Pk(f"idem#{key}")


def delivery_key(webhook: str, delivery_id: str) -> Pk:
    """A webhook's delivery id (kept as its SHA-256: ids are the sender's, of any size)."""
    return Pk(f"delivery#{webhook}#{hashlib.sha256(delivery_id.encode()).hexdigest()}")


def event_key(name: str) -> Pk:
    """The events of a name (`event_sk`: by arrival)."""
    return Pk(f"event#{name}")


def event_sk(received_at: float, event_id: str) -> Sk:
    return Sk(f"{ms_key(received_at)}#{event_id}")


def event_id_key(name: str, event_id: str) -> Pk:
    """An event id of a name, claimed by its first delivery."""
    return Pk(f"eventid#{name}#{event_id}")


def schedule_key(workflow: str) -> Pk:
    return Pk(f"schedule#{workflow}")


def lock_key(group_id: str) -> Pk:
    """The lock of a concurrency group (`Gate.group_id`: `<group>#<key>`)."""
    return Pk(f"lock#{group_id}")


def waiting_key(group_id: str) -> Pk:
    """The runs waiting for a concurrency group (`waiting_sk`: in arrival order)."""
    return Pk(f"waiting#{group_id}")


def waiting_sk(created_at: float, run_id: str) -> Sk:
    """A waiting run's place: arrival order, ties broken by run id."""
    return Sk(f"{ms_key(created_at)}#{run_id}")


def throttle_key(workflow: str, key: str) -> Pk:
    return Pk(f"throttle#{workflow}#{key}")


def apikey_key(sha256: str) -> Pk:
    """An API key, by the hex SHA-256 of the key."""
    return Pk(f"apikey#{sha256}")


def login_key(sha256: str) -> Pk:
    """A dashboard's one-time login link, by the hex SHA-256 of its token."""
    return Pk(f"login#{sha256}")


def hook_key(sha256: str) -> Pk:
    """A hook, by the hex SHA-256 of its token."""
    return Pk(f"hook#{sha256}")


# The key hook tokens are made with, when ORCH_HOOK_SECRET does not give one.
HOOK_SECRET = Pk("secret#hooks")


# The inbox's one partition: an item per approval still open, oldest first.
APPROVALS_PENDING = Pk("approvals#pending")


def approval_key(run_id: str) -> Pk:
    """The partition of a run's approval gates."""
    return Pk(f"approval#{run_id}")


def approval_sk(step: str) -> Sk:
    return Sk(step)


def inbox_sk(created_at: float, run_id: str, step: str) -> Sk:
    """An open approval's place in the inbox: by when it opened."""
    return Sk(f"{ms_key(created_at)}#{run_id}#{step}")


def approval_link_key(sha256: str) -> Pk:
    return Pk(f"approvallink#{sha256}")


def fanout_key(run_id: str, step: str) -> Pk:
    """A fan_out step's items' outcomes."""
    return Pk(f"fanout#{run_id}#{step}")


def fanout_item_sk(index: int) -> Sk:
    return Sk(f"{index:06d}")


def mutex_key(key: str) -> Pk:
    """A lock's item: who holds it."""
    return Pk(f"mutex#{key}")


def mutex_queue_key(key: str) -> Pk:
    """A lock's waiting line."""
    return Pk(f"mutexq#{key}")


def mutex_waiter_sk(arrived: float, holder: str) -> Sk:
    return Sk(f"{ms_key(arrived)}#{holder}")


def mutex_held_key(run_id: str) -> Pk:
    """The locks a run holds."""
    return Pk(f"mutexheld#{run_id}")


def state_key(entity: str) -> Pk:
    """The partition of an entity's state cells."""
    return Pk(f"state#{entity}")


def state_sk(key: str) -> Sk:
    return Sk(key)


def children_key(parent: str) -> Pk:
    """The child runs of a run (`child_sk`: one item each)."""
    return Pk(f"children#{parent}")


def child_sk(child: str) -> Sk:
    return Sk(child)


# An event wait partition's subject that matches any subject.
ANY_SUBJECT = "*"


def _event_wait_key(name: str, subject: str) -> Pk:
    return Pk(f"evw#{name}#{subject}")


def event_wait_keys(name: str, key: str | None) -> list[Pk]:
    """Where an event is written for waits to find it: under its key (`` without one)
    and under `*`."""
    return [_event_wait_key(name, key or ""), _event_wait_key(name, ANY_SUBJECT)]


def wait_event_keys(name: str, subject: str | None) -> list[Pk]:
    """Where a wait registers and looks: under its subject and `` (an event without a
    key matches every wait), or under `*` for a wait for any subject."""
    if subject is None:
        return [_event_wait_key(name, ANY_SUBJECT)]
    return list(dict.fromkeys([_event_wait_key(name, subject), _event_wait_key(name, "")]))


def event_wait_event_sk(received_at: float, event_id: str) -> Sk:
    """An event's sort key in an event wait partition (`e#`: before every wait)."""
    return Sk(f"e#{ms_key(received_at)}#{event_id}")


def event_wait_events_after(t: float) -> Sk:
    """A query bound: the events of an event wait partition received from `t` on."""
    return Sk(f"e#{ms_key(t)}")


def event_wait_sk(run_id: str, scope: str, pos: Any) -> Sk:
    """A waiting run's sort key in an event wait partition (`w#`: after every event)."""
    return Sk(f"w#{run_id}#{scope}#{pos}")


# A query bound: every waiting run of an event wait partition sorts after it.
EVENT_WAITS_FROM = Sk("w#")

_SWEEP_WAKE = Pk("sweep#wake")
_SWEEP_FULL = Pk("sweep#full")


# ---- codecs: what an item holds, as typed values ---------------------------------------


def doc_of(item: Item) -> Any:
    """An item's JSON document (None: it has none, or there is no item)."""
    raw = item.get("doc", {}).get("S")
    return None if raw is None else json.loads(raw)


def hook_used(item: Item) -> str | None:
    """The digest of the request that spent a hook item (its `used`), None if unspent."""
    used = item.get("used", {}).get("S")
    return None if used is None else str(used)


def sk_of(item: Item) -> Sk:
    """An item's sort key (a page of a query goes on after the last one's)."""
    return Sk(str(item["sk"]["S"]))


def event_wait_event(item: Item) -> dict[str, Any] | None:
    """The event an event wait partition's item holds (None: it is a waiting run)."""
    return doc_of(item) if sk_of(item).startswith("e#") else None


@dataclass(frozen=True)
class WaitingRun:
    """A run waiting for a concurrency group, and its place in line."""

    run_id: str
    sk: Sk


@dataclass(frozen=True)
class Schedule:
    """A schedule's cursor: the cadence it was set up for (`describe` of the spec), the
    next tick it fires at, its pause flag and what its last fire did (`doc`)."""

    spec: str | None
    next_fire: float
    paused: bool
    doc: dict[str, Any]


def _schedule(item: Item) -> Schedule:
    spec = item.get("spec", {}).get("S")
    return Schedule(
        spec=None if spec is None else str(spec),
        next_fire=float(item.get("next_fire", {}).get("N", "inf")),
        paused=bool(item.get("paused", {}).get("BOOL", False)),
        doc=doc_of(item) or {},
    )


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming an id: was this the first claim, what the first claim
    stored (with `at`, when), and is it recent enough for a duplicate to repair it."""

    first: bool
    doc: dict[str, Any]
    recent: bool


def _live(item: Item | None, now: float) -> Item | None:
    if not item:
        return None
    exp = item.get("expires_at", {}).get("N")
    if exp is not None and float(exp) <= now:
        return None
    return item


class Control:
    """Reads and conditional writes of the control table's items, by keys made above."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table

    @staticmethod
    def key(pk: Pk, sk: Sk = NO_SK) -> Item:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def put_new(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        now: float,
        doc: Any = None,
        attrs: Item | None = None,
        expires_at: float | None = None,
    ) -> bool:
        """Create an item unless a live one exists. True if this call created it."""
        item = {**self.key(pk, sk), **(attrs or {})}
        if doc is not None:
            item["doc"] = {"S": dumps(doc)}
        if expires_at is not None:
            item["expires_at"] = num(expires_at)
        try:
            with _translate(f"control {pk}: create"):
                self.ddb.put_item(
                    TableName=self.table,
                    Item=item,
                    # An expired item DynamoDB has not deleted yet counts as absent.
                    ConditionExpression="attribute_not_exists(pk) OR expires_at <= :now",
                    ExpressionAttributeValues={":now": num(now)},
                )
        except ConditionFailed:
            return False
        return True

    def claim(self, pk: Pk, *, now: float, doc: dict[str, Any], expires_at: float) -> Claim:
        """Claim an id (a delivery id, an event id, an Idempotency-Key) with one
        conditional put; a duplicate reads what the first claim stored."""
        mine = {**doc, "at": now}
        if self.put_new(pk, now=now, doc=mine, expires_at=expires_at):
            return Claim(True, mine, True)
        stored = doc_of(self.get(pk, now=now) or {})
        if stored is None:  # expired between the two calls: claim it again
            return self.claim(pk, now=now, doc=doc, expires_at=expires_at)
        return Claim(False, stored, now - float(stored.get("at", now)) < REPAIR_WITHIN)

    def get(self, pk: Pk, sk: Sk = NO_SK, *, now: float) -> Item | None:
        with _translate(f"control {pk}: read"):
            resp = self.ddb.get_item(
                TableName=self.table, Key=self.key(pk, sk), ConsistentRead=True
            )
        return _live(resp.get("Item"), now)

    def _request(
        self, pk: Pk, sk: Sk, condition: str | None, values: Item | None,
        names: dict[str, str] | None, **extra: Any,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"TableName": self.table, "Key": self.key(pk, sk), **extra}
        if condition:
            request["ConditionExpression"] = condition
        if values:
            request["ExpressionAttributeValues"] = values
        if names:
            request["ExpressionAttributeNames"] = names
        return request

    def update(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        update: str,
        values: Item | None = None,
        names: dict[str, str] | None = None,
        condition: str | None = None,
    ) -> Item:
        """One UpdateItem; raises ConditionFailed when `condition` does not hold."""
        request = self._request(pk, sk, condition, values, names, UpdateExpression=update,
                                ReturnValues="ALL_NEW")
        with _translate(f"control {pk}: update"):
            resp = self.ddb.update_item(**request)
        attrs: Item = resp.get("Attributes", {})
        return attrs

    def update_if(
        self, pk: Pk, update: str, values: Item, condition: str,
        names: dict[str, str] | None = None,
    ) -> bool:
        """One guarded UpdateItem: False when `condition` did not hold."""
        try:
            self.update(pk, update=update, values=values, names=names, condition=condition)
        except ConditionFailed:
            return False
        return True

    def delete(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        condition: str | None = None,
        values: Item | None = None,
        names: dict[str, str] | None = None,
    ) -> bool:
        """Delete an item; False when `condition` did not hold."""
        request = self._request(pk, sk, condition, values, names)
        try:
            with _translate(f"control {pk}: delete"):
                self.ddb.delete_item(**request)
        except ConditionFailed:
            return False
        return True

    def query(
        self,
        pk: Pk,
        *,
        now: float,
        limit: int = 100,
        newest_first: bool = False,
        after: Sk | None = None,
    ) -> list[Item]:
        """Items of one partition in sort-key order (live ones only)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk" + (" AND sk > :after" if after else ""),
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
            "Limit": limit,
        }
        if after:
            kwargs["ExpressionAttributeValues"][":after"] = {"S": after}
        with _translate(f"control {pk}: query"):
            resp = self.ddb.query(**kwargs)
        return [i for i in resp.get("Items", []) if _live(i, now) is not None]

    # ---- named writes of one item kind each ------------------------------------------

    def use_hook(self, pk: Pk, digest: str, now: float) -> dict[str, Any]:
        """The write that spends a hook (`used`: the digest of the request that did),
        guarded on its being unspent, as one item of a transaction: the hook is spent
        only if the signal it sends is queued in the same transaction."""
        return {"Update": {
            "TableName": self.table, "Key": self.key(pk),
            "UpdateExpression": "SET used = :d, used_at = :t",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(used)",
            "ExpressionAttributeValues": {":d": {"S": digest}, ":t": num(round(now, 3))},
        }}

    def throttle_tat(self, pk: Pk, now: float) -> float | None:
        """A throttle budget's theoretical arrival time (None: no live budget yet)."""
        item = self.get(pk, now=now)
        return None if item is None else float(item["tat"]["N"])

    def move_throttle(
        self, pk: Pk, old: float | None, new: float, *, expires_at: float, now: float
    ) -> bool:
        """Move a throttle budget from the `old` time it was read at to `new` (guarded:
        False if another arrival moved it first)."""
        values: dict[str, Any] = {":new": num(new), ":exp": num(expires_at)}
        if old is None:
            cond = "attribute_not_exists(tat) OR expires_at <= :now"
            values[":now"] = num(now)
        else:
            cond = "tat = :old"
            values[":old"] = num(old)
        return self.update_if(pk, "SET tat = :new, expires_at = :exp", values, cond)

    def lock_holder(self, pk: Pk, now: float) -> str | None:
        """The run holding a concurrency group's lock (None: it is free)."""
        item = self.get(pk, now=now)
        return None if item is None else str(item["holder"]["S"])

    def take_lock(self, pk: Pk, holder: str, now: float) -> bool:
        """Take a concurrency group's lock (True) unless another run holds it."""
        return self.put_new(pk, now=now, attrs={"holder": {"S": holder}})

    def release_lock(self, pk: Pk, holder: str) -> bool:
        """Free a lock, only if `holder` still holds it."""
        return self.delete(pk, condition="holder = :me", values={":me": {"S": holder}})

    def wait_in_line(self, pk: Pk, sk: Sk, run_id: str, now: float) -> bool:
        """Queue a run for a concurrency group at its place `sk` (again: a no-op)."""
        return self.put_new(pk, sk, now=now, attrs={"run_id": {"S": run_id}})

    def waiting_runs(self, pk: Pk, now: float, limit: int) -> list[WaitingRun]:
        """The first `limit` runs waiting for a concurrency group, oldest first."""
        return [WaitingRun(str(i["run_id"]["S"]), sk_of(i))
                for i in self.query(pk, now=now, limit=limit)]

    def take_shard(
        self, shard: int, owner: str, until: float, now: float
    ) -> tuple[float, float] | None:
        """Hold a wake shard for one sweep until `until`, unless another sweeper holds
        it: the shard's two cursors (the wakes up to each are done, read promptly and
        read again late; 0 for a new shard), or None."""
        try:
            attrs = self.update(
                _SWEEP_WAKE, Sk(str(shard)),
                update="SET #o = :o, held_until = :u",
                values={":o": {"S": owner}, ":u": num(until), ":now": num(now)},
                names={"#o": "owner"},
                condition="attribute_not_exists(#o) OR held_until < :now OR #o = :o",
            )
        except ConditionFailed:
            return None
        return (float(attrs.get("cursor", {}).get("N", 0)),
                float(attrs.get("trail", {}).get("N", 0)))

    def release_shard(self, shard: int, owner: str, cursors: tuple[float, float] | None) -> bool:
        """Give a wake shard back, its wakes up to `cursors` done (None: not advanced).
        False if the hold had lapsed and another sweeper took the shard."""
        values: dict[str, Any] = {":o": {"S": owner}, ":zero": num(0)}
        names = {"#o": "owner"}
        update = "SET held_until = :zero"
        if cursors is not None:
            update += ", #c = :c, trail = :t"
            values[":c"] = num(cursors[0])
            values[":t"] = num(cursors[1])
            names["#c"] = "cursor"
        try:
            self.update(_SWEEP_WAKE, Sk(str(shard)), update=update, values=values, names=names,
                        condition="#o = :o")
        except ConditionFailed:
            return False
        return True

    def take_full_sweep(self, owner: str, now: float, every: float) -> bool:
        """Take the turn of a full sweep (every running run), due `every` seconds after
        the last one: one sweeper takes it, the others find the guard false."""
        return self.update_if(
            _SWEEP_FULL, "SET #o = :o, last_full = :now",
            {":o": {"S": owner}, ":now": num(now), ":due": num(now - every)},
            "attribute_not_exists(last_full) OR last_full <= :due",
            names={"#o": "owner"},
        )

    def schedule(self, pk: Pk, now: float) -> Schedule | None:
        """A schedule's cursor (None: not set up yet)."""
        item = self.get(pk, now=now)
        return None if item is None else _schedule(item)

    def reset_schedule(self, pk: Pk, spec: str, first: float, *, old_spec: str | None) -> bool:
        """Create a schedule's cursor, or reset it after its cadence changed from
        `old_spec` (guarded: False if another scheduler did it first)."""
        values: dict[str, Any] = {":spec": {"S": spec}, ":next": num(first),
                                  ":f": {"BOOL": False}}
        if old_spec is None:
            cond = "attribute_not_exists(pk)"
        else:
            cond = "spec = :old"
            values[":old"] = {"S": old_spec}
        return self.update_if(
            pk, "SET spec = :spec, next_fire = :next, paused = if_not_exists(paused, :f)",
            values, cond,
        )

    def advance_schedule(self, pk: Pk, due: float, following: float, doc: Any) -> bool:
        """Move a schedule's cursor from the tick `due` it was read at (guarded: once)."""
        values = {":next": num(following), ":due": num(due), ":doc": {"S": dumps(doc)}}
        return self.update_if(pk, "SET next_fire = :next, doc = :doc", values,
                              "next_fire = :due")

    def record_schedule(self, pk: Pk, doc: Any) -> None:
        """What the last fire did (its runs, misses, error)."""
        self.update(pk, update="SET doc = :doc", values={":doc": {"S": dumps(doc)}})

    def pause_schedule(self, pk: Pk) -> None:
        self.update(pk, update="SET paused = :t", values={":t": {"BOOL": True}})

    def resume_schedule(self, pk: Pk, next_fire: float) -> None:
        self.update(pk, update="SET paused = :f, next_fire = :next",
                    values={":f": {"BOOL": False}, ":next": num(next_fire)})
