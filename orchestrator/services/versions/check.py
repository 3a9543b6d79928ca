"""Every open durable run checked against code: its journal replayed in check mode at
that code's endpoint (nothing runs, nothing is written), each run compatible or
diverging at its first position, the operation recorded beside the one issued.

A run waiting at its frontier (a sleep, a signal, an event, ...) is also checked there:
the new code must issue the same operation where the run waits, or its wait's outcome
would meet another operation when it lands."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from functions.sdk.durable.call import op_id
from functions.sdk.durable.golden import check_body
from functions.sdk.protocol import DURABLE_PREFIX, WaitKind
from orchestrator.adapters.invoker import Call, Invoker
from orchestrator.adapters.store import Store
from orchestrator.engine.attempts import OutcomeKind
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.strict_json import dumps

__all__ = ["CHECK_TIMEOUT", "Checker", "Target", "Verdict", "driver_backend", "open_durable",
           "open_scripts"]

CHECK_TIMEOUT = 30.0
# The waits a driver registers at its frontier, which the new code must issue again there.
_FRONTIER = {WaitKind.SLEEP, WaitKind.SIGNAL, WaitKind.EVENT, WaitKind.HOOK, WaitKind.CALL,
             WaitKind.SPAWN, WaitKind.APPROVAL, WaitKind.STATE, WaitKind.LOCK}


@dataclass(frozen=True)
class Target:
    """The code to check against: a functions app's base URL (a version's, or one not
    deployed yet) and the secret its calls are signed with; `version` names it."""

    url: str
    secret: str | None
    version: str | None = None
    # A script's new text ({sha256, url}: stored, fetched by the host by hash): script
    # runs are checked against it, at the script host `url`.
    script: dict[str, str] | None = None


@dataclass(frozen=True)
class Verdict:
    """One run's check: `compatible`, `diverging` (at `position`: the operation
    `recorded` there, the one `issued`), or `unchecked` (the endpoint failed: `message`)."""

    run_id: str
    workflow: str
    version: str | None
    status: str
    entries: int = 0
    position: dict[str, Any] | None = None
    recorded: dict[str, Any] | None = None
    issued: dict[str, Any] | None = None
    message: str | None = None
    # The driver row as read before the journal: its last claim (None: never claimed),
    # and whether a worker held it or it waited on a parallel (the run was advancing:
    # a move waits for it).
    claimed_at: float | None = None
    held: bool = False
    # Why the run is paused, if it is (`version_gone`: its version was retired under it).
    paused: str | None = None

    @property
    def compatible(self) -> bool:
        return self.status == "compatible"

    def doc(self) -> dict[str, Any]:
        out = {"run_id": self.run_id, "workflow": self.workflow, "version": self.version,
               "status": self.status, "entries": self.entries}
        for key in ("position", "recorded", "issued", "message"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


def driver_backend(run: RunRecord) -> str | None:
    """The backend a durable Python run is called at (None: a DAG run or a script)."""
    definition = run.definition
    if definition.durable is None or getattr(definition, "script", None):
        return None
    return definition.steps[0].backend if definition.steps else None


def open_scripts(store: Store, now: float, workflow: str, *, batch: int = 100
                 ) -> Iterator[RunRecord]:
    """The open runs of script workflow `workflow` (each on the text it started on)."""
    ids = store.runs.active_run_ids()
    for i in range(0, len(ids), batch):
        for run in store.runs.get_runs(ids[i:i + batch], now).values():
            if (run.definition.script and run.workflow == workflow
                    and run.status in (RunStatus.RUNNING, RunStatus.QUEUED)):
                yield run


def open_durable(store: Store, now: float, *, backend: str | None = None,
                 workflow: str | None = None, version: str | None = None,
                 batch: int = 100) -> Iterator[RunRecord]:
    """The open durable Python runs (running, waiting, paused, queued), read from the
    `active` index and then by key (strongly consistent), filtered."""
    ids = store.runs.active_run_ids()
    for i in range(0, len(ids), batch):
        for run in store.runs.get_runs(ids[i:i + batch], now).values():
            at = driver_backend(run)
            if (at is None or run.status not in (RunStatus.RUNNING, RunStatus.QUEUED)
                    or (backend is not None and at != backend)
                    or (workflow is not None and run.workflow != workflow)
                    or (version is not None and run.version != version)):
                continue
            yield run


class Checker:
    def __init__(self, store: Store, invoker: Invoker, clock: Callable[[], float], *,
                 threads: int = 16) -> None:
        self.store = store
        self.invoker = invoker
        self.clock = clock
        self.threads = threads

    def check_all(self, runs: Iterable[RunRecord], target: Target) -> list[Verdict]:
        """Each run checked against `target`, `threads` at once, in the order given."""
        with ThreadPoolExecutor(self.threads, thread_name_prefix="check") as pool:
            return list(pool.map(lambda run: self.check(run, target), runs))

    def check(self, run: RunRecord, target: Target) -> Verdict:
        """One run replayed against `target`, running nothing."""
        served = run.definition.durable or run.workflow
        # The driver first: a move is guarded by it, so the journal read after it is
        # the one the new version would replay (or the move fails).
        driver = self.store.drivers.get_driver(run.run_id)
        journal = self.store.journal.read_journal(run.run_id, self.clock())
        base: dict[str, Any] = {
            "run_id": run.run_id, "workflow": run.workflow, "version": run.version,
            "entries": len(journal),
            "paused": str((run.paused or {}).get("code")) if run.paused else None,
            "claimed_at": driver.attempt_started if driver is not None else None,
            # A run waiting on a parallel advances through its branches' own rows,
            # which a move's guard does not cover: it moves once the parallel is over.
            "held": driver is not None and (driver.lease_owner is not None or (
                driver.waiting or {}).get("kind") == WaitKind.PARALLEL)}
        trigger = run.trigger
        golden = {"run_id": run.run_id, "workflow": served, "input": run.input,
                  "started_at": run.started_at or run.created_at, "journal": journal,
                  "subject": trigger.detail.get("key") if trigger is not None
                  and trigger.source == "event" else None}
        if target.script is not None:
            golden["journal"] = _on_text(journal, target.script["sha256"])
        body = check_body(golden)
        if target.script is not None:
            body["script"] = {"name": served, **target.script}
        raw = dumps(body).encode()
        result = self.invoker.invoke(Call(
            url=target.url.rstrip("/") + DURABLE_PREFIX + served, secret=target.secret,
            run_id=run.run_id, workflow=run.workflow, step="$check", attempt=1,
            timeout=CHECK_TIMEOUT, input=None, steps=None, payload={}, raw_body=raw))
        if result.outcome.kind is not OutcomeKind.SUCCESS:
            return Verdict(status="unchecked", message=_why(result.outcome.error), **base)
        try:
            ops = list(json.loads(result.raw).get("ops") or ())
        except (ValueError, AttributeError):
            return Verdict(status="unchecked", **base,
                           message=f"{target.url} answered something that is not a check's"
                                   " answer (is it a functions app?)")
        for op in ops:
            if op.get("op") == "mismatch":
                issued = op.get("issued") or {}
                return Verdict(status="diverging", position=_place(issued),
                               recorded=op.get("recorded") or {}, issued=issued,
                               message=op.get("message"), **base)
        failed = next((op for op in ops if op.get("op") == "fail"), None)
        if failed is not None:
            return Verdict(status="diverging", message="the replay failed: "
                           + str((failed.get("error") or {}).get("message")), **base)
        return _at_frontier(driver.waiting if driver is not None else None, ops, base)


def _at_frontier(waiting: dict[str, Any] | None, ops: list[dict[str, Any]],
                 base: dict[str, Any]) -> Verdict:
    """Compatible unless the run waits at its top's frontier for an operation the
    new code does not issue there."""
    if not waiting or WaitKind(waiting.get("kind", "next")) not in _FRONTIER \
            or waiting.get("scope", ""):
        return Verdict(status="compatible", **base)
    pos = int(waiting.get("pos", 0))
    there = next((op for op in ops if op.get("scope", "") == ""
                  and op.get("pos") == pos and op.get("id")), None)
    if there is None or there.get("id") == waiting.get("id"):
        return Verdict(status="compatible", **base)
    recorded = {"kind": waiting.get("kind"), "name": waiting.get("name"),
                "id": waiting.get("id"), "pos": pos, "scope": ""}
    issued = {k: there.get(k) for k in ("kind", "name", "id", "pos", "scope")}
    if not issued.get("kind"):
        issued["kind"] = there.get("op")
    return Verdict(status="diverging", position=_place(issued), recorded=recorded,
                   issued=issued, message=(
                       f"the run waits for {recorded['kind']} {recorded['name']!r} at"
                       f" position {pos}, where the new code issues"
                       f" {issued['kind']} {issued.get('name')!r}"), **base)


def _on_text(journal: list[dict[str, Any]], sha256: str) -> list[dict[str, Any]]:
    """A script run's journal as if it had started on the text of hash `sha256`: its
    first entry, the text's hash (a changed text is a mismatch there by design: a run
    runs the text it started on), names the new one, so that the check compares the
    operations the two texts issue."""
    return [{**e, "name": sha256, "id": op_id("", sha256, 0)}
            if e.get("kind") == "script" and not e.get("scope") and e.get("pos") == 0
            else e for e in journal]


def _place(doc: dict[str, Any]) -> dict[str, Any]:
    return {"scope": doc.get("scope", ""), "pos": doc.get("pos")}


def _why(error: dict[str, Any] | None) -> str:
    if not error:
        return "the check call failed"
    return str(error.get("message") or error.get("code") or error)
