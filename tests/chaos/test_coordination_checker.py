"""The coordination checks find what they promise (each planted violation is reported,
and a sound snapshot reports nothing): two claim winners, two lock holders at once, a
lock left held, two answers accepted for one gate, an answer accepted after a timeout."""

from __future__ import annotations

from typing import Any

from orchestrator.engine.definition import Definition, StepSpec
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from tests.chaos.coordination_checks import CoordinationChecks
from tests.chaos.snapshot import Snapshot


def run(rid: str, workflow: str, status: RunStatus = RunStatus.SUCCESS) -> RunRecord:
    spec = StepSpec("$run", "fn", f"/durable/{workflow}")
    return RunRecord(rid, workflow, status, {}, Definition((spec,), durable=workflow), 0.0, 1, 0)


def found(snap: Snapshot) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    CoordinationChecks(snap, lambda check, msg, *a, **k: out.append((check, msg)), 0.01).all()
    return out


def claims(winners: list[bool], claimer: str) -> Snapshot:
    snap = Snapshot()
    for i, won in enumerate(winners):
        snap.runs[f"c{i}"] = run(f"c{i}", "dclaim")
        snap.outputs[(f"c{i}", "$run")] = {"won": won}
    snap.control["state#chaos/claim-1"] = {"claimer": {"S": f"{claimer}/op"}}
    return snap


def test_one_claim_winner_and_the_cell_naming_it() -> None:
    assert found(claims([True, False, False], "c0")) == []
    assert [c for c, _ in found(claims([True, True, False], "c0"))] == ["claim-winners"]
    assert "the cell names ['c1']" in found(claims([True, False], "c1"))[0][1]


def locks(spans: list[tuple[float, float]], held: bool = False) -> Snapshot:
    snap = Snapshot()
    for i, (took, gave) in enumerate(spans):
        rid = f"l{i}"
        snap.runs[rid] = run(rid, "dlock")
        snap.journals[rid] = [{"kind": "lock", "pos": 1, "ended": took},
                              {"kind": "step", "name": "inside", "pos": 2, "started": took,
                               "ended": gave},
                              {"kind": "lock", "pos": 3, "started": gave + 5.0}]
    if held:
        snap.control["mutex#chaos-1/-"] = {}
    return snap


def test_no_two_lock_holders_and_none_left() -> None:
    assert found(locks([(1.0, 2.0), (2.05, 3.0), (3.1, 4.0)])) == []
    overlap = found(locks([(1.0, 2.0), (1.5, 3.0)]))
    assert [c for c, _ in overlap] == ["lock-holders"] and "while l0 held it" in overlap[0][1]
    assert "still held" in found(locks([(1.0, 2.0)], held=True))[0][1]


def gate(value: dict[str, Any], status: str, answers: list[tuple[str, int, str]]) -> Snapshot:
    snap = Snapshot()
    snap.runs["g"] = run("g", "dgate")
    snap.journals["g"] = [{"kind": "approval", "pos": 0, "value": value}]
    snap.control["approval#g/gate"] = {"gate": {"S": status},
                                       "answer": {"S": f'{{"by": "{value.get("by")}"}}'}}
    snap.drive = [{"ev": "answer", "run": "g", "by": by, "status": code, "mode": mode}
                  for by, code, mode in answers]
    return snap


def test_one_outcome_per_gate() -> None:
    approved = {"approved": True, "timed_out": False, "by": "a"}
    assert found(gate(approved, "approved", [("a", 200, "race"), ("b", 409, "race")])) == []
    two = found(gate(approved, "approved", [("a", 200, "race"), ("b", 200, "race")]))
    assert "2 answers accepted" in two[0][1]
    wrong = found(gate(approved, "approved", [("b", 200, "race"), ("a", 409, "race")]))
    assert any("recorded as approved by a" in m for _, m in wrong)
    timed_out = {"approved": False, "timed_out": True, "by": None}
    assert found(gate(timed_out, "timed_out", [("late", 409, "late")])) == []
    late = found(gate(timed_out, "timed_out", [("late", 200, "late")]))
    assert {m for _, m in late} >= {"an answer sent after the timeout was accepted"}
