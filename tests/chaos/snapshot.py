"""Everything the checker reads, gathered once the cluster is quiet: the tables (scans
with consistent reads, decoded by the store's own codec), the committed outputs (blobs
included), the API's view and history of every run, the function server's ledger and
every fault log; for durable runs, their journals, signals and parallel aggregates (the
items after a run's step rows, sort keys from `~`), the step bodies' executions and
the durable calls (ledger) and what the harness sent them (`drive.jsonl`).

A `Snapshot` is plain data, so the checker's tests build small ones by hand."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from orchestrator.adapters.store.codec import run_from_item, step_from_item
from orchestrator.engine.records import RunRecord, StepRecord
from tests.chaos.jsonl import read_jsonl

__all__ = ["Body", "Call", "Signal", "Snapshot", "collect", "dump", "item_size", "read_durable",
           "read_faults", "read_ledger"]


@dataclass
class Call:
    """One call the function server received (`recv`), and its answer (`done`, None if
    the server died before answering)."""

    recv: dict[str, Any]
    done: dict[str, Any] | None = None

    @property
    def t(self) -> float:
        return float(self.recv["t"])

    @property
    def attempt(self) -> int:
        return int(self.recv.get("attempt") or 0)

    @property
    def delivered_2xx(self) -> bool:
        """Answered 2xx with a JSON body, not cut off. A `hang` answer (sent after the
        step's timeout) counts: a caller stalled while it waited still reads it, since
        an HTTP read timeout bounds each wait for bytes, not the whole call."""
        d = self.done
        return (d is not None and 200 <= int(d["status"]) < 300 and d.get("out") is not None
                and d.get("fault") != "drop")


@dataclass
class Body:
    """One execution of a durable step body (`bstart`), and its end (`bend`, None if the
    server died before it ended)."""

    start: dict[str, Any]
    end: dict[str, Any] | None = None

    @property
    def run(self) -> str:
        return str(self.start.get("run"))

    @property
    def op(self) -> str:
        return str(self.start.get("op"))

    @property
    def scope(self) -> str:
        return str(self.start.get("scope") or "")

    @property
    def t(self) -> float:
        return float(self.start["t"])

    @property
    def ended(self) -> float | None:
        return None if self.end is None else float(self.end["t"])

    @property
    def attempt(self) -> int:
        return int(self.start.get("attempt") or 0)


@dataclass
class Signal:
    """A signal queued for a durable run (an `~s#` item)."""

    name: str
    id: str
    payload: Any
    at: float
    taken_by: str | None
    sk: str = ""  # its sort key: the queue's order (by the millisecond, then the id)


@dataclass
class Snapshot:
    runs: dict[str, RunRecord] = field(default_factory=dict)
    steps: dict[str, dict[str, StepRecord]] = field(default_factory=dict)
    # Committed outputs by (run, step) (blobs read back).
    outputs: dict[tuple[str, str], Any] = field(default_factory=dict)
    # Raw items of every table with their approximate DynamoDB size, by a readable key.
    item_sizes: dict[str, int] = field(default_factory=dict)
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    # Logical run name -> (Idempotency-Key, run id the API answered or None).
    submitted: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    calm_at: float = 0.0
    dlq: int = 0
    # Durable runs: journal entries (scope, position order), signals queued (oldest
    # first), the signal ids taken (`~i#` markers: (name, id)), parallel aggregates by
    # (scope, position).
    journals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    signals: dict[str, list[Signal]] = field(default_factory=dict)
    signal_ids: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    parallels: dict[str, dict[tuple[str, int], dict[str, Any]]] = field(default_factory=dict)
    bodies: list[Body] = field(default_factory=list)
    dcalls: list[Call] = field(default_factory=list)
    # What the harness sent durable runs (durable_drive): signals, events, answers.
    drive: list[dict[str, Any]] = field(default_factory=list)
    # The control table's items (approval gates, state cells, locks) by "pk/sk", raw.
    control: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The deploy's promotions through the API (deploy.py: each answer), and the check
    # calls (replays in check mode: a promotion's) the function server received.
    deploy: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Call] = field(default_factory=list)


def dump(snap: Snapshot, path: Path) -> None:
    """The rows of a snapshot as JSON (kept with the logs of a failing seed)."""
    doc = {
        "calm_at": snap.calm_at,
        "runs": {rid: {"workflow": r.workflow, "status": r.status.value, "halted": r.halted,
                       "error": r.error, "created_at": r.created_at, "version": r.version,
                       "finished_at": r.finished_at, "history": list(r.history),
                       "steps": {n: {"status": s.status.value, "attempt": s.attempt,
                                     "max_attempts": s.max_attempts, "error": s.error,
                                     "lease_owner": s.lease_owner, "stopping": s.stopping,
                                     "finished_at": s.finished_at, "history": list(s.history)}
                                 for n, s in snap.steps.get(rid, {}).items()}}
                 for rid, r in snap.runs.items()},
        "submitted": snap.submitted,
        "deploy": snap.deploy,
    }
    doc["journals"] = snap.journals
    # The items of flow control (limits' holders, queues and turns; backend limits), raw:
    # what slot-leaked reads.
    doc["control"] = {k: v for k, v in snap.control.items()
                      if k.startswith(("lock#", "queue#", "turns#", "blimit"))}
    doc["signals"] = {rid: [vars(s) for s in sigs] for rid, sigs in snap.signals.items()}
    doc["parallels"] = {rid: {f"{k[0]}#{k[1]}": v for k, v in aggs.items()}
                        for rid, aggs in snap.parallels.items()}
    path.write_text(json.dumps(doc, indent=1, default=str))


def item_size(value: Any) -> int:
    """Approximate DynamoDB size of an attribute value (names and values in UTF-8,
    numbers about half their digits, a few bytes per list or map)."""
    if "S" in value:
        return len(value["S"].encode())
    if "N" in value:
        return len(value["N"]) // 2 + 2
    if "B" in value:
        return len(value["B"])
    if "BOOL" in value or "NULL" in value:
        return 1
    if "SS" in value:
        return sum(len(s.encode()) for s in value["SS"])
    if "NS" in value:
        return sum(len(s) // 2 + 2 for s in value["NS"])
    if "L" in value:
        return 3 + sum(1 + item_size(v) for v in value["L"])
    if "M" in value:
        return 3 + sum(1 + len(k.encode()) + item_size(v) for k, v in value["M"].items())
    return len(json.dumps(value))


def _item_total(item: dict[str, Any]) -> int:
    return sum(len(k.encode()) + item_size(v) for k, v in item.items())


def _scan(ddb: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        resp = ddb.scan(**kwargs)
        items.extend(resp.get("Items", []))
        if "LastEvaluatedKey" not in resp:
            return items
        kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _get(api: httpx.Client, path: str, within: float = 30.0) -> dict[str, Any]:
    """GET a JSON document, retried while the API answers 5xx or is restarting."""
    deadline = time.monotonic() + within
    while True:
        try:
            resp = api.get(path)
            if resp.status_code < 500:
                doc: dict[str, Any] = resp.json()
                return doc
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.25)


def read_ledger(path: Path) -> list[Call]:
    calls: dict[str, Call] = {}
    for rec in read_jsonl(path):
        if rec.get("ev") == "recv":
            calls[rec["id"]] = Call(rec)
        elif rec.get("ev") == "done" and rec.get("id") in calls:
            calls[rec["id"]].done = rec
    return sorted(calls.values(), key=lambda c: c.t)


def read_durable(path: Path) -> tuple[list[Body], list[Call]]:
    """The step bodies' executions and the durable calls of a ledger."""
    bodies: dict[str, Body] = {}
    calls: dict[str, Call] = {}
    for rec in read_jsonl(path):
        ev = rec.get("ev")
        if ev == "bstart":
            bodies[rec["id"]] = Body(rec)
        elif ev == "bend" and rec.get("id") in bodies:
            bodies[rec["id"]].end = rec
        elif ev == "dcall":
            calls[rec["id"]] = Call(rec)
        elif ev == "ddone" and rec.get("id") in calls:
            calls[rec["id"]].done = rec
    return (sorted(bodies.values(), key=lambda b: b.t),
            sorted(calls.values(), key=lambda c: c.t))


def _durable_item(snap: Snapshot, item: dict[str, Any], blobs: Any) -> None:
    """One item after a run's step rows: a journal entry, a signal, a signal id taken
    or a parallel aggregate (custom run events are left out)."""
    rid, key = item["run_id"]["S"], item["step"]["S"]
    if key.startswith("~j#"):
        if "ref" in item:
            raw = blobs(item["ref"]["S"])
        else:
            raw = item["doc"]["S"]
        snap.journals.setdefault(rid, []).append(json.loads(raw))
    elif key.startswith("~s#"):
        name = key[3:].rsplit("#", 2)[0]
        doc = json.loads(item["doc"]["S"])
        snap.signals.setdefault(rid, []).append(Signal(
            name, str(doc.get("id")), doc.get("payload"), float(doc.get("at") or 0.0),
            item.get("taken_by", {}).get("S"), key))
    elif key.startswith("~i#"):
        name, _, sid = key[3:].rpartition("#")
        snap.signal_ids.setdefault(rid, set()).add((name, sid))
    elif key.startswith("~p#"):
        scope, _, pos = key[3:].rpartition("#")
        snap.parallels.setdefault(rid, {})[(scope, int(pos))] = {
            "total": int(item["total"]["N"]), "max": int(item["max"]["N"]),
            "done": sorted(int(x) for x in item.get("done", {}).get("NS", []))}


def read_faults(folder: Path) -> list[dict[str, Any]]:
    faults: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        faults.extend(read_jsonl(path))
    return sorted(faults, key=lambda f: float(f.get("t", 0.0)))


def collect(*, endpoint: str, prefix: str, api_url: str, ledger: Path, faults: Path,
            submitted: dict[str, tuple[str, str | None]], calm_at: float,
            drive: Path | None = None, deploy: Path | None = None) -> Snapshot:
    from orchestrator.adapters.aws import make_clients
    from orchestrator.settings import Settings

    settings = Settings(endpoint_url=endpoint, prefix=prefix)
    names = settings.names
    clients = make_clients(settings)
    snap = Snapshot(submitted=dict(submitted), calm_at=calm_at)
    for item in _scan(clients.dynamodb, names.runs_table):
        run = run_from_item(item)
        snap.runs[run.run_id] = run
        snap.item_sizes[f"runs/{run.run_id}"] = _item_total(item)
    def blob(key: str) -> str:
        return str(clients.s3.get_object(Bucket=names.blob_bucket, Key=key)["Body"].read()
                   .decode())

    for item in _scan(clients.dynamodb, names.steps_table):
        if item["step"]["S"].startswith("~"):
            _durable_item(snap, item, blob)
            snap.item_sizes[f"steps/{item['run_id']['S']}/{item['step']['S']}"] = _item_total(
                item)
            continue
        row = step_from_item(item)
        snap.steps.setdefault(row.run_id, {})[row.step] = row
        snap.item_sizes[f"steps/{row.run_id}/{row.step}"] = _item_total(item)
        if row.output_ref is not None:
            body = clients.s3.get_object(Bucket=names.blob_bucket, Key=row.output_ref)
            snap.outputs[(row.run_id, row.step)] = json.loads(body["Body"].read())
        elif row.has_output:
            snap.outputs[(row.run_id, row.step)] = row.output
    for item in _scan(clients.dynamodb, names.control_table):
        key = "/".join(str(item.get(k, {}).get("S", "")) for k in ("pk", "sk"))
        snap.item_sizes[f"control/{key}"] = _item_total(item)
        snap.control[key] = item
    dlq = clients.sqs.get_queue_url(QueueName=names.dead_letter_queue)["QueueUrl"]
    attrs = clients.sqs.get_queue_attributes(
        QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    snap.dlq = int(attrs.get("ApproximateNumberOfMessages", 0))
    with httpx.Client(base_url=api_url, timeout=30.0) as api:
        for run_id in snap.runs:
            snap.views[run_id] = _get(api, f"/runs/{run_id}")
            snap.events[run_id] = _get(api, f"/runs/{run_id}/events").get("events", [])
    for entries in snap.journals.values():
        entries.sort(key=lambda e: (str(e.get("scope", "")), int(e.get("pos", 0))))
    for sigs in snap.signals.values():
        sigs.sort(key=lambda s: s.sk)
    snap.calls = read_ledger(ledger)
    snap.bodies, calls = read_durable(ledger)
    snap.dcalls = [c for c in calls if c.recv.get("mode") != "check"]
    snap.checks = [c for c in calls if c.recv.get("mode") == "check"]
    snap.faults = read_faults(faults)
    snap.drive = list(read_jsonl(drive)) if drive is not None else []
    snap.deploy = list(read_jsonl(deploy)) if deploy is not None else []
    return snap
