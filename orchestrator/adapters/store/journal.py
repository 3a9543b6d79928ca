"""A durable run's journal, in the steps table under the run's partition, sorted after
its step rows (sort keys from `~`). The items of a durable run, and the module that
writes each (signals.py, drivers.py, this one):

| step (sort key)                     | what                                              |
|-------------------------------------|---------------------------------------------------|
| `$run`                              | the driver: an ordinary step row (engine/durable) |
| `~j#<scope>#<pos:08d>`              | one journal entry, written once                   |
| `~s#<name>#<ms>#<signal id>`        | a signal, queued until a wait consumes it         |
| `~i#<name>#<signal id>`             | a signal id taken (a resend queues nothing)       |
| `~p#<scope>#<pos:08d>`              | a parallel operation: its size, the branches done |
| `~e#<ms>#<event id>`                | a custom run event (POST /runs/{id}/events)       |
| `$run/<scope>`                      | a parallel branch's driver                        |

An entry is created with a conditional put: the first write wins, and a writer that
loses gets the entry that is there (a duplicate of its own, or the outcome that beat it:
a signal before a timeout). Values past `inline_limit` bytes live in the blob store and
the entry holds their key. Reading a journal is one strongly consistent query."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from functions.sdk.protocol import JournalEntry
from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import ms_key
from orchestrator.adapters.store.tables import Tables, step_key
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["JOURNAL", "PARALLEL", "RUN_EVENTS", "SIGNALS", "SIGNAL_IDS", "Journal",
                            "entry_key", "restamp", "signal_prefix"]

JOURNAL = "~j#"
SIGNALS = "~s#"
PARALLEL = "~p#"
SIGNAL_IDS = "~i#"
RUN_EVENTS = "~e#"
# Entries written in one transaction at most (DynamoDB's limit).
TRANSACT_MAX = 100


def entry_key(scope: str, pos: int) -> str:
    return f"{JOURNAL}{scope}#{pos:08d}"


def signal_prefix(name: str) -> str:
    return f"{SIGNALS}{name}#"


def restamp(t: Tables, run_id: str, key: str, now: float) -> None:
    """Keep an item of a running durable run as long as a row's retention from now."""
    with _translate(f"journal {run_id}/{key}: keep"):
        t.ddb.update_item(TableName=t.steps, Key=step_key(run_id, key),
                          UpdateExpression="SET expires_at = :e",
                          ExpressionAttributeValues={":e": num(now + t.step_retention)})


class Journal(Tables):
    """A durable run's journal entries and its custom run events (steps table)."""

    # -- the journal ---------------------------------------------------------------------

    def read_journal(self, run_id: str, now: float | None = None) -> list[dict[str, Any]]:
        """Every entry of a run's journal, in (scope, position) order. With `now` (a
        run still going), entries within half the retention of their expiry are
        stamped again: a run lives as long as it needs, its journal with it."""
        entries: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND begins_with(step, :j)",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":j": {"S": JOURNAL}},
            "ConsistentRead": True,
        }
        while True:
            with _translate(f"journal of {run_id}"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                entries.append(self._entry(item))
                if now is not None and float(item.get("expires_at", {}).get("N", "inf")) \
                        < now + self.step_retention / 2:
                    restamp(self, run_id, item["step"]["S"], now)
            if "LastEvaluatedKey" not in resp:
                return entries
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def read_entries(self, run_id: str, *, after: str | None = None,
                     prefix: str | None = None) -> list[dict[str, Any]]:
        """Part of a run's journal, each entry with its sort key (`_key`): the top
        scope's entries whose key sorts after `after` (its last one seen), or every entry
        under `prefix` (a scope's own key prefix, e.g. one parallel's branches). One
        strongly consistent query: a follower reads what changed, not the whole journal."""
        values: dict[str, Any] = {":r": {"S": run_id}}
        if prefix is not None:
            cond = "run_id = :r AND begins_with(step, :p)"
            values[":p"] = {"S": prefix}
        else:
            cond = "run_id = :r AND step BETWEEN :a AND :b"
            values[":a"] = {"S": after + "!" if after else entry_key("", 0)}
            values[":b"] = {"S": f"{JOURNAL}#~"}
        kwargs: dict[str, Any] = {"TableName": self.steps, "KeyConditionExpression": cond,
                                  "ExpressionAttributeValues": values, "ConsistentRead": True}
        out: list[dict[str, Any]] = []
        while True:
            with _translate(f"journal of {run_id}: changes"):
                resp = self.ddb.query(**kwargs)
            out.extend({**self._entry(item), "_key": item["step"]["S"]}
                       for item in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def _entry(self, item: dict[str, Any]) -> dict[str, Any]:
        ref = item.get("ref", {}).get("S")
        if ref is not None:
            if self.blobs is None:
                raise RuntimeError("journal entry in the blob store, and no blob store")
            raw = self.blobs.get(ref).decode()
        else:
            raw = item["doc"]["S"]
        entry: dict[str, Any] = json.loads(raw)
        return entry

    def _entry_item(self, run_id: str, entry: dict[str, Any], now: float
                    ) -> dict[str, Any]:
        key = entry_key(str(entry.get("scope", "")), int(entry["pos"]))
        raw = dumps(entry)
        item: dict[str, Any] = {
            **step_key(run_id, key),
            "op_id": {"S": str(entry["id"])},
            "expires_at": num(now + self.step_retention),
        }
        if len(raw) > self.inline_limit:
            if self.blobs is None:
                raise RuntimeError("journal entry too large for an item, and no blob store")
            # A key of its own per writer: a writer that loses the entry's put must not
            # overwrite the winner's value.
            blob = f"journal/{run_id}/{key[3:]}-{uuid.uuid4().hex[:16]}.json"
            item["ref"] = {"S": self.blobs.put(blob, raw.encode())}
        else:
            item["doc"] = {"S": raw}
        return item

    def put_entry(self, run_id: str, entry: dict[str, Any], now: float) -> dict[str, Any]:
        """Create the entry at its place; the entry that is there if another write was
        first (compare its id with yours)."""
        item = self._entry_item(run_id, entry, now)
        key = item["step"]["S"]
        try:
            with _translate(f"journal {run_id}/{key}: write"):
                self.ddb.put_item(TableName=self.steps, Item=item,
                                  ConditionExpression="attribute_not_exists(step)")
        except ConditionFailed:
            with _translate(f"journal {run_id}/{key}: read"):
                found = self.ddb.get_item(TableName=self.steps, Key=step_key(run_id, key),
                                          ConsistentRead=True).get("Item")
            if found is None:  # cannot be: entries are never deleted while a run lives
                raise
            return self._entry(found)
        return entry

    def put_entry_with(self, run_id: str, entry: dict[str, Any], now: float,
                       also: list[dict[str, Any]]) -> dict[str, Any]:
        """Create the entry together with the writes `also` (TransactWriteItems items of
        other tables), in one transaction: both happen or neither does. The entry that is
        there if another write was first (nothing of `also` is then written); raises
        ConditionFailed if a guard of `also` failed (nothing is written)."""
        item = self._entry_item(run_id, entry, now)
        key = item["step"]["S"]
        try:
            with _translate(f"journal {run_id}/{key}: write with {len(also)} more"):
                self.ddb.transact_write_items(TransactItems=[
                    {"Put": {"TableName": self.steps, "Item": item,
                             "ConditionExpression": "attribute_not_exists(step)"}},
                    *also])
        except ConditionFailed:
            with _translate(f"journal {run_id}/{key}: read"):
                found = self.ddb.get_item(TableName=self.steps, Key=step_key(run_id, key),
                                          ConsistentRead=True).get("Item")
            if found is None:
                raise  # one of `also`'s guards
            return self._entry(found)
        return entry

    def commit_entries(self, run_id: str, entries: Sequence[JournalEntry], now: float
                       ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Commit checkpoints (the protocol's entries, as the call reported them) in
        order, each write-once as `put_entry`: for each place, (the entry as this call
        stores it, what is stored there), up to and including the first place where
        another write was first with something else (nothing after it is written).
        Several entries go in one transaction of up to TRANSACT_MAX (one request; the
        first conflict cancels it, and its entries are then written one by one)."""
        docs = [e.doc() for e in entries]
        return list(zip(docs, self._commit(run_id, docs, now), strict=False))

    def _commit(self, run_id: str, entries: list[dict[str, Any]], now: float
                ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        i = 0
        while i < len(entries):
            batch = entries[i:i + TRANSACT_MAX]
            i += len(batch)
            if len(batch) == 1:
                got = self.put_entry(run_id, batch[0], now)
                out.append(got)
                if got != batch[0]:
                    return out
                continue
            items = [self._entry_item(run_id, e, now) for e in batch]
            try:
                with _translate(f"journal {run_id}: write {len(batch)} entries"):
                    self.ddb.transact_write_items(TransactItems=[
                        {"Put": {"TableName": self.steps, "Item": item,
                                 "ConditionExpression": "attribute_not_exists(step)"}}
                        for item in items])
            except ConditionFailed:
                for e in batch:
                    got = self.put_entry(run_id, e, now)
                    out.append(got)
                    if got != e:
                        return out
                continue
            out.extend(batch)
        return out

    # -- signals -------------------------------------------------------------------------

    # -- run events (custom, written by anyone: README, "Durable workflows in Python") -----------

    def add_run_event(self, run_id: str, event_type: str, payload: Any, event_id: str,
                      now: float) -> dict[str, Any]:
        doc = {"id": event_id, "event_type": event_type, "payload": payload,
               "at": round(now, 3)}
        item = {**step_key(run_id, f"{RUN_EVENTS}{ms_key(now)}#{event_id}"),
                "doc": {"S": dumps(doc)}, "expires_at": num(now + self.step_retention)}
        with _translate(f"run {run_id}: event {event_type}"):
            self.ddb.put_item(TableName=self.steps, Item=item)
        return doc

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND begins_with(step, :e)",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":e": {"S": RUN_EVENTS}},
            "ConsistentRead": True,
        }
        out: list[dict[str, Any]] = []
        while True:
            with _translate(f"events of {run_id}"):
                resp = self.ddb.query(**kwargs)
            out.extend(json.loads(i["doc"]["S"]) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # -- the driver ----------------------------------------------------------------------

    # -- parallel operations ---------------------------------------------------------------

    def delete_entries(self, run_id: str, scope: str, first: int) -> int:
        """Delete a scope's journal entries from position `first` on (a reset)."""
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND step BETWEEN :a AND :b",
            "ExpressionAttributeValues": {":r": {"S": run_id},
                                          ":a": {"S": entry_key(scope, first)},
                                          ":b": {"S": f"{JOURNAL}{scope}#~"}},
            "ProjectionExpression": "run_id, step",
            "ConsistentRead": True,
        }
        n = 0
        while True:
            with _translate(f"journal of {run_id}: entries to delete"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                with _translate(f"journal {run_id}/{item['step']['S']}: delete"):
                    self.ddb.delete_item(TableName=self.steps, Key=item)
                n += 1
            if "LastEvaluatedKey" not in resp:
                return n
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

