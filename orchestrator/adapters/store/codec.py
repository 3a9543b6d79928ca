"""The DynamoDB item encoding of run and step rows.

JSON values (run input, step payloads and outputs, errors) are stored as JSON strings:
the bytes a function returned are the bytes its dependants receive, with no float/Decimal
or empty-set surprises from DynamoDB's type system."""

from __future__ import annotations

import json
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any, TypeGuard, TypeVar

from orchestrator.adapters.metering import decode as _requests
from orchestrator.adapters.metering import encode as _encoded
from orchestrator.engine.definition import Definition, Gate, Trigger
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.wakes import shard_of
from orchestrator.strict_json import dumps

__all__ = [
    "history_entry",
    "is_key",
    "num",
    "requests_item",
    "run_from_item",
    "run_to_item",
    "step_from_item",
    "step_to_item",
]

Item = dict[str, dict[str, Any]]
T = TypeVar("T")


def _s(item: Item, key: str) -> str | None:
    v = item.get(key)
    return None if v is None else str(v["S"])


def _n(item: Item, key: str) -> float | None:
    v = item.get(key)
    return None if v is None else float(v["N"])


def _json(item: Item, key: str) -> Any:
    raw = _s(item, key)
    return None if raw is None else json.loads(raw)


def _typed(item: Item, key: str, read: Callable[[Any], T]) -> T | None:
    doc = _json(item, key)
    return None if doc is None else read(doc)


def _history(item: Item) -> tuple[dict[str, Any], ...]:
    entries = item.get("history", {}).get("L", [])
    return tuple(json.loads(e["S"]) for e in entries)


def history_entry(at: float, kind: str, **fields: Any) -> dict[str, Any]:
    """One line of a row's history (DynamoDB list element): what happened and when."""
    entry: dict[str, Any] = {"at": round(at, 3), "type": kind}
    entry.update({k: v for k, v in fields.items() if v is not None})
    return {"S": dumps(entry)}


def _list(item: Item, key: str) -> tuple[str, ...]:
    # Edge lists are one JSON string, not a DynamoDB list: a join's row is rewritten by
    # every dependency, and a list of a thousand typed elements is costly to copy.
    raw = _s(item, key)
    return () if raw is None else tuple(json.loads(raw))


def step_from_item(item: Item) -> StepRecord:
    sat = item.get("satisfied")
    return StepRecord(
        run_id=item["run_id"]["S"],
        step=item["step"]["S"],
        status=StepStatus(item["status"]["S"]),
        backend=_s(item, "backend") or "",
        route=_s(item, "route") or "",
        deps=_list(item, "deps"),
        dependants=_list(item, "dependants"),
        satisfied=frozenset(sat["SS"]) if sat else frozenset(),
        payload=_json(item, "payload") or {},
        attempt=int(_n(item, "attempt") or 0),
        max_attempts=int(_n(item, "max_attempts") or 1),
        timeout=_n(item, "timeout") or 60.0,
        retry_strategy=_s(item, "retry_strategy") or "linear",
        retry_delay=_n(item, "retry_delay") or 1.0,
        retry_max_delay=_n(item, "retry_max_delay") or 300.0,
        lease_owner=_s(item, "lease_owner"),
        lease_until=_n(item, "lease_until"),
        due_at=_n(item, "due_at"),
        ready_at=_n(item, "ready_at"),
        started_at=_n(item, "started_at"),
        attempt_started=_n(item, "attempt_started"),
        finished_at=_n(item, "finished_at"),
        has_output="output" in item or "output_ref" in item,
        output=_json(item, "output"),
        output_ref=_s(item, "output_ref"),
        output_size=int(_n(item, "output_size") or 0),
        error=_json(item, "error"),
        expires_at=_n(item, "expires_at"),
        count_me=bool(item.get("count_me", {}).get("BOOL", False)),
        stopping=bool(item.get("stopping", {}).get("BOOL", False)),
        wake_at=_n(item, "wake_at"),
        resends=int(_n(item, "resends") or 0),
        waiting=_json(item, "waiting"),
        pokes=int(_n(item, "pokes") or 0),
        history=_history(item),
        requests=_requests(item),
    )


# How many partitions the `recent` index spreads runs over (fixed for a deployment's
# life: a listing reads them all, and rows written before sharding under "runs").
LIST_SHARDS = 8
LISTED_LEGACY = "runs"


def listed_key(run_id: str) -> str:
    return f"runs#{zlib.crc32(run_id.encode()) % LIST_SHARDS}"


def is_key(value: Any, names: Collection[str]) -> TypeGuard[dict[str, Any]]:
    """Is `value` a key as a query's LastEvaluatedKey holds it (a page cursor a client
    sent back): attributes among `names`, each one string or number value."""
    return isinstance(value, dict) and set(value) <= set(names) and all(
        isinstance(v, dict) and len(v) == 1 and set(v) <= {"S", "N"} for v in value.values()
    )


def num(x: float | int) -> dict[str, str]:
    if isinstance(x, int) or float(x).is_integer():
        return {"N": str(int(x))}
    return {"N": f"{x:.3f}"}


def step_to_item(s: StepRecord) -> Item:
    item: Item = {
        "run_id": {"S": s.run_id},
        "step": {"S": s.step},
        "status": {"S": s.status.value},
        "backend": {"S": s.backend},
        "route": {"S": s.route},
        "deps": {"S": dumps(list(s.deps))},
        "dependants": {"S": dumps(list(s.dependants))},
        "payload": {"S": dumps(s.payload)},
        "attempt": num(s.attempt),
        "max_attempts": num(s.max_attempts),
        "timeout": num(s.timeout),
        "retry_strategy": {"S": s.retry_strategy},
        "retry_delay": num(s.retry_delay),
        "retry_max_delay": num(s.retry_max_delay),
        "output_size": num(s.output_size),
    }
    if s.satisfied:
        item["satisfied"] = {"SS": sorted(s.satisfied)}
    for key in ("lease_owner", "output_ref"):
        v = getattr(s, key)
        if v is not None:
            item[key] = {"S": v}
    item["wake_shard"] = num(shard_of(s.run_id))
    if s.resends:
        item["resends"] = num(s.resends)
    if s.waiting is not None:
        item["waiting"] = {"S": dumps(s.waiting)}
    if s.pokes:
        item["pokes"] = num(s.pokes)
    for key in ("lease_until", "due_at", "ready_at", "started_at", "attempt_started",
                "finished_at", "expires_at", "wake_at"):
        v = getattr(s, key)
        if v is not None:
            item[key] = num(v)
    if s.has_output and s.output_ref is None:
        item["output"] = {"S": dumps(s.output)}
    if s.error is not None:
        item["error"] = {"S": dumps(s.error)}
    if s.count_me:
        item["count_me"] = {"BOOL": True}
    if s.stopping:
        item["stopping"] = {"BOOL": True}
    if s.history:
        item["history"] = {"L": [{"S": dumps(e)} for e in s.history]}
    item.update(requests_item(s.requests))
    return item


# Definitions decoded, by their stored form: a run's definition never changes, and the
# runs of one workflow share theirs, but every read of a run row decoded it again (a
# follower's every look, each worker's context): 7% of the dev process's time in W2.
_DECODED: OrderedDict[bytes | str, Definition] = OrderedDict()
_DECODED_KEEP = 256
_decoded_lock = threading.Lock()


def _definition(item: Item) -> Definition:
    """A run's definition: compressed, or as JSON text in rows written before."""
    packed = item.get("definition_z")
    stored: bytes | str | None = packed["B"] if packed is not None else _s(item, "definition")
    if stored is None:
        return Definition.from_json({})
    with _decoded_lock:
        hit = _DECODED.get(stored)
        if hit is not None:
            _DECODED.move_to_end(stored)
            return hit
    doc = json.loads(zlib.decompress(stored)) if isinstance(stored, bytes) else (
        json.loads(stored) or {})
    decoded = Definition.from_json(doc)
    with _decoded_lock:
        _DECODED[stored] = decoded
        while len(_DECODED) > _DECODED_KEEP:
            _DECODED.popitem(last=False)
    return decoded


def run_from_item(item: Item) -> RunRecord:
    return RunRecord(
        run_id=item["run_id"]["S"],
        workflow=item["workflow"]["S"],
        status=RunStatus(item["status"]["S"]),
        input=_json(item, "input"),
        definition=_definition(item),
        created_at=(_n(item, "created_at") or 0) / 1000.0,
        total=int(_n(item, "total") or 0),
        remaining=int(_n(item, "remaining") or 0),
        on_failure=OnFailure(_s(item, "on_failure") or "halt"),
        updated_at=_n(item, "updated_at"),
        kill_requested=bool(item.get("kill_requested", {}).get("BOOL", False)),
        kill_reason=_s(item, "kill_reason"),
        halted=bool(item.get("halted", {}).get("BOOL", False)),
        stop_at=_n(item, "stop_at"),
        paused=_json(item, "paused"),
        holds_locks=bool(item.get("holds_locks", {}).get("BOOL", False)),
        imported=_s(item, "imported"),
        error=_json(item, "error"),
        finished_at=_n(item, "finished_at"),
        expires_at=_n(item, "expires_at"),
        trigger=_typed(item, "trigger", Trigger.from_json),
        rerun_of=_s(item, "rerun_of"),
        version=_s(item, "version"),
        gate=_typed(item, "gate", Gate.from_json),
        admit_at=_n(item, "admit_at"),
        started_at=_n(item, "started_at"),
        wake_at=_n(item, "wake_at"),
        history=_history(item),
        requests=_requests(item),
    )


def run_to_item(r: RunRecord) -> Item:
    item: Item = {
        "run_id": {"S": r.run_id},
        "workflow": {"S": r.workflow},
        "status": {"S": r.status.value},
        "input": {"S": dumps(r.input)},
        # Compressed (a 100-step chain's 15 KB is 0.7 KB): DynamoDB bills every write of
        # the row, and of its copies in the ALL-projected indexes, by the row's size.
        "definition_z": {"B": zlib.compress(dumps(r.definition.to_json()).encode(), 6)},
        # created_at is the GSI sort key: integer milliseconds keep "newest first" exact.
        "created_at": {"N": str(int(r.created_at * 1000))},
        "total": num(r.total),
        "remaining": num(r.remaining),
        "on_failure": {"S": r.on_failure.value},
        "kill_requested": {"BOOL": r.kill_requested},
        "halted": {"BOOL": r.halted},
        # The partition of the `recent` index: every run, spread over LIST_SHARDS keys so
        # that no one key takes every start's write (a hot partition at ~1,000/s).
        "listed": {"S": listed_key(r.run_id)},
    }
    if not r.status.terminal:
        item["active"] = {"S": "1"}
    if r.updated_at is not None:
        item["updated_at"] = num(r.updated_at)
    if r.kill_reason is not None:
        item["kill_reason"] = {"S": r.kill_reason}
    if r.error is not None:
        item["error"] = {"S": dumps(r.error)}
    item["wake_shard"] = num(shard_of(r.run_id))
    for key in ("finished_at", "expires_at", "admit_at", "started_at", "wake_at", "stop_at"):
        v = getattr(r, key)
        if v is not None:
            item[key] = num(v)
    if r.trigger is not None:
        item["trigger"] = {"S": dumps(r.trigger.to_json())}
    if r.gate is not None:
        item["gate"] = {"S": dumps(r.gate.to_json())}
    if r.rerun_of is not None:
        item["rerun_of"] = {"S": r.rerun_of}
    if r.version is not None:
        item["version"] = {"S": r.version}
    if r.imported is not None:
        item["imported"] = {"S": r.imported}
    if r.history:
        item["history"] = {"L": [{"S": dumps(e)} for e in r.history]}
    item.update(requests_item(r.requests))
    return item


def requests_item(counts: dict[str, int]) -> Item:
    """Request counts as a row's attributes (adapters/metering.py: short names)."""
    return {k: num(n) for k, n in _encoded(counts).items()}
