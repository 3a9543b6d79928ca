"""Approval gates: reference 002's refund pipeline as the demo manifest declares it (ask →
escalate → ask-lead → refund | give-up), driven through all three outcomes of its table
on a fake clock (two days pass in milliseconds); the gate's rules (one answer, none
after the deadline, approvers); a rejection cancelling the run; and the inbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.durable import Context, step, workflow
from functions.examples import monthly_report
from functions.examples.flow import Flow
from infra.emulator import Emulator
from orchestrator.errors import Conflict, Forbidden, NotFound, UsageError
from orchestrator.testing import WorkflowEnv

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("ask", "escalate", "ask-lead", "refund", "give-up")
DAY = 86400.0


def demo_refund() -> dict[str, Any]:
    """The demo manifest's `refund` workflow, its steps on the environment's backend."""
    doc = yaml.safe_load((ROOT / "orchestrator.yml").read_text())
    wf: dict[str, Any] = doc["workflows"]["refund"]
    for spec in wf["steps"].values():
        if "backend" in spec:
            spec["backend"] = "app"
    return wf


@pytest.fixture
def env(emulator: Emulator, tmp_path: Path) -> Iterator[WorkflowEnv]:
    app = monthly_report.create_app(work_dir=tmp_path)
    with WorkflowEnv(app, emulator=emulator, dags={"refund": demo_refund(),
                                                    "gated": GATED}) as env:
        yield env


GATED = {"steps": {
    "ask": {"approval": {"prompt": "Ship it?", "timeout": "1h", "approvers": ["ada", "bob"]}},
    "ship": {"backend": "app", "route": "/refundOrder", "dependsOn": ["ask"]},
}}


def ran(env: WorkflowEnv, run_id: str) -> dict[str, str]:
    return {s["step"]: s["status"] for s in env.view(run_id)["steps"]}


def actions(tmp_path: Path, run_id: str) -> list[str]:
    return [e["action"] for e in Flow(tmp_path / "flow").refunds.entries(run=run_id)]


def test_approved_at_once_refunds(env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.advance(0)  # what can run now runs; the gate is open: nothing is held
    assert env.status(run_id) == "running"
    [gate] = env.rt.approvals.inbox()
    assert (gate["run_id"], gate["step"], gate["prompt"]) == (
        run_id, "ask", "Refund order 1042, EUR 480?")
    assert gate["deadline"] == pytest.approx(gate["created_at"] + 2 * DAY)
    answered = env.rt.approvals.answer(run_id, "ask", True, "fine", "ada")
    assert answered["status"] == "approved" and answered["by"] == "ada"
    env.run_until_idle()
    assert env.status(run_id) == "success"
    assert ran(env, run_id) == {"ask": "success", "escalate": "skipped",
                                "ask-lead": "skipped", "refund": "success",
                                "give-up": "skipped"}
    assert actions(tmp_path, run_id) == ["refund"]
    out = env.view(run_id)["steps"][0]["output"]
    assert out == {"approved": True, "timed_out": False, "by": "ada",
                   "at": answered["at"], "comment": "fine"}
    assert env.rt.approvals.inbox() == []


def test_the_first_times_out_and_the_lead_approves(env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.advance("2d")  # the first gate's deadline: it times out, the lead is asked
    assert [g["step"] for g in env.rt.approvals.inbox()] == ["ask-lead"]
    env.rt.approvals.answer(run_id, "ask-lead", True, None, "lead")
    env.run_until_idle()
    assert ran(env, run_id) == {"ask": "success", "escalate": "success",
                                "ask-lead": "success", "refund": "success",
                                "give-up": "skipped"}
    assert actions(tmp_path, run_id) == ["page-lead", "refund"]
    first = env.view(run_id)["steps"][0]["output"]
    assert first["timed_out"] is True and first["approved"] is False


def test_both_time_out_and_the_refund_is_left_open(env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.run_until_idle()  # three days pass at once: both gates time out
    assert env.status(run_id) == "success"
    assert ran(env, run_id) == {"ask": "success", "escalate": "success",
                                "ask-lead": "success", "refund": "skipped",
                                "give-up": "success"}
    assert actions(tmp_path, run_id) == ["page-lead", "close"]
    # An answer after the deadline is refused and changes nothing: the gate timed out
    # (approval_answered is for a gate someone answered).
    with pytest.raises(Conflict) as refused:
        env.rt.approvals.answer(run_id, "ask", True, None, "ada")
    assert refused.value.code == "approval_timed_out"
    assert env.rt.approvals.get(run_id, "ask")["status"] == "timed_out"


def test_a_second_answer_is_refused_and_changes_nothing(env: WorkflowEnv) -> None:
    run_id = env.start("gated")
    env.advance(0)
    env.rt.approvals.answer(run_id, "ask", True, "yes", "ada")
    with pytest.raises(Conflict) as second:
        env.rt.approvals.answer(run_id, "ask", False, "no", "bob")
    assert second.value.code == "approval_answered"
    gate = env.rt.approvals.get(run_id, "ask")
    assert (gate["status"], gate["by"], gate["comment"]) == ("approved", "ada", "yes")


def test_an_answer_at_the_deadline_is_refused_before_the_gate_times_out(
        env: WorkflowEnv) -> None:
    run_id = env.start("gated")
    env.advance(0)
    deadline = env.rt.approvals.get(run_id, "ask")["deadline"]
    env.clock.move_to(deadline)  # nothing has timed it out yet: the answer races it
    with pytest.raises(Conflict) as late:
        env.rt.approvals.answer(run_id, "ask", True, None, "ada")
    assert late.value.code == "approval_timed_out"
    assert env.rt.approvals.get(run_id, "ask")["status"] == "pending"
    env.run_until_idle()
    assert env.rt.approvals.get(run_id, "ask")["status"] == "timed_out"
    assert env.view(run_id)["steps"][0]["output"]["timed_out"] is True


def test_only_an_approver_may_answer_and_bad_answers_are_refused(env: WorkflowEnv) -> None:
    run_id = env.start("gated")
    env.advance(0)
    with pytest.raises(Forbidden, match="is for ada, bob; 'eve' is not among them"):
        env.rt.approvals.answer(run_id, "ask", True, None, "eve")
    with pytest.raises(UsageError, match="approved: true or false"):
        env.rt.approvals.answer(run_id, "ask", "yes", None, "ada")
    with pytest.raises(NotFound, match="has no approval 'nope'"):
        env.rt.approvals.answer(run_id, "nope", True, None, "ada")
    assert [g["step"] for g in env.rt.approvals.inbox(approver="bob")] == ["ask"]
    assert env.rt.approvals.inbox(approver="eve") == []
    assert env.rt.approvals.get(run_id, "ask")["status"] == "pending"


def test_a_rejection_cancels_the_run_with_who_and_why(env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("gated")
    env.advance(0)
    env.rt.approvals.answer(run_id, "ask", False, "not this week", "bob")
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "killed"
    assert view["error"]["reason"] == "approval ask rejected by bob: not this week"
    assert ran(env, run_id)["ship"] == "skipped"
    assert actions(tmp_path, run_id) == []


def test_a_cancelled_run_leaves_the_inbox(env: WorkflowEnv) -> None:
    run_id = env.start("gated")
    env.advance(0)
    env.rt.runs.cancel(run_id, "changed my mind")
    env.run_until_idle()
    assert env.status(run_id) == "killed"
    assert env.rt.approvals.inbox() == []
    with pytest.raises(Conflict) as finished:
        env.rt.approvals.answer(run_id, "ask", True, None, "ada")
    assert finished.value.code == "run_finished"


# ---- the same gate in a durable workflow ----------------------------------------------


@workflow("release")
async def release(ctx: Context, payload: Any) -> Any:
    built = await step("build", lambda: {"version": (payload or {}).get("version", "1.0")})
    answer = await ctx.approval("ship", prompt=f"Ship {built['version']}?", timeout="1d",
                                approvers=["ada"])
    if not answer["approved"]:
        return {"shipped": False, "timed_out": answer["timed_out"]}
    shipped = await step("ship", lambda: {"shipped": built["version"], "by": answer["by"]})
    return {"shipped": True, **shipped}


@pytest.fixture
def denv(emulator: Emulator) -> Iterator[WorkflowEnv]:
    with WorkflowEnv(workflows=[release], emulator=emulator) as env:
        yield env


def test_ctx_approval_approved_goes_on_with_who_answered(denv: WorkflowEnv) -> None:
    run_id = denv.start("release", {"version": "2.1"})
    denv.advance(0)
    [gate] = denv.rt.approvals.inbox()
    assert (gate["step"], gate["prompt"], gate["approvers"]) == ("ship", "Ship 2.1?", ["ada"])
    assert denv.status(run_id) == "running"
    denv.rt.approvals.answer(run_id, "ship", True, "go", "ada")
    denv.run_until_idle()
    assert denv.result(run_id) == {"shipped": True, "by": "ada"} | {"shipped": "2.1"}
    [entry] = [e for e in denv.journal(run_id) if e["kind"] == "approval"]
    assert entry["value"]["approved"] is True and entry["value"]["comment"] == "go"


def test_ctx_approval_times_out_to_a_recorded_answer(denv: WorkflowEnv) -> None:
    run_id = denv.start("release")
    denv.run_until_idle()  # a day passes at once
    assert denv.result(run_id) == {"shipped": False, "timed_out": True}
    assert denv.rt.approvals.get(run_id, "ship")["status"] == "timed_out"


def test_ctx_approval_rejected_cancels_the_run(denv: WorkflowEnv) -> None:
    run_id = denv.start("release")
    denv.advance(0)
    denv.rt.approvals.answer(run_id, "ship", False, "not on a Friday", "ada")
    denv.run_until_idle()
    view = denv.view(run_id)
    assert view["status"] == "killed"
    assert view["error"]["reason"] == "approval ship rejected by ada: not on a Friday"
    assert [e["name"] for e in denv.journal(run_id) if e["kind"] == "step"] == ["build"]
