"""The checks of flow control (workloads' `pooled` and `limited`), from a Snapshot: the
runs' history, the function server's ledger (the `/hold` calls: when each was in flight
at the function) and the control table's items of the limits. Each violation names its
check:

- `admitted-once`: no run's history has two `run.started` entries (a queued run is
  admitted by one conditional write, whoever races for it: an API, a worker's hand-off
  or a sweeper), and a run that waited for a concurrency limit (its first entry
  `run.queued`) and succeeded has exactly one;
- `limit-exceeded`: by the ledger, at no instant more than POOL_LIMIT `pooled` runs with
  a `/hold` call in flight (from `recv` to `done`), nor more than TENANT_LIMIT of one
  tenant; and no call of a `pooled` run arrived before its `run.started` entry. Runs
  are counted, not calls: a call sent again after its worker died belongs to the same
  run. A run counts from its admission to its end (`finished_at`): its slot is let go
  only after that, and a call still in flight past it is a stale attempt's (a worker
  resumed past its lease calls once more, at least once as the contract says: counted
  in the figures, not against the limit). And at no instant more than
  LIMITED_CONCURRENCY calls to backend `lim` in flight, every call counted, stale or
  not: each takes a slot. A call the function server's death cut off (no `done`) ends at
  that death (the next kill or restart-all of `fn` after it arrived);
- `slot-leaked`: once every run of the workflow has ended, no `lock#` item of `pooled`'s
  limits holds a run, no `queue#` item of them names an ended run; and every call left
  in `blimit#lim`'s holders is one whose worker died (its slot is taken back once its
  lease, the step's timeout plus the lease margin, has passed, by the next call that
  finds the backend full), with a lease no longer than that from the death.

That every run of both ends at all (`limit-progress`) is checker.py's `progress`."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from tests.chaos.ledger_server import HOLD_SECONDS
from tests.chaos.snapshot import Call, Snapshot
from tests.chaos.workloads import (
    LIMITED_BACKEND,
    LIMITED_CONCURRENCY,
    POOL_LIMIT,
    TENANT_LIMIT,
)

__all__ = ["FlowChecks"]

Bad = Callable[..., None]
POOLED = "pooled"
# The group of a workflow's own limits (engine/admission.py: no `group:` given).
POOL_GROUP = f"workflow:{POOLED}"
# Fault records that end a process (the harness's kill, an aimed crash).
DEATHS = ("sigkill", "self-kill")
# A worker's id (worker.py: host, pid, nonce) and the claim's number, at the holder's end.
_OWNER = re.compile(r":(\d+):[0-9a-f]+(?:#\d+)?$")


class FlowChecks:
    def __init__(self, snap: Snapshot, bad: Bad, findings: Counter[str], tol: float,
                 lease: float = 5.0) -> None:
        self.snap = snap
        self.bad = bad
        self.findings = findings
        self.tol = tol
        self.lease = lease  # a backend slot's lease: the step's timeout + the lease margin
        self.peaks: dict[str, Any] = {}

    def all(self) -> None:
        self.admitted_once()
        self.pool()
        self.backend()
        self.slots()

    def _runs(self, workflow: str) -> list[RunRecord]:
        return [r for r in self.snap.runs.values() if r.workflow == workflow]

    # ---- admitted-once -------------------------------------------------------------------

    def admitted_once(self) -> None:
        for run in self.snap.runs.values():
            types = [e.get("type") for e in run.history]
            started = [e for e in run.history if e.get("type") == "run.started"]
            if len(started) > 1:
                self.bad("admitted-once", f"admitted {len(started)} times, at "
                         f"{[e.get('at') for e in started]}", run.run_id,
                         at=started[1].get("at"))
            elif (types[:1] == ["run.queued"] and run.status is RunStatus.SUCCESS
                  and not started):
                self.bad("admitted-once", "succeeded after waiting for its limits, with no "
                         "run.started entry", run.run_id)

    # ---- limit-exceeded ------------------------------------------------------------------

    def _deaths(self, proc: str) -> list[float]:
        """When processes named `proc` (`fn`, `worker-1`...) were killed."""
        out = []
        for f in self.snap.faults:
            everyone = f.get("kind") == "restart-all" and proc in (f.get("procs") or ())
            if everyone or (f.get("kind") in DEATHS
                            and str(f.get("proc", "")).split("#")[0] == proc):
                out.append(float(f["t"]))
        return sorted(out)

    def _span(self, call: Call, fn_deaths: list[float]) -> tuple[float, float]:
        """When a call was in flight at the function: `recv` to `done`, or, cut off by
        the server's death, to that death."""
        if call.done is not None:
            return call.t, float(call.done["t"])
        cut = next((t for t in fn_deaths if t >= call.t), None)
        if cut is None:
            self.findings["/hold call never answered, no death of fn after it"] += 1
            return call.t, call.t + HOLD_SECONDS
        return call.t, min(cut, call.t + HOLD_SECONDS + 1.0)

    def _holds(self, runs: dict[str, RunRecord]) -> list[tuple[Call, RunRecord]]:
        return [(c, runs[str(c.recv.get("run"))]) for c in self.snap.calls
                if c.recv.get("route") == "/hold" and str(c.recv.get("run")) in runs]

    def pool(self) -> None:
        runs = {r.run_id: r for r in self._runs(POOLED)}
        fn_deaths = self._deaths("fn")
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        stale = 0
        for call, run in self._holds(runs):
            lo, hi = self._span(call, fn_deaths)
            started = next((float(e["at"]) for e in run.history
                            if e.get("type") == "run.started"), None)
            if started is None or lo < started - self.tol:
                self.bad("limit-exceeded", f"call of {call.recv.get('step')} arrived at "
                         f"{lo:.3f}, before the run was admitted ({started})", run.run_id,
                         call.recv.get("step"), at=lo)
                continue
            if run.finished_at is not None and hi > run.finished_at + self.tol:
                stale += 1
                hi = run.finished_at
            if hi > lo:
                spans[run.run_id].append((lo, hi))
        self.peaks["pooled_stale_calls"] = stale
        tenant = {rid: str((r.input or {}).get("tenant")) for rid, r in runs.items()}
        merged = {rid: _merge(s) for rid, s in spans.items()}
        self.peaks["pooled_peak"] = self._over(
            merged, POOL_LIMIT, "runs of pooled with a call in flight")
        by_tenant: dict[str, int] = {}
        for t in sorted(set(tenant.values())):
            mine = {rid: s for rid, s in merged.items() if tenant[rid] == t}
            by_tenant[t] = self._over(mine, TENANT_LIMIT,
                                      f"runs of pooled of tenant {t} with a call in flight")
        self.peaks["pooled_peak_by_tenant"] = by_tenant

    def _over(self, spans: dict[str, list[tuple[float, float]]], limit: int,
              what: str) -> int:
        """The peak of `spans` (by owner, each an owner's disjoint spans) in flight at
        once, each shrunk by the tolerance; a violation at each instant one starts over
        `limit`. The peak."""
        events = []
        for owner, each in spans.items():
            for lo, hi in each:
                if hi - lo > 2 * self.tol:
                    events.append((lo + self.tol, 1, owner))
                    events.append((hi - self.tol, 0, owner))
        events.sort()
        live: set[str] = set()
        peak = 0
        for t, starts, owner in events:
            if not starts:
                live.discard(owner)
                continue
            live.add(owner)
            peak = max(peak, len(live))
            if len(live) > limit:
                self.bad("limit-exceeded", f"{len(live)} {what} at {t:.3f} (limit {limit}):"
                         f" {sorted(live)}", owner.split("/")[0], at=t)
        return peak

    def backend(self) -> None:
        runs = {r.run_id: r for r in self.snap.runs.values()
                if any(s.backend == LIMITED_BACKEND for s in r.definition.steps)}
        fn_deaths = self._deaths("fn")
        spans: dict[str, list[tuple[float, float]]] = {}
        for call, run in self._holds(runs):
            spec = next((s for s in run.definition.steps if s.name == call.recv.get("step")),
                        None)
            if spec is None or spec.backend != LIMITED_BACKEND:
                continue
            lo, hi = self._span(call, fn_deaths)
            # Each call its own owner: calls are counted, not runs.
            spans[f"{run.run_id}/{call.recv.get('step')}/{call.recv.get('id')}"] = [(lo, hi)]
        self.peaks["lim_calls"] = len(spans)
        self.peaks["lim_peak"] = self._over(spans, LIMITED_CONCURRENCY,
                                            f"calls to backend {LIMITED_BACKEND} in flight")

    # ---- slot-leaked ---------------------------------------------------------------------

    def slots(self) -> None:
        pooled = self._runs(POOLED)
        ended = {r.run_id for r in self.snap.runs.values() if r.status.terminal}
        if pooled and all(r.status.terminal for r in pooled):
            for key, item in self.snap.control.items():
                if key.startswith(f"lock#{POOL_GROUP}#"):
                    held = sorted(item.get("holders", {}).get("SS", []))
                    held += [item["holder"]["S"]] if "holder" in item else []
                    if held:
                        self.bad("slot-leaked", f"every pooled run ended, {key} still holds "
                                 f"{held}", held[0])
                elif key.startswith("queue#") and f"#{POOL_GROUP}#" in key:
                    rid = item.get("run_id", {}).get("S")
                    if rid in ended:
                        self.bad("slot-leaked", f"{key} still queues {rid}, which ended "
                                 f"{self.snap.runs[rid].status.value}", rid)
        self.peaks["pooled_turns_left"] = sum(
            1 for k in self.snap.control if k.startswith(f"turns#{POOL_GROUP}#"))
        limited = [r for r in self.snap.runs.values()
                   if any(s.backend == LIMITED_BACKEND for s in r.definition.steps)]
        if not limited or not all(r.status.terminal for r in limited):
            return
        item = self.snap.control.get(f"blimit#{LIMITED_BACKEND}/-") or {}
        left = {h: float(v.get("N", 0)) for h, v in item.get("holders", {}).get("M", {}).items()}
        self.peaks["lim_slots_left"] = len(left)
        deaths = self._pid_deaths()
        for holder, until in sorted(left.items()):
            pid = _pid(holder)
            died = [t for t in deaths.get(pid or -1, []) if t <= until + self.tol]
            if not died:
                self.bad("slot-leaked", f"every run calling {LIMITED_BACKEND} ended, its slot "
                         f"{holder} (lease until {until:.3f}) is still held, its worker "
                         "never died", holder.split("/")[0])
            elif until > died[-1] + self.lease + self.tol:
                self.bad("slot-leaked", f"slot {holder}'s lease ends {until - died[-1]:.1f}s "
                         f"after its worker died (lease {self.lease:g}s)", holder.split("/")[0])

    def _pid_deaths(self) -> dict[int, list[float]]:
        out: dict[int, list[float]] = defaultdict(list)
        for f in self.snap.faults:
            if f.get("kind") in DEATHS and f.get("pid") is not None:
                out[int(f["pid"])].append(float(f["t"]))
            elif f.get("kind") == "restart-all":
                for pid in (f.get("pids") or {}).values():
                    if pid is not None:
                        out[int(pid)].append(float(f["t"]))
        return out

    def figures(self) -> dict[str, Any]:
        out = dict(self.peaks)
        runs = self._runs(POOLED)
        out["pooled_runs"] = dict(Counter(r.status.value for r in runs))
        out["pooled_queued_first"] = sum(
            1 for r in runs if r.history and r.history[0].get("type") == "run.queued")
        return out


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping spans of one owner as one."""
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _pid(holder: str) -> int | None:
    """The worker's pid in a slot's holder: `<run>/<step>[item]#<lease owner>`, the
    lease owner a worker's id and its claim's number (`<host>:<pid>:<nonce>#<n>`)."""
    found = _OWNER.search(holder)
    return int(found.group(1)) if found else None

