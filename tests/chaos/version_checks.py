"""The checks of the deploy in the middle of the faults (deploy.py), from a Snapshot: the
runs' rows (their `version` and `run.migrated` entries), the journals, the step bodies'
executions (each names the version whose code ran it) and the deploy's answers. Each
violation names its check:

- `version-missing`: every durable run records the version it started on (the harness
  registers its backend's versions before the first start);
- `version-chain`: a run's `run.migrated` entries chain from the version it started on
  to the one its row names (each `from` the previous `to`), and it moved only to a
  version the deploy promoted, after that promotion was sent;
- `version-start`: a run started on a version that was current then: none on a
  version before it was promoted, none on a version CURRENT_TTL (a process's cache of
  the current version) after the next one was promoted;
- `version-body`, `version-incompatible`: every execution of a step body ran on the
  version the run was pinned to at that instant (its start's, or the last migration's
  before it), or on the one it had just left, within STALE of the move (a call sent
  before it); never on a version it was not pinned to, least of all the incompatible
  one (`version-incompatible`: a run may execute its code only if it started there or
  a check let it move there);
- `version-shape`: the journal of a run of an AUDITED workflow has the step `audit` at
  place 1 exactly when it ended on the incompatible version (a run moved there while
  it waited at place 1 for something else would not);
- `version-moved-diverging`: a run moved to the incompatible version while its journal
  already held place 1 (by the entry's start): its check should have found it
  diverging;
- `version-refused`: a promotion answered `promoted: false` moved no run and left
  the current version as it was; `deploy`: each promotion the deploy needed was
  answered `promoted` in the end (else the seed proved nothing about moves)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from orchestrator.engine.records import RunRecord
from orchestrator.services.versions.registry import CURRENT_TTL
from tests.chaos.deploy import COMPATIBLE
from tests.chaos.durable_app import AUDITED, INCOMPATIBLE
from tests.chaos.snapshot import Body, Snapshot
from tests.chaos.workloads import DURABLE_BACKEND, FIRST_VERSION

__all__ = ["STALE", "VersionChecks", "pins_of"]

# How long after a move a body may still run on the version the run left: a call sent
# before the move whose request the function server took up late (past the caller's
# timeout). A move needs the driver not held, so no call is in flight by the rows.
STALE = 4.0
# How long past CURRENT_TTL a start may still pin the version a promotion replaced: the
# API reads the current version, then writes the run (a loaded machine stalls between).
START_SLACK = 1.0

Bad = Callable[..., None]


def pins_of(run: RunRecord) -> list[tuple[float, str | None]]:
    """The versions a run was pinned to, from when: its start's (the first move's
    `from`, or its row's if it never moved), then each move's `to`."""
    moves = [e for e in run.history if e.get("type") == "run.migrated"]
    first = moves[0].get("from") if moves else run.version
    pins: list[tuple[float, str | None]] = [(run.created_at, first)]
    pins += [(float(e.get("at") or 0.0), e.get("to")) for e in moves]
    return pins


def _pinned_at(pins: list[tuple[float, str | None]], t: float) -> int:
    """The index of the pin in force at `t`."""
    i = 0
    for k, (since, _) in enumerate(pins):
        if since <= t:
            i = k
    return i


class VersionChecks:
    def __init__(self, snap: Snapshot, bad: Bad, findings: Counter[str], tol: float) -> None:
        self.snap = snap
        self.bad = bad
        self.findings = findings
        self.tol = tol
        self.bodies: dict[str, list[Body]] = defaultdict(list)
        for b in snap.bodies:
            self.bodies[b.run].append(b)
        # Each version's promotions: the first send, the first answer `promoted`.
        self.sent: dict[str, float] = {}
        self.promoted: dict[str, float] = {}
        for d in sorted(snap.deploy, key=lambda d: float(d.get("t") or 0.0)):
            v = str(d.get("version"))
            self.sent.setdefault(v, float(d["t"]))
            if d.get("promoted") and d.get("answered") is not None:
                self.promoted.setdefault(v, float(d["answered"]))
        self.stale_bodies = 0

    def applies(self, run: RunRecord) -> bool:
        return run.definition.durable is not None and bool(
            self.snap.deploy or run.version is not None) and bool(run.definition.steps) \
            and run.definition.steps[0].backend == DURABLE_BACKEND

    # ---- one run ----------------------------------------------------------------------

    def run(self, run: RunRecord) -> None:
        if not self.applies(run):
            return
        rid = run.run_id
        pins = pins_of(run)
        if self.snap.deploy and any(v is None for _, v in pins):
            self.bad("version-missing", "the run records no version of its code", rid)
            return
        self.chain(run, pins)
        self.start(run, pins[0][1])
        versions = {v for _, v in pins}
        for b in self.bodies.get(rid, []):
            self.body(run, pins, versions, b)
        self.shape(run, pins)

    def chain(self, run: RunRecord, pins: list[tuple[float, str | None]]) -> None:
        rid = run.run_id
        moves = [e for e in run.history if e.get("type") == "run.migrated"]
        for (_, was), (at, to), e in zip(pins[:-1], pins[1:], moves, strict=True):
            if e.get("from") != was:
                self.bad("version-chain", f"moved from {e.get('from')!r} while pinned to "
                         f"{was!r}", rid, at=at)
            if self.snap.deploy and (to not in self.sent or at < self.sent[to] - self.tol):
                self.bad("version-chain", f"moved to {to!r}, which no promotion had asked "
                         "for yet", rid, at=at)
        if pins[-1][1] != run.version:
            self.bad("version-chain", f"its moves end at {pins[-1][1]!r}, its row says "
                     f"{run.version!r}", rid)

    def start(self, run: RunRecord, first: str | None) -> None:
        """The version a run started on was current around its start."""
        if not self.snap.deploy or first is None:
            return
        order = [FIRST_VERSION] + [v for v in self.sent if v != FIRST_VERSION]
        if first not in order:
            self.bad("version-start", f"started on {first!r}, a version never current",
                     run.run_id)
            return
        i = order.index(first)
        c = run.created_at
        since = 0.0 if i == 0 else self.sent[first]
        later = [self.promoted[v] for v in order[i + 1:] if v in self.promoted]
        until = min(later, default=float("inf")) + CURRENT_TTL + START_SLACK
        if c < since - self.tol:
            self.bad("version-start", f"started on {first!r} {since - c:.3f}s before its "
                     "promotion was sent", run.run_id, at=c)
        elif c > until:
            self.bad("version-start", f"started on {first!r} {c - until + CURRENT_TTL:.3f}s "
                     "after a later version was promoted", run.run_id, at=c)

    def body(self, run: RunRecord, pins: list[tuple[float, str | None]],
             versions: set[str | None], b: Body) -> None:
        rid, ver, t = run.run_id, b.start.get("ver"), b.t
        where = f"step {b.start.get('step')!r} attempt {b.attempt}"
        if ver not in versions:
            check = "version-incompatible" if ver == INCOMPATIBLE else "version-body"
            self.bad(check, f"{where} ran on {ver!r}, a version the run was never pinned "
                     f"to (its versions: {[v for _, v in pins]})", rid,
                     str(b.start.get("step")), t)
            return
        i = _pinned_at(pins, t + self.tol)
        if pins[i][1] == ver:
            return
        if i > 0 and pins[i - 1][1] == ver and t < pins[i][0] + STALE:
            self.stale_bodies += 1
            self.findings["step body ran on the version its run had just left"] += 1
            return
        self.bad("version-body", f"{where} ran on {ver!r} at {t:.3f} while the run was "
                 f"pinned to {pins[i][1]!r} (since {pins[i][0]:.3f})", rid,
                 str(b.start.get("step")), t)

    def shape(self, run: RunRecord, pins: list[tuple[float, str | None]]) -> None:
        if run.workflow not in AUDITED:
            return
        rid = run.run_id
        journal = [e for e in self.snap.journals.get(rid, []) if str(e.get("scope", "")) == ""]
        second = next((e for e in journal if int(e["pos"]) == 1), None)
        ended_there = pins[-1][1] == INCOMPATIBLE
        audited = second is not None and second.get("name") == "audit"
        if second is not None and audited != ended_there:
            self.bad("version-shape", f"place 1 holds {second.get('kind')} "
                     f"{second.get('name')!r}, and the run ended on {pins[-1][1]!r}", rid)
        for at, to in pins[1:]:
            if to == INCOMPATIBLE and second is not None and not audited \
                    and float(second.get("started") or 0.0) < at - self.tol:
                self.bad("version-moved-diverging", f"moved to {to!r} at {at:.3f} though "
                         f"place 1 ({second.get('kind')} {second.get('name')!r}) began at "
                         f"{float(second.get('started') or 0.0):.3f}", rid, at=at)

    # ---- the deploy -------------------------------------------------------------------

    def deploy(self) -> None:
        if not self.snap.deploy:
            return
        for version in (COMPATIBLE, INCOMPATIBLE):
            if version not in self.promoted:
                self.bad("deploy", f"{version} was never answered promoted "
                         f"({sum(d.get('version') == version for d in self.snap.deploy)} "
                         "tries)")
        moves = [(float(e.get("at") or 0.0), e.get("to"), run.run_id)
                 for run in self.snap.runs.values() for e in run.history
                 if e.get("type") == "run.migrated"]
        for d in self.snap.deploy:
            if d.get("promoted") is not False or d.get("answered") is None:
                continue
            v, sent, answered = d.get("version"), float(d["t"]), float(d["answered"])
            if d.get("moved"):
                self.bad("version-refused", f"{v} not promoted, and yet runs {d['moved']} "
                         "moved")
            if d.get("current") == v:
                self.bad("version-refused", f"{v} not promoted, and yet answered current")
            # No other promotion of v runs meanwhile (the deploy sends one at a time).
            moved = [rid for at, to, rid in moves if to == v and sent <= at <= answered]
            if moved:
                self.bad("version-refused", f"{v} not promoted, and yet runs {moved} moved "
                         "to it while it was refused", moved[0])

    def figures(self) -> dict[str, Any]:
        runs = [r for r in self.snap.runs.values() if self.applies(r)]
        moved: Counter[str] = Counter()
        for r in runs:
            for e in r.history:
                if e.get("type") == "run.migrated":
                    moved[f"{e.get('from')}->{e.get('to')}"] += 1
        return {
            "started_on": dict(Counter(str(pins_of(r)[0][1]) for r in runs)),
            "ended_on": dict(Counter(str(r.version) for r in runs)),
            "moves": dict(moved),
            "bodies_by_version": dict(Counter(str(b.start.get("ver")) for b in self.snap.bodies)),
            "bodies_on_a_version_just_left": self.stale_bodies,
            "check_calls": len(self.snap.checks),
            "promotions_unanswered": sum(d.get("answered") is None for d in self.snap.deploy),
            "promotions": [{k: d.get(k) for k in ("version", "pin", "status", "promoted")}
                           | {"moved": len(d.get("moved") or ()),
                              "pinned": len(d.get("pinned") or ()),
                              "diverging": len(d.get("diverging") or ()),
                              "busy": len(d.get("busy") or ()),
                              "seconds": None if d.get("answered") is None
                              else round(float(d["answered"]) - float(d["t"]), 1)}
                           for d in self.snap.deploy if d.get("answered") is not None],
        }
