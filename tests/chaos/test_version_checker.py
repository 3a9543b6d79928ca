"""The checker's version checks (version_checks.py) on snapshots built by hand: a deploy
in the middle of durable runs that went right shows no violation, and each check
reports the violation it claims to catch (planted in an otherwise clean snapshot)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace
from typing import Any

from tests.chaos.deploy import COMPATIBLE
from tests.chaos.durable_app import CHAIN_SLEEP, CHAIN_STEPS, INCOMPATIBLE
from tests.chaos.durable_checks import expected_output
from tests.chaos.snapshot import Snapshot
from tests.chaos.test_durable_checker import T0, Build, clean, found
from tests.chaos.version_checks import STALE, pins_of
from tests.chaos.workloads import DURABLE_BACKEND, FIRST_VERSION

Pins = list[tuple[float, str]]


def versioned(snap: Snapshot, rid: str, pins: Pins) -> None:
    """Make run `rid` one of the versioned backend's, pinned as `pins` says (its start's
    version at its creation, then each move), its bodies run where the pins say."""
    run = snap.runs[rid]
    spec = replace(run.definition.steps[0], backend=DURABLE_BACKEND)
    moves = [{"at": at, "type": "run.migrated", "from": was, "to": to}
             for (_, was), (at, to) in itertools.pairwise(pins)]
    history = tuple(sorted([*run.history, *moves], key=lambda e: float(e["at"])))
    snap.runs[rid] = replace(run, definition=replace(run.definition, steps=(spec,)),
                             version=pins[-1][1], history=history)
    rows = [e for e in snap.events[rid] if e.get("step")]
    snap.events[rid] = list(heapq.merge([dict(e) for e in history], rows,
                                        key=lambda e: float(e["at"])))
    for b in snap.bodies:
        if b.run == rid:
            b.start["ver"] = [v for at, v in pins if at <= b.t][-1]


def promotion(version: str, sent: float, *, pin: bool = False, promoted: bool = True,
              moved: list[str] | None = None) -> dict[str, Any]:
    return {"ev": "promote", "version": version, "pin": pin, "t": sent, "try": 1,
            "answered": sent + 0.5, "status": 200, "promoted": promoted,
            "current": version if promoted else COMPATIBLE, "moved": moved or [],
            "busy": [], "pinned": [], "diverging": [] if promoted else ["x"],
            "unchecked": [], "error": None}


def audited_chain(snap: Snapshot, rid: str, created: float, first: float, *,
                  audited: bool) -> Build:
    """A dchain run created at `created`, its first step at `first`, with the
    incompatible version's step `audit` at place 1 (or without)."""
    b = Build(snap, "dchain", created)
    b.name, b.rid = f"dchain-{rid}", rid
    b.t = first
    for i in range(CHAIN_STEPS):
        if i == 1 and audited:
            b.step("audit")
        if i:
            b.wait("sleep", "sleep", lasts=CHAIN_SLEEP + 0.02)
        b.step(f"s{i}")
    b.step("flaky", attempts=2)
    b.finish(expected_output("dchain", b.at()))
    return b


def deployed() -> Snapshot:
    """clean()'s runs around a deploy: v2 promoted at T0+10.3 (the dsignals run, waiting
    then, moves to it), v3 refused at T0+30 and promoted with pin_incompatible at T0+31;
    the runs after start on the current version; a dchain run created on v2 moves to v3
    before its first step and runs v3's code (its step `audit` at place 1)."""
    snap = clean()
    snap.deploy = [promotion(COMPATIBLE, T0 + 10.3, moved=["dsignals-run"]),
                   promotion(INCOMPATIBLE, T0 + 30, promoted=False),
                   promotion(INCOMPATIBLE, T0 + 31, pin=True, moved=["early"])]
    audited_chain(snap, "early", T0 + 30.9, T0 + 31.2, audited=True)
    snap.bodies.sort(key=lambda b: b.t)
    versioned(snap, "dchain-run", [(T0, FIRST_VERSION)])
    versioned(snap, "dsignals-run", [(T0 + 10, FIRST_VERSION), (T0 + 10.31, COMPATIBLE)])
    versioned(snap, "dparallel-run", [(T0 + 20, COMPATIBLE)])
    versioned(snap, "early", [(T0 + 30.9, COMPATIBLE), (T0 + 31.1, INCOMPATIBLE)])
    versioned(snap, "devent-run", [(T0 + 40, INCOMPATIBLE)])
    versioned(snap, "dtimeout-run", [(T0 + 50, INCOMPATIBLE)])
    return snap


def body(snap: Snapshot, rid: str, step: str) -> Any:
    return next(b for b in snap.bodies if b.run == rid and b.start["step"] == step)


def test_a_deploy_that_went_right_has_no_violation() -> None:
    from tests.chaos.checker import check

    report = check(deployed(), bound=600)
    assert report.violations == [], [(v.check, v.message) for v in report.violations]
    figures = report.figures["versions"]
    assert figures["moves"] == {"v1->v2": 1, "v2->v3": 1}
    assert figures["started_on"] == {"v1": 2, "v2": 2, "v3": 2}
    assert figures["bodies_by_version"]["v3"] > 0


def test_a_body_run_on_the_incompatible_version_is_caught() -> None:
    snap = deployed()
    body(snap, "dsignals-run", "finish").start["ver"] = INCOMPATIBLE
    assert found(snap) == {"version-incompatible"}


def test_a_body_run_on_a_version_before_it_was_pinned_there_is_caught() -> None:
    snap = deployed()
    body(snap, "dsignals-run", "prepare").start["ver"] = COMPATIBLE  # before its move
    assert found(snap) == {"version-body"}


def test_a_body_run_on_the_version_left_long_after_the_move_is_caught() -> None:
    snap = deployed()
    late = body(snap, "dsignals-run", "finish")
    assert late.t < T0 + 10.31 + STALE
    late.start["ver"] = FIRST_VERSION  # just after the move: a call sent before it
    assert found(snap) == set()
    late.start["t"] = T0 + 10.31 + STALE + 0.5
    assert found(snap) == {"version-body"}


def test_a_move_that_does_not_chain_or_that_nobody_asked_for_is_caught() -> None:
    snap = deployed()
    # The row names a version its moves never reached.
    snap.runs["dsignals-run"] = replace(snap.runs["dsignals-run"], version=INCOMPATIBLE)
    assert found(snap) == {"version-chain"}
    snap = deployed()
    snap.deploy = [d for d in snap.deploy if d["version"] != INCOMPATIBLE]
    assert {"version-chain", "version-start", "deploy"} <= found(snap)


def test_a_run_started_on_a_version_no_longer_current_is_caught() -> None:
    snap = deployed()
    versioned(snap, "dparallel-run", [(T0 + 20, FIRST_VERSION)])
    assert found(snap) == {"version-start"}
    assert pins_of(snap.runs["dparallel-run"]) == [(T0 + 20, FIRST_VERSION)]


def test_a_run_moved_to_the_incompatible_version_past_its_first_step_is_caught() -> None:
    snap = deployed()
    # Created on v2, waiting in the sleep at place 1 when it was moved to v3.
    audited_chain(snap, "moved", T0 + 30.5, T0 + 30.6, audited=False)
    snap.bodies.sort(key=lambda b: b.t)
    sleep = next(e for e in snap.journals["moved"] if e["pos"] == 1)
    versioned(snap, "moved", [(T0 + 30.5, COMPATIBLE), (sleep["started"] + 0.1, INCOMPATIBLE)])
    assert found(snap) == {"version-moved-diverging", "version-shape"}


def test_a_refused_promotion_that_moved_runs_is_caught() -> None:
    snap = deployed()
    snap.deploy[1]["moved"] = ["devent-run"]
    assert found(snap) == {"version-refused"}


def test_a_run_that_records_no_version_is_caught() -> None:
    snap = deployed()
    snap.runs["devent-run"] = replace(snap.runs["devent-run"], version=None)
    assert found(snap) == {"version-missing"}
