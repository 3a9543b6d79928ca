"""A durable run's drivers: its root driver (`$run`) and its parallel branches' drivers
(`$run/<scope>`), step rows with moves of their own (suspend, poke, hold, renew), and the
parallel operations' aggregates (`~p#...`), all in the steps table (see journal.py)."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry
from orchestrator.adapters.store.codec import history_entry, num, step_from_item
from orchestrator.adapters.store.journal import PARALLEL, restamp
from orchestrator.adapters.store.tables import (
    Tables,
    history_clause,
    status_guard,
    status_set,
    step_key,
    with_requests,
)
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable_scopes import is_driver
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import STEP_MOVES, Released, StepStatus
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["Drivers"]


def _aggregate(item: dict[str, Any]) -> dict[str, Any]:
    return {"total": int(item["total"]["N"]), "max": int(item["max"]["N"]),
            "done": {int(x) for x in item.get("done", {}).get("NS", [])}}


class Drivers(Tables):
    """Reads and guarded moves of a durable run's driver rows."""

    def suspend_driver(self, run_id: str, owner: str, attempt: int, pokes: int,
                       waiting: dict[str, Any], due_at: float | None, wake_at: float | None,
                       now: float, *, reset_attempt: bool = False, step: str = DRIVER) -> Released:
        """Release the driver's lease, leaving what it waits for. Guarded by the lease
        and by `pokes` (the count its holder saw): how it went (`Released`)."""
        values: dict[str, Any] = {":o": {"S": owner}, ":n": num(attempt), ":p": num(pokes),
                                  ":w": {"S": dumps(waiting)}}
        # A durable driver's history keeps only its last wait (the journal holds the
        # run's story): appended on every wait, a long-lived run's row would pass 400 KB.
        # A YAML step's wait (a lock, its backend's limits) is one transition of its
        # history among the others: appended.
        driver = is_driver(step)
        values[":h"] = {"L": [history_entry(
            now, "run.waiting" if driver else "step.waiting", waits=waiting["kind"],
            name=waiting.get("name"))]}
        sets = ["waiting = :w",
                "#h = :h" if driver else "#h = list_append(if_not_exists(#h, :nil), :h)"]
        if not driver:
            values[":nil"] = {"L": []}
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
        names = {"#h": "history", "#s": "status"}
        try:
            # The run's request counts ride on each suspension (adapters/metering.py).
            with carry(run_id, "dynamodb.UpdateItem") as counts, _translate(
                    f"driver {run_id}/{step}: suspend"):
                self.ddb.update_item(
                    TableName=self.steps, Key=step_key(run_id, step),
                    UpdateExpression=with_requests(
                        f"SET {', '.join(sets)} REMOVE {', '.join(removes)}", counts, names,
                        values),
                    ConditionExpression=(
                        f"{guard} AND lease_owner = :o AND attempt = :n"
                        " AND attribute_not_exists(stopping)"
                        + (" AND (attribute_not_exists(pokes) OR pokes = :p)" if not pokes
                           else " AND pokes = :p")),
                    ExpressionAttributeNames=names,
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
                return Released.LOST
            return Released.STOPPING if "stopping" in item else Released.POKED
        return Released.OK

    def poke_driver(self, run_id: str, now: float, step: str = DRIVER) -> StepRecord | None:
        """Tell the driver to look again (a signal landed). Returns the row as poked if
        nobody holds it (send it a dispatch; its wake covers a lost one), None if it is
        held (its holder sees the poke when it releases) or gone."""
        key = step_key(run_id, step)
        values: dict[str, Any] = {":one": num(1), ":wk": num(now + self.wake.redispatch_after)}
        poke = status_guard(STEP_MOVES["poke"], values)
        for _ in range(8):
            # The signal's request counts ride on the poke (adapters/metering.py).
            try:
                names = {"#s": "status"}
                vals = dict(values)
                with carry(run_id, "dynamodb.UpdateItem") as counts, _translate(
                        f"driver {run_id}: poke"):
                    resp = self.ddb.update_item(
                        TableName=self.steps, Key=key,
                        UpdateExpression=with_requests("ADD pokes :one SET wake_at = :wk",
                                                       counts, names, vals),
                        ConditionExpression=(f"attribute_exists(step) AND {poke}"
                                             " AND attribute_not_exists(lease_owner)"),
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=vals,
                        ReturnValues="ALL_NEW",
                    )
                return step_from_item(resp["Attributes"])
            except ConditionFailed:
                pass
            try:
                names = {"#s": "status"}
                vals = {k: v for k, v in values.items() if k != ":wk"}
                with carry(run_id, "dynamodb.UpdateItem") as counts, _translate(
                        f"driver {run_id}: poke"):
                    self.ddb.update_item(
                        TableName=self.steps, Key=key,
                        UpdateExpression=with_requests("ADD pokes :one", counts, names, vals),
                        ConditionExpression=f"{poke} AND attribute_exists(lease_owner)",
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=vals,
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

    def all(self, run_id: str) -> list[StepRecord]:
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
            restamp(self, run_id, key, now)  # a parallel as long-lived as its run
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

    def renew_driver(self, run_id: str, owner: str, attempt: int, until: float,
                     step: str = DRIVER, *, live: bool = False) -> bool:
        """Extend the driver's lease (an eager chain of calls); False if it is lost, or
        (`live`: before starting new work) if its run is stopping."""
        values: dict[str, Any] = {":u": num(until), ":o": {"S": owner}, ":n": num(attempt)}
        guard = status_guard(STEP_MOVES["renew"], values)
        if live:
            guard += " AND attribute_not_exists(stopping)"
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
