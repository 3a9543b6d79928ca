"""A run copied whole from one stack to another (`orchestrator runs pull`): its rows as
the store has them, read here and written there.

- **export**: the run row, every item of its partition of the steps table (step rows,
  a durable run's driver and branches, journal entries, signals, parallels, run events,
  join counts), and the blobs they reference (a journal entry's `ref`, a step's
  `output_ref`), read whole. Items are DynamoDB JSON (`{"S": ...}`), a binary value
  base64 as DynamoDB's own JSON has it.
- **import**: the same items written into this stack, each with a conditional put: the
  run row last (it is what makes the run visible), so a run id already here is
  refused before anything is written, and a run is never half there by its row.
  Every item is made *inert* on the way in: no wake (so no sweep visits it), no lease,
  not `active` (so no full sweep lists it), and the run row says where it came from
  (`imported`). No message is sent: no worker ever hears of it."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.tables import Item, Tables
from orchestrator.errors import ConditionFailed

__all__ = ["INERT", "RunCopies", "decoded", "from_json_item", "inert", "to_json_item"]

# What an imported item loses: what would make a sweep, a worker or a listing of runs
# in flight act on it.
INERT = ("wake_at", "wake_shard", "lease_owner", "lease_until", "active", "count_me")
# The attributes holding a blob's key (journal entries, step outputs).
BLOB_REFS = ("ref", "output_ref")


def _value_to_json(value: Mapping[str, Any]) -> dict[str, Any]:
    (kind, raw), = value.items()
    if kind == "B":
        return {"B": base64.b64encode(raw).decode()}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode() for b in raw]}
    if kind == "L":
        return {"L": [_value_to_json(v) for v in raw]}
    if kind == "M":
        return {"M": {k: _value_to_json(v) for k, v in raw.items()}}
    return {kind: raw}


def _value_from_json(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(f"not a DynamoDB attribute value: {str(value)[:80]}")
    (kind, raw), = value.items()
    if kind == "B":
        return {"B": base64.b64decode(raw, validate=True)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b, validate=True) for b in raw]}
    if kind == "L":
        return {"L": [_value_from_json(v) for v in raw]}
    if kind == "M":
        return {"M": {str(k): _value_from_json(v) for k, v in raw.items()}}
    if kind not in ("S", "N", "BOOL", "NULL", "SS", "NS"):
        raise ValueError(f"unknown DynamoDB type {kind!r}")
    return {kind: raw}


def to_json_item(item: Item) -> dict[str, Any]:
    """An item as JSON can carry it (binary values base64)."""
    return {name: _value_to_json(v) for name, v in item.items()}


def from_json_item(doc: Mapping[str, Any]) -> Item:
    """An item from `to_json_item`'s JSON; ValueError naming what is wrong."""
    out: Item = {}
    for name, v in doc.items():
        try:
            out[str(name)] = _value_from_json(v)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"attribute {name!r}: {exc}") from None
    return out


def decoded(run_id: str, run: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
            blobs: Mapping[str, str]) -> tuple[Item, list[Item]]:
    """An export's run row and rows as items, each checked to belong to run `run_id`
    and to have its key, and its blobs to be those the rows reference (under the run's
    own keys: an import writes no other blob); ValueError naming the field
    (`run.status`, `rows.3.run_id`, `blobs`)."""
    def item(raw: Mapping[str, Any], where: str, key: str) -> Item:
        try:
            out = from_json_item(raw)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if out.get("run_id") != {"S": run_id}:
            raise ValueError(f"{where}.run_id: not the export's run {run_id!r}")
        if "S" not in out.get(key, {}):
            raise ValueError(f"{where}.{key}: missing (a string)")
        return out

    out = item(run, "run", "status"), [item(r, f"rows.{i}", "step")
                                        for i, r in enumerate(rows)]
    refs = {r[attr]["S"] for r in out[1] for attr in BLOB_REFS if "S" in r.get(attr, {})}
    for key in refs:
        if not key.startswith((f"journal/{run_id}/", f"outputs/{run_id}/")):
            raise ValueError(f"rows: blob key {key[:200]!r} is not one of run {run_id!r}")
    if set(blobs) != refs:
        odd = sorted(set(blobs) ^ refs)[0]
        raise ValueError(f"blobs: {odd[:200]!r} is " + ("missing: a row references it"
                         if odd in refs else "referenced by no row"))
    return out


def inert(item: Item, source: str | None = None) -> Item:
    """`item` as imported: without what would wake, lease or list it as in flight;
    a run row (`source` given) marked `imported` from `source`."""
    out = {k: v for k, v in item.items() if k not in INERT}
    if source is not None:
        out["imported"] = {"S": source}
    return out


class RunCopies(Tables):
    """Reads a run whole for an export, and writes one imported (runs and steps tables,
    the blob store)."""

    def export_run(self, run_id: str) -> tuple[Item, list[Item], dict[str, str]] | None:
        """(the run row, every item of its partition of the steps table in key order,
        the blobs they reference by key); None if there is no such run."""
        with _translate(f"run {run_id}: read for export"):
            run = self.ddb.get_item(TableName=self.runs, Key={"run_id": {"S": run_id}},
                                    ConsistentRead=True).get("Item")
        if not run:
            return None
        rows: list[Item] = []
        kwargs: dict[str, Any] = {
            "TableName": self.steps, "KeyConditionExpression": "run_id = :r",
            "ExpressionAttributeValues": {":r": {"S": run_id}}, "ConsistentRead": True,
        }
        while True:
            with _translate(f"run {run_id}: rows for export"):
                resp = self.ddb.query(**kwargs)
            rows.extend(resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        blobs: dict[str, str] = {}
        for row in rows:
            for attr in BLOB_REFS:
                key = row.get(attr, {}).get("S")
                if key is not None and key not in blobs:
                    if self.blobs is None:
                        raise RuntimeError(f"{row['step']['S']}: a blob, and no blob store")
                    blobs[key] = self.blobs.get(key).decode()
        return run, rows, blobs

    def run_exists(self, run_id: str) -> bool:
        with _translate(f"run {run_id}: read"):
            return "Item" in self.ddb.get_item(TableName=self.runs,
                                               Key={"run_id": {"S": run_id}},
                                               ProjectionExpression="run_id",
                                               ConsistentRead=True)

    def import_run(self, run: Item, rows: list[Item], blobs: Mapping[str, str],
                   source: str) -> tuple[int, str]:
        """Write an exported run here, inert (see the module's docstring): the blobs, then
        each row, then the run row, put only where no run is: the run row is the commit
        point, so rows left by an import that died half way (or by an expired run of
        the same id) are written over by the next. ConditionFailed (nothing written) if
        the run exists. (How many items were written, the run's status.)"""
        run_id = run["run_id"]["S"]
        if self.run_exists(run_id):
            raise ConditionFailed(f"run {run_id!r} exists here already")
        if blobs and self.blobs is None:
            raise RuntimeError("an export with blobs, and no blob store")
        for key, text in blobs.items():
            self.blobs.put(key, text.encode())
        for row in rows:
            with _translate(f"run {run_id}: import {row['step']['S']}"):
                self.ddb.put_item(TableName=self.steps, Item=inert(row))
        with _translate(f"run {run_id}: import its row"):
            self.ddb.put_item(TableName=self.runs, Item=inert(run, source),
                              ConditionExpression="attribute_not_exists(run_id)")
        return len(rows) + 1, str(run["status"]["S"])
