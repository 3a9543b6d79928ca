"""A spawned child that notifies its parent: the child's end sends the parent a signal
with the child's outcome, before or after the parent waits for it, once."""

from __future__ import annotations

from typing import Any

from functions.durable import Context, StepFailed, TerminalError, step, workflow
from orchestrator.testing import WorkflowEnv


@step("work", retries=0)
async def work(n: int) -> int:
    if n < 0:
        raise TerminalError(f"negative: {n}")
    return n * 2


@workflow("child")
async def child(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("nap"):
        await ctx.sleep("1h")
    return {"doubled": await work(payload["n"])}


@workflow("parent")
async def parent(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    fast = await ctx.spawn("child", {"n": 2}, name="fast", notify="done-fast")
    slow = await ctx.spawn("child", {"n": 3, "nap": True}, name="slow", notify="done-slow")
    bad = await ctx.spawn("child", {"n": -1}, name="bad", notify="done-bad")
    return {"ids": [fast, slow, bad],
            "fast": await ctx.wait_for_signal("done-fast"),
            "slow": await ctx.wait_for_signal("done-slow"),
            "bad": await ctx.wait_for_signal("done-bad")}


def test_a_spawned_child_notifies_its_parent_once_with_its_outcome() -> None:
    with WorkflowEnv(workflows=[parent, child]) as env:
        run_id = env.start("parent", {})
        env.run_until_idle()
        out = env.result(run_id)
        fast, slow, bad = out["ids"]
        assert out["fast"] == {"run_id": fast, "status": "success", "error": None,
                               "output": {"doubled": 4}}
        assert out["slow"]["run_id"] == slow and out["slow"]["output"] == {"doubled": 6}
        assert out["bad"]["status"] == "failed" and "negative: -1" in str(out["bad"]["error"])
        # The sweeper's pass over finished runs repeats `finished`: it queues nothing
        # again (the signal's id is the child's run id), and raises nothing.
        for kid in (fast, slow, bad):
            env.rt.children.finished(env.rt.runs.get(kid))
        again = env.rt.signals.send(run_id, "done-fast", {}, fast)
        assert again["duplicate"] is True


@workflow("orphan")
async def orphan(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        await ctx.call("no-such-workflow", {})
    except StepFailed as exc:
        return {"caught": exc.code, "message": str(exc)}
    return {"caught": None}


def test_a_child_of_an_unknown_workflow_fails_where_it_was_asked_for() -> None:
    with WorkflowEnv(workflows=[orphan]) as env:
        run_id = env.start("orphan", {})
        env.run_until_idle()
        out = env.result(run_id)
        assert out["caught"] == "not_found"
        assert "no-such-workflow" in out["message"]
