"""The control table: every item around runs that is neither a run nor a step.

One table, one item kind per key prefix, each changed only by conditional writes:

| pk                          | sk                 | what                                  |
|-----------------------------|--------------------|---------------------------------------|
| `idem#<key>`                | `-`                | an Idempotency-Key and its run        |
| `delivery#<hook>#<sha256>`  | `-`                | a webhook delivery id already taken   |
| `event#<name>`              | `<ms>#<id>`        | an event, kept for its retention      |
| `eventid#<name>#<id>`       | `-`                | an event id already taken             |
| `schedule#<workflow>`       | `-`                | the schedule's cursor and pause flag  |
| `lock#<group>#<key>`        | `-`                | the run holding a concurrency group   |
| `waiting#<group>#<key>`     | `<ms>#<run id>`    | runs queued for a group, in order     |
| `throttle#<workflow>#<key>` | `-`                | a throttle budget (its next free slot)|
| `apikey#<sha256>`           | `-`                | an API key, stored hashed             |
| `hook#<sha256>`             | `-`                | a durable run's hook (`used`: spent)  |
| `sweep#wake`                | `<shard>`          | a wake shard's sweeper and cursors    |
| `sweep#full`                | `-`                | when the last full sweep ran          |

Values that are documents (a delivery's run ids, an event payload) are JSON strings in
`doc`; attributes that conditions test are plain attributes. Items with `expires_at`
expire by TTL, and reads here ignore an expired item that DynamoDB has not deleted yet."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["REPAIR_WITHIN", "Claim", "Control", "Item", "doc_of", "ms_key"]

Item = dict[str, Any]

# How long after an id was first claimed a duplicate may still complete what the first
# request left undone (its process died between the claim and the run's creation).
# Later, a run that is missing has expired and must stay gone.
REPAIR_WITHIN = 600.0


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming an id: was this the first claim, what the first claim
    stored (with `at`, when), and is it recent enough for a duplicate to repair it."""

    first: bool
    doc: dict[str, Any]
    recent: bool


def ms_key(t: float) -> str:
    """A time as a sort key: 15-digit zero-padded milliseconds (sorts as it should)."""
    return f"{int(t * 1000):015d}"


def doc_of(item: Item) -> Any:
    raw = item.get("doc", {}).get("S")
    return None if raw is None else json.loads(raw)


def _live(item: Item | None, now: float) -> Item | None:
    if not item:
        return None
    exp = item.get("expires_at", {}).get("N")
    if exp is not None and float(exp) <= now:
        return None
    return item


class Control:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table

    @staticmethod
    def key(pk: str, sk: str = "-") -> Item:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def put_new(
        self,
        pk: str,
        sk: str = "-",
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

    def claim(self, pk: str, *, now: float, doc: dict[str, Any], expires_at: float) -> Claim:
        """Claim an id (a delivery id, an event id, an Idempotency-Key) with one
        conditional put; a duplicate reads what the first claim stored."""
        mine = {**doc, "at": now}
        if self.put_new(pk, now=now, doc=mine, expires_at=expires_at):
            return Claim(True, mine, True)
        stored = doc_of(self.get(pk, now=now) or {})
        if stored is None:  # expired between the two calls: claim it again
            return self.claim(pk, now=now, doc=doc, expires_at=expires_at)
        return Claim(False, stored, now - float(stored.get("at", now)) < REPAIR_WITHIN)

    def get(self, pk: str, sk: str = "-", *, now: float) -> Item | None:
        with _translate(f"control {pk}: read"):
            resp = self.ddb.get_item(
                TableName=self.table, Key=self.key(pk, sk), ConsistentRead=True
            )
        return _live(resp.get("Item"), now)

    def _request(
        self, pk: str, sk: str, condition: str | None, values: Item | None,
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
        pk: str,
        sk: str = "-",
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
        self, pk: str, update: str, values: Item, condition: str,
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
        pk: str,
        sk: str = "-",
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
        pk: str,
        *,
        now: float,
        limit: int = 100,
        newest_first: bool = False,
        after: str | None = None,
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

    def use_hook(self, pk: str, digest: str, now: float) -> dict[str, Any]:
        """The write that spends a hook (`used`: the digest of the request that did),
        guarded on its being unspent, as one item of a transaction: the hook is spent
        only if the signal it sends is queued in the same transaction."""
        return {"Update": {
            "TableName": self.table, "Key": self.key(pk),
            "UpdateExpression": "SET used = :d, used_at = :t",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(used)",
            "ExpressionAttributeValues": {":d": {"S": digest}, ":t": num(round(now, 3))},
        }}

    def throttle_tat(self, pk: str, now: float) -> float | None:
        """A throttle budget's theoretical arrival time (None: no live budget yet)."""
        item = self.get(pk, now=now)
        return None if item is None else float(item["tat"]["N"])

    def move_throttle(
        self, pk: str, old: float | None, new: float, *, expires_at: float, now: float
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

    def take_lock(self, pk: str, holder: str, now: float) -> bool:
        """Take a concurrency group's lock (True) unless another run holds it."""
        return self.put_new(pk, now=now, attrs={"holder": {"S": holder}})

    def release_lock(self, pk: str, holder: str) -> bool:
        """Free a lock, only if `holder` still holds it."""
        return self.delete(pk, condition="holder = :me", values={":me": {"S": holder}})

    def take_shard(
        self, shard: int, owner: str, until: float, now: float
    ) -> tuple[float, float] | None:
        """Hold a wake shard for one sweep until `until`, unless another sweeper holds
        it: the shard's two cursors (the wakes up to each are done, read promptly and
        read again late; 0 for a new shard), or None."""
        try:
            attrs = self.update(
                "sweep#wake", str(shard),
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
            self.update("sweep#wake", str(shard), update=update, values=values, names=names,
                        condition="#o = :o")
        except ConditionFailed:
            return False
        return True

    def take_full_sweep(self, owner: str, now: float, every: float) -> bool:
        """Take the turn of a full sweep (every running run), due `every` seconds after
        the last one: one sweeper takes it, the others find the guard false."""
        return self.update_if(
            "sweep#full", "SET #o = :o, last_full = :now",
            {":o": {"S": owner}, ":now": num(now), ":due": num(now - every)},
            "attribute_not_exists(last_full) OR last_full <= :due",
            names={"#o": "owner"},
        )

    def reset_schedule(self, pk: str, spec: str, first: float, *, old_spec: str | None) -> bool:
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

    def advance_schedule(self, pk: str, due: float, following: float, doc: Any) -> bool:
        """Move a schedule's cursor from the tick `due` it was read at (guarded: once)."""
        values = {":next": num(following), ":due": num(due), ":doc": {"S": dumps(doc)}}
        return self.update_if(pk, "SET next_fire = :next, doc = :doc", values,
                              "next_fire = :due")

    def record_schedule(self, pk: str, doc: Any) -> None:
        """What the last fire did (its runs, misses, error)."""
        self.update(pk, update="SET doc = :doc", values={":doc": {"S": dumps(doc)}})

    def pause_schedule(self, pk: str) -> None:
        self.update(pk, update="SET paused = :t", values={":t": {"BOOL": True}})

    def resume_schedule(self, pk: str, next_fire: float) -> None:
        self.update(pk, update="SET paused = :f, next_fire = :next",
                    values={":f": {"BOOL": False}, ":next": num(next_fire)})
