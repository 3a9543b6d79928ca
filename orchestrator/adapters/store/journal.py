"""A durable run's journal and signals, in the steps table under the run's partition,
sorted after its step rows (sort keys from `~`):

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
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import history_entry, num, step_from_item
from orchestrator.adapters.store.control import ms_key
from orchestrator.adapters.store.tables import Tables, history_clause, step_key
from orchestrator.engine.durable import DRIVER
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, StepStatus, status_guard, status_set
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["JOURNAL", "JournalRows", "entry_key", "signal_prefix"]

JOURNAL = "~j#"
SIGNALS = "~s#"
PARALLEL = "~p#"
SIGNAL_IDS = "~i#"
RUN_EVENTS = "~e#"
# Entries written in one transaction at most (DynamoDB's limit).
TRANSACT_MAX = 100


def _aggregate(item: dict[str, Any]) -> dict[str, Any]:
    return {"total": int(item["total"]["N"]), "max": int(item["max"]["N"]),
            "done": {int(x) for x in item.get("done", {}).get("NS", [])}}


def entry_key(scope: str, pos: int) -> str:
    return f"{JOURNAL}{scope}#{pos:08d}"


def signal_prefix(name: str) -> str:
    return f"{SIGNALS}{name}#"


class JournalRows(Tables):
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
                    self._restamp(run_id, item["step"]["S"], now)
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

    def _restamp(self, run_id: str, key: str, now: float) -> None:
        with _translate(f"journal {run_id}/{key}: keep"):
            self.ddb.update_item(TableName=self.steps, Key=step_key(run_id, key),
                                 UpdateExpression="SET expires_at = :e",
                                 ExpressionAttributeValues={
                                     ":e": num(now + self.step_retention)})

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

    def commit_entries(self, run_id: str, entries: list[dict[str, Any]], now: float
                       ) -> list[dict[str, Any]]:
        """Create entries in order, each write-once as `put_entry`; what is stored at
        each place, up to and including the first place where another write was first
        with something else (nothing after it is written). Several entries go in one
        transaction of up to TRANSACT_MAX (one request; the first conflict cancels it,
        and its entries are then written one by one)."""
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

    def queue_signal(self, run_id: str, name: str, payload: Any, signal_id: str,
                     now: float, *, also: tuple[dict[str, Any], ...] = ()) -> bool:
        """Queue a signal (False: one with this id was queued already, or a guard of
        `also` failed). The signal and a marker of its id are written in one transaction
        guarded by the marker: the queue is ordered by time, so the id alone cannot be
        the signal's key. `also`: more writes of the same transaction (a hook's use, on
        another table): all of them are written, or none."""
        expires = num(now + self.step_retention)
        item = {
            **step_key(run_id, f"{signal_prefix(name)}{ms_key(now)}#{signal_id}"),
            "doc": {"S": dumps({"id": signal_id, "payload": payload, "at": round(now, 3)})},
            "expires_at": expires,
        }
        marker = {**step_key(run_id, f"{SIGNAL_IDS}{name}#{signal_id}"), "expires_at": expires}
        try:
            with _translate(f"signal {run_id}/{name}: queue"):
                self.ddb.transact_write_items(TransactItems=[
                    {"Put": {"TableName": self.steps, "Item": marker,
                             "ConditionExpression": "attribute_not_exists(step)"}},
                    {"Put": {"TableName": self.steps, "Item": item}},
                    *also,
                ])
        except ConditionFailed:
            return False
        return True

    def signal_sent(self, run_id: str, name: str, signal_id: str) -> bool:
        with _translate(f"signal {run_id}/{name}: id"):
            item = self.ddb.get_item(
                TableName=self.steps, Key=step_key(run_id, f"{SIGNAL_IDS}{name}#{signal_id}"),
                ConsistentRead=True).get("Item")
        return item is not None

    def signal_ids(self, run_id: str, name: str) -> set[str]:
        return {s["id"] for s in self._signals(run_id, name, unconsumed=False)}

    def _signals(self, run_id: str, name: str, *, unconsumed: bool) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND begins_with(step, :p)",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":p": {"S": signal_prefix(name)}},
            "ConsistentRead": True,
        }
        out: list[dict[str, Any]] = []
        while True:
            with _translate(f"signals {run_id}/{name}"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                doc = json.loads(item["doc"]["S"])
                doc["key"] = item["step"]["S"]
                doc["consumed"] = item.get("taken_by", {}).get("S")
                if not unconsumed or doc["consumed"] is None:
                    out.append(doc)
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def take_signal(self, run_id: str, name: str, wait_id: str) -> dict[str, Any] | None:
        """The oldest signal `name` not consumed by another wait, now consumed by
        `wait_id` (a conditional write: two waits never take the same signal; taking it
        again for the same wait is a no-op). None: there is none."""
        for doc in self._signals(run_id, name, unconsumed=False):
            if doc["consumed"] == wait_id:
                return doc
            if doc["consumed"] is not None:
                continue
            try:
                with _translate(f"signal {run_id}/{name}: consume"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=step_key(run_id, doc["key"]),
                        UpdateExpression="SET taken_by = :w",
                        ConditionExpression="attribute_not_exists(taken_by) OR taken_by = :w",
                        ExpressionAttributeValues={":w": {"S": wait_id}},
                    )
            except ConditionFailed:
                continue  # another wait took it first
            return doc
        return None

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

    def untake_signal(self, run_id: str, key: str, wait_id: str) -> None:
        """Give back a signal a wait took whose outcome turned out to be another."""
        try:
            with _translate(f"signal {run_id}: give back"):
                self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, key),
                    UpdateExpression="REMOVE taken_by",
                    ConditionExpression="taken_by = :w",
                    ExpressionAttributeValues={":w": {"S": wait_id}},
                )
        except ConditionFailed:
            pass

    # -- the driver ----------------------------------------------------------------------

    def suspend_driver(self, run_id: str, owner: str, attempt: int, pokes: int,
                       waiting: dict[str, Any], due_at: float | None, wake_at: float | None,
                       now: float, *, reset_attempt: bool = False, step: str = DRIVER) -> str:
        """Release the driver's lease, leaving what it waits for. Guarded by the lease
        and by `pokes` (the count its holder saw): "ok", "poked" (a signal landed
        meanwhile: look again, the lease is still yours), "stopping" (the run is being
        cancelled: the lease is still yours, end the driver) or "lost"."""
        values: dict[str, Any] = {":o": {"S": owner}, ":n": num(attempt), ":p": num(pokes),
                                  ":w": {"S": dumps(waiting)}}
        # The driver's history keeps only its last wait (the journal holds the run's
        # story): appended on every wait, a long-lived run's row would pass 400 KB.
        values[":h"] = {"L": [history_entry(now, "run.waiting", waits=waiting["kind"],
                                            name=waiting.get("name"))]}
        sets = ["waiting = :w", "#h = :h"]
        removes = ["lease_owner", "lease_until"]
        for attr, value in (("due_at", due_at), ("wake_at", wake_at)):
            if value is None:
                removes.append(attr)
            else:
                values[f":{attr}"] = num(value)
                sets.append(f"{attr} = :{attr}")
        if reset_attempt:
            values[":one"] = num(1)
            sets.append("attempt = :one")
        guard = status_guard(STEP_MOVES["suspend"], values)
        try:
            with _translate(f"driver {run_id}/{step}: suspend"):
                self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, step),
                    UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                    ConditionExpression=(
                        f"{guard} AND lease_owner = :o AND attempt = :n"
                        " AND attribute_not_exists(stopping)"
                        + (" AND (attribute_not_exists(pokes) OR pokes = :p)" if not pokes
                           else " AND pokes = :p")),
                    ExpressionAttributeNames={"#h": "history", "#s": "status"},
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ConditionFailed as exc:
            item = exc.item or self.ddb.get_item(TableName=self.steps,
                                                 Key=step_key(run_id, step),
                                                 ConsistentRead=True).get("Item") or {}
            mine = (item.get("lease_owner", {}).get("S") == owner
                    and int(item.get("attempt", {}).get("N", "0")) == attempt
                    and item.get("status", {}).get("S") == StepStatus.DISPATCHED)
            if not mine:
                return "lost"
            return "stopping" if "stopping" in item else "poked"
        return "ok"

    def poke_driver(self, run_id: str, now: float, step: str = DRIVER) -> StepRecord | None:
        """Tell the driver to look again (a signal landed). Returns the row as poked if
        nobody holds it (send it a dispatch; its wake covers a lost one), None if it is
        held (its holder sees the poke when it releases) or gone."""
        key = step_key(run_id, step)
        values: dict[str, Any] = {":one": num(1), ":wk": num(now + self.wake.redispatch_after)}
        poke = status_guard(STEP_MOVES["poke"], values)
        for _ in range(8):
            try:
                with _translate(f"driver {run_id}: poke"):
                    resp = self.ddb.update_item(
                        TableName=self.steps, Key=key,
                        UpdateExpression="ADD pokes :one SET wake_at = :wk",
                        ConditionExpression=(f"attribute_exists(step) AND {poke}"
                                             " AND attribute_not_exists(lease_owner)"),
                        ExpressionAttributeNames={"#s": "status"},
                        ExpressionAttributeValues=values,
                        ReturnValues="ALL_NEW",
                    )
                return step_from_item(resp["Attributes"])
            except ConditionFailed:
                pass
            try:
                with _translate(f"driver {run_id}: poke"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=key,
                        UpdateExpression="ADD pokes :one",
                        ConditionExpression=f"{poke} AND attribute_exists(lease_owner)",
                        ExpressionAttributeNames={"#s": "status"},
                        ExpressionAttributeValues={k: v for k, v in values.items()
                                                   if k != ":wk"},
                    )
                return None
            except ConditionFailed:
                row = self.get_driver(run_id, step)
                if row is None or row.status.terminal or row.status.value == "ready":
                    return None  # gone, ended, or not started (it reads its signals then)
        return None

    def get_driver(self, run_id: str, step: str = DRIVER) -> StepRecord | None:
        with _translate(f"driver {run_id}/{step}: read"):
            item = self.ddb.get_item(TableName=self.steps, Key=step_key(run_id, step),
                                     ConsistentRead=True).get("Item")
        return None if item is None else step_from_item(item)

    def drivers(self, run_id: str) -> list[StepRecord]:
        """The run's driver rows: its top's and its parallel branches' (one query)."""
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r AND begins_with(step, :d)",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":d": {"S": DRIVER}},
            "ProjectionExpression": "run_id, step, #s, backend, route, lease_owner, waiting,"
                                    " pokes, attempt, due_at, lease_until, wake_at",
            "ExpressionAttributeNames": {"#s": "status"},
            "ConsistentRead": True,
        }
        out: list[StepRecord] = []
        while True:
            with _translate(f"drivers of {run_id}"):
                resp = self.ddb.query(**kwargs)
            out.extend(step_from_item(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    # -- parallel operations ---------------------------------------------------------------

    def open_parallel(self, run_id: str, scope: str, pos: int, total: int, limit: int,
                      done: set[int], cursor: int, now: float) -> None:
        """The aggregate of a parallel operation (once): its size, the branches done, and
        `cursor`, the next branch to start (those before it started or done)."""
        item: dict[str, Any] = {**step_key(run_id, f"{PARALLEL}{scope}#{pos:08d}"),
                                "total": num(total), "max": num(limit), "cursor": num(cursor),
                                "starts": {"M": {}},
                                "expires_at": num(now + self.step_retention)}
        if done:
            item["done"] = {"NS": [str(i) for i in sorted(done)]}
        try:
            with _translate(f"parallel {run_id}/{scope}#{pos}: open"):
                self.ddb.put_item(TableName=self.steps, Item=item,
                                  ConditionExpression="attribute_not_exists(step)")
        except ConditionFailed:
            pass  # opened before (a call repeated)

    def branch_done(self, run_id: str, scope: str, pos: int, index: int) -> dict[str, Any]:
        """Count branch `index` done and take the next branch to start in the same write
        (the cursor moves on; which one it took is kept, so a repeat of this after a
        crash starts the same one). Returns {total, max, done, start (or None)}."""
        key = step_key(run_id, f"{PARALLEL}{scope}#{pos:08d}")
        try:
            with _translate(f"parallel {run_id}/{scope}#{pos}: branch {index} done"):
                resp = self.ddb.update_item(
                    TableName=self.steps, Key=key,
                    UpdateExpression="SET #c = #c + :one, starts.#i = #c ADD done :i",
                    ConditionExpression="attribute_exists(step) AND NOT contains(done, :n)",
                    ExpressionAttributeNames={"#i": str(index), "#c": "cursor"},
                    ExpressionAttributeValues={":i": {"NS": [str(index)]},
                                               ":n": {"N": str(index)}, ":one": num(1)},
                    ReturnValues="ALL_NEW",
                )
            item = resp["Attributes"]
        except ConditionFailed:
            # Counted before (this is a repeat): what that write took stands.
            with _translate(f"parallel {run_id}/{scope}#{pos}: read"):
                item = self.ddb.get_item(TableName=self.steps, Key=key,
                                         ConsistentRead=True).get("Item") or {}
            if not item:
                raise
        agg = _aggregate(item)
        taken = item.get("starts", {}).get("M", {}).get(str(index))
        nxt = None if taken is None else int(taken["N"])
        agg["start"] = nxt if nxt is not None and nxt < agg["total"] else None
        return agg

    def settle_branch(self, run_id: str, step: str, now: float) -> None:
        """End a parallel branch's row whose result is counted (its holder died before
        ending it): success, whoever holds its lease (a holder still alive finds its own
        write refused and stops). A row whose dispatch nobody took yet (another call ran
        the branch to its end) is taken first: ready, dispatched, then success."""
        for _ in range(2):
            move = STEP_MOVES["settle-branch"]
            values: dict[str, Any] = {":now": num(now), ":exp": num(now + self.step_retention)}
            guard, to = status_guard(move, values), status_set(move, values)
            hist = history_clause(values, now, "step.succeeded", settled=True)
            try:
                with _translate(f"branch {run_id}/{step}: settle"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=step_key(run_id, step),
                        UpdateExpression=(f"SET {to}, finished_at = :now, expires_at = :exp,"
                                          f" wake_at = :now, {hist}"
                                          " REMOVE lease_owner, lease_until"),
                        ConditionExpression=guard,
                        ExpressionAttributeNames={"#s": "status", "#h": "history"},
                        ExpressionAttributeValues=values,
                    )
                return
            except ConditionFailed:
                pass
            take = STEP_MOVES["take-branch"]
            values = {}
            guard, to = status_guard(take, values), status_set(take, values)
            hist = history_clause(values, now, "step.started", attempt=1, settled=True)
            try:
                with _translate(f"branch {run_id}/{step}: take to settle"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=step_key(run_id, step),
                        UpdateExpression=f"SET {to}, {hist}", ConditionExpression=guard,
                        ExpressionAttributeNames={"#s": "status", "#h": "history"},
                        ExpressionAttributeValues=values,
                    )
            except ConditionFailed:
                return  # ended meanwhile (or never made)

    def get_parallel(self, run_id: str, scope: str, pos: int,
                     now: float | None = None) -> dict[str, Any] | None:
        key = f"{PARALLEL}{scope}#{pos:08d}"
        with _translate(f"parallel {run_id}/{scope}#{pos}: read"):
            item = self.ddb.get_item(TableName=self.steps, Key=step_key(run_id, key),
                                     ConsistentRead=True).get("Item")
        if item is None:
            return None
        if now is not None and float(item.get("expires_at", {}).get("N", "inf")) \
                < now + self.step_retention / 2:
            self._restamp(run_id, key, now)  # a parallel as long-lived as its run
        return _aggregate(item)

    def hold_driver(self, run_id: str, owner: str, until: float) -> StepRecord | None:
        """Take the lease of a driver nobody holds (an operator's reset); None if it is
        held, ended or missing. A driver not started yet (ready) is taken as well."""
        move = STEP_MOVES["hold"]
        values: dict[str, Any] = {":o": {"S": owner}, ":u": num(until)}
        guard, to = status_guard(move, values), status_set(move, values)
        try:
            with _translate(f"driver {run_id}: hold"):
                resp = self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, DRIVER),
                    UpdateExpression=f"SET lease_owner = :o, lease_until = :u, wake_at = :u, {to}",
                    ConditionExpression=f"{guard} AND attribute_not_exists(lease_owner)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=values,
                    ReturnValues="ALL_NEW",
                )
        except ConditionFailed:
            return None
        return step_from_item(resp["Attributes"])

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

    def renew_driver(self, run_id: str, owner: str, attempt: int, until: float,
                     step: str = DRIVER) -> bool:
        """Extend the driver's lease (an eager chain of calls); False if it is lost."""
        values: dict[str, Any] = {":u": num(until), ":o": {"S": owner}, ":n": num(attempt)}
        guard = status_guard(STEP_MOVES["renew"], values)
        try:
            with _translate(f"driver {run_id}/{step}: renew"):
                self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, step),
                    UpdateExpression="SET lease_until = :u, wake_at = :u",
                    ConditionExpression=f"{guard} AND lease_owner = :o AND attempt = :n",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=values,
                )
        except ConditionFailed:
            return False
        return True
