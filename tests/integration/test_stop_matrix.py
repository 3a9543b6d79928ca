"""Issue 37 §4, stops as a matrix: every step kind (a call, a step with `if:`, an
approval gate, a step holding a lock, a fan-out step, a durable step, a durable wait)
crossed with every stop (cancel, halt by `onFailure: halt`, an approval's rejection, a
timeout), each followed by a rerun of the stopped run.

Every workflow runs `pre` -> the kind (`k`) -> `post`, and the run is stopped while `k`
is mid-way: waiting for a retry's backoff, for its gate, for its signal. After the stop
nothing new is called (the calls recorded are the same once the clock has run past
every backoff), `post` never runs, and the run ends in the status the README gives the
stop. The rerun then ends in success: a YAML rerun reuses every step that succeeded
(`pre`, not called again) and runs the rest; a durable rerun starts from the top (README
"Cancel and rerun": its journal is not carried over).

All of it on the WorkflowEnv's fake clock, except the per-attempt call timeout, which is
real HTTP time (400 ms an attempt)."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from functions.durable import (
    Context,
    RetryableError,
    TerminalError,
    current_step,
    step,
    workflow,
)
from functions.sdk import FunctionApp, StepRequest
from infra.emulator import Emulator
from orchestrator.errors import Conflict
from orchestrator.testing import WorkflowEnv
from tests.support.matrix import Calls

CALLS = Calls()
# Set when an environment closes: frees the handlers left hanging by a timeout cell.
RELEASE = threading.Event()


def _told(input: Any, what: str, name: str) -> bool:
    return isinstance(input, dict) and input.get(what) == name


def _act(input: Any, name: str, attempt: int) -> None:
    """What the input tells step `name` to do: fail terminally, fail its first attempt
    (so it waits for its retry's backoff), or hang past its timeout."""
    if _told(input, "hang", name):
        RELEASE.wait(10)
    if _told(input, "fail", name):
        raise TerminalError(f"{name} was told to fail")
    if _told(input, "flaky", name) and attempt == 1:
        raise RetryableError(f"{name} fails its first attempt")


def make_app() -> FunctionApp:
    app = FunctionApp(None, title="stops")

    @app.step("/work")
    def work(req: StepRequest) -> Any:
        CALLS.add(req.run_id, req.step)
        _act(req.input, req.step, req.attempt)
        return {"step": req.step}

    @app.step("/item")
    def item(req: StepRequest) -> Any:
        CALLS.add(req.run_id, req.step)  # `k[0]`, `k[1]`, ...
        # The item at index 1 stands for the step: told `k`, it acts.
        if req.step.endswith("[1]"):
            _act(req.input, req.step.split("[")[0], req.attempt)
        return req.payload.get("item")

    app.workflow(durable_step, durable_wait)
    return app


def _attempt() -> int:
    info = current_step()
    return 1 if info is None else int(info.attempt)


@step("pre")
async def d_pre(run_id: str, input: Any) -> str:
    CALLS.add(run_id, "pre")
    _act(input, "pre", 1)
    return "pre"


@step("k", retries=2, backoff="linear", delay="30s", timeout="400ms")
async def d_k(run_id: str, input: Any) -> str:
    CALLS.add(run_id, "k")
    while _told(input, "hang", "k") and not RELEASE.is_set():
        await asyncio.sleep(0.05)  # past the step's timeout: the SDK cancels it
    _act({k: v for k, v in input.items() if k != "hang"}, "k", _attempt())
    return "k"


@step("post")
async def d_post(run_id: str, input: Any) -> str:
    CALLS.add(run_id, "post")
    return "post"


async def _gate_then(ctx: Context, input: dict[str, Any]) -> None:
    await d_pre(ctx.run_id, input)
    if input.get("gate"):
        answer = await ctx.approval("gate", prompt="go on?", timeout="1h")
        if not answer["approved"]:
            raise TerminalError("the gate was not approved")


@workflow("durable-step")
async def durable_step(ctx: Context, input: dict[str, Any]) -> Any:
    await _gate_then(ctx, input)
    await d_k(ctx.run_id, input)
    return await d_post(ctx.run_id, input)


@workflow("durable-wait")
async def durable_wait(ctx: Context, input: dict[str, Any]) -> Any:
    await _gate_then(ctx, input)
    got = await ctx.wait_for_signal("k", timeout="1h")
    if got is None:
        raise TerminalError("no signal k within its timeout")
    return await d_post(ctx.run_id, input)


WORK = {"backend": "app", "route": "/work"}
RETRY = {"max": 1, "strategy": "linear", "delay": "30s"}


def _dag(k: dict[str, Any], post_if: str | None = None) -> dict[str, Any]:
    post: dict[str, Any] = {**WORK, "dependsOn": ["k"]}
    if post_if:
        post["if"] = post_if
    return copy.deepcopy({"onFailure": "halt", "steps": {
        "pre": dict(WORK),
        "k": {"dependsOn": ["pre"], **k},
        # A sibling of k: the step whose failure halts the run (input fail: side).
        "side": {**WORK, "dependsOn": ["pre"]},
        # A sibling gate, opened only when asked (input gate: true): the one rejected.
        "gate": {"approval": {"prompt": "go on?", "timeout": "1h"}, "dependsOn": ["pre"],
                 "if": "${{ input.gate }}"},
        "post": post,
    }})


CALL_K = {**WORK, "retry": RETRY, "timeout": "400ms"}
DAGS = {
    "call": _dag(CALL_K),
    "condition": _dag({**CALL_K, "if": "${{ !input.skip }}"}),
    "approval": _dag({"approval": {"prompt": "ok?", "timeout": "1h"}},
                     post_if="${{ steps.k.output.approved }}"),
    # One key for every lock cell: a lock a stop left held would block the next run.
    "lock": _dag({**CALL_K, "lock": "matrix-lock"}),
    "fanout": _dag({"backend": "app", "route": "/item", "retry": RETRY, "timeout": "400ms",
                    "fanOut": {"items": "input.items", "maxParallel": 1}}),
}
KINDS = [*DAGS, "durable-step", "durable-wait"]
DURABLE = ("durable-step", "durable-wait")


@pytest.fixture(scope="module")
def env(emulator: Emulator) -> Iterator[WorkflowEnv]:
    RELEASE.clear()
    with WorkflowEnv(make_app(), emulator=emulator, dags=DAGS) as e:
        try:
            yield e
        finally:
            RELEASE.set()  # before the servers stop: they wait for their handlers


SALT = iter(range(10**6))


def start(env: WorkflowEnv, kind: str, **told: Any) -> str:
    salt = f"s{next(SALT)}"
    input = {"salt": salt, "items": [0, 1, 2], **told}
    if kind == "condition":
        input.setdefault("skip", False)
    return env.start(kind, input, run_id=f"{kind}-{salt}")


def to_the_middle(env: WorkflowEnv, run_id: str, kind: str) -> None:
    """Run until `k` is mid-way: its first attempt failed and it waits 30 s to retry, or
    its gate or signal waits."""
    env.advance(0)
    assert env.status(run_id) == "running"
    if kind == "approval":
        assert env.rt.approvals.get(run_id, "k")["status"] == "pending"
    elif kind == "durable-wait":
        assert (env.view(run_id).get("waiting") or {}).get("kind") == "signal"
    else:
        assert "k" in " ".join(CALLS.of(run_id))


def stays_stopped(env: WorkflowEnv, run_id: str, status: str, *,
                  until_idle: bool = False) -> None:
    """After the stop nothing new is called, however far the clock runs; `post` never.
    `until_idle`: the stop comes only after the retries (a timeout's final failure)."""
    if until_idle:
        env.run_until_idle()
    env.advance(0)  # what was in flight when the stop was committed lands
    seen = CALLS.of(run_id)
    env.run_until_idle()
    env.advance("2h")
    assert env.status(run_id) == status, env.view(run_id)
    assert CALLS.of(run_id) == seen, "a step was called after the stop"
    assert "post" not in seen
    # README "A stop takes effect at the instant it is committed": no step.started in
    # the run's history is later than its stop instant.
    stop_at = env.rt.runs.get(run_id).stop_at
    if stop_at is not None:
        late = [e for e in env.rt.runs.history(run_id)
                if e.get("type") == "step.started" and float(e["at"]) > stop_at + 0.001]
        assert not late, late
    if run_id.startswith("lock-"):  # whatever stopped it, its lock is free again
        other = start(env, "lock")
        env.run_until_idle()
        assert env.status(other) == "success"


def reruns(env: WorkflowEnv, old: str, kind: str) -> None:
    """A rerun of the stopped run (clean input) succeeds; a YAML one reuses `pre`."""
    # The condition kind's rerun turns its condition false: the condition is read
    # again (k is not reused, it ends condition_false) and `post` runs after it.
    new, created = env.rt.runs.rerun(old, input={"salt": f"re-{old}", "items": [0, 1, 2],
                                                 "skip": kind == "condition"})
    assert created
    env.advance(0)
    if kind == "approval":
        env.rt.approvals.answer(new.run_id, "k", True, None, "ada")
    if kind == "durable-wait":
        env.send_signal(new.run_id, "k", {"go": True})
    env.run_until_idle()
    assert env.status(new.run_id) == "success", env.view(new.run_id)
    calls = CALLS.of(new.run_id)
    assert "post" in calls
    if kind == "condition":
        assert "k" not in calls
        k = next(s for s in env.view(new.run_id)["steps"] if s["step"] == "k")
        assert k["status"] == "skipped" and k["error"]["code"] == "condition_false"
    if kind in DURABLE:
        assert calls[0] == "pre"  # from the top
    else:
        assert "pre" not in calls  # reused, not called
        types = [e["type"] for e in env.rt.runs.history(new.run_id)]
        assert "step.reused" in types


def signal_or_flaky(kind: str) -> dict[str, Any]:
    """What puts `k` mid-way: a first attempt that fails (a gate or a signal wait is
    mid-way by itself)."""
    return {} if kind in ("approval", "durable-wait") else {"flaky": "k"}


# ---- cancel ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_cancel_mid_step(env: WorkflowEnv, kind: str) -> None:
    run_id = start(env, kind, **signal_or_flaky(kind))
    to_the_middle(env, run_id, kind)
    assert env.rt.runs.cancel(run_id, "stop here")
    stays_stopped(env, run_id, "killed")
    assert env.rt.runs.get(run_id).kill_reason == "stop here"
    reruns(env, run_id, kind)


# ---- halt --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_halt_mid_step(env: WorkflowEnv, kind: str) -> None:
    if kind in DURABLE:
        # A durable run has no onFailure policy: a step's terminal failure the workflow
        # does not catch ends the run failed at once. Here `k` fails for good (a
        # durable wait's run fails at `pre`, before it waits).
        run_id = start(env, kind, fail="k" if kind == "durable-step" else "pre")
    else:
        # `side` fails while `k` is mid-way: onFailure halt skips k (waiting for its
        # retry or its gate) and everything below it.
        run_id = start(env, kind, fail="side", **signal_or_flaky(kind))
    stays_stopped(env, run_id, "failed")
    if kind not in DURABLE:
        steps = {s["step"]: s["status"] for s in env.view(run_id)["steps"]}
        assert steps["side"] == "failed" and steps["post"] == "skipped"
        assert steps["k"] != "success" or kind == "approval"
    reruns(env, run_id, kind)


# ---- rejection ---------------------------------------------------------------------------

# A rejected YAML gate ends its step (approved: false) and kills the run; a rerun asks the
# gate again rather than reuse the rejection (found here first; RunService.rerun).
@pytest.mark.parametrize("kind", KINDS)
def test_rejection_mid_step(env: WorkflowEnv, kind: str) -> None:
    # The rejected gate is `k` itself for the approval kind, else a sibling gate (YAML)
    # or the gate before `k` (durable: one operation at a time).
    gate = "k" if kind == "approval" else "gate"
    told = {} if kind == "approval" else {"gate": True}
    run_id = start(env, kind, **told, **signal_or_flaky(kind))
    env.advance(0)
    assert env.rt.approvals.get(run_id, gate)["status"] == "pending"
    env.rt.approvals.answer(run_id, gate, False, "no", "ada")
    stays_stopped(env, run_id, "killed")
    reason = env.rt.runs.get(run_id).kill_reason or ""
    assert "rejected by ada" in reason, reason
    if kind in DURABLE:
        assert "k" not in CALLS.of(run_id)
    reruns(env, run_id, kind)


# ---- timeout -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_timeout_mid_step(env: WorkflowEnv, kind: str) -> None:
    if kind == "approval":
        # A gate's deadline is not a stop: the gate succeeds with timed_out: true and the
        # steps below decide (README "Approvals"); `post` is skipped by its `if:`, the
        # run succeeds, and a succeeded run has nothing to rerun.
        run_id = start(env, kind)
        env.run_until_idle()
        assert env.status(run_id) == "success"
        out = {s["step"]: s for s in env.view(run_id)["steps"]}
        assert out["k"]["output"]["timed_out"] is True
        assert out["post"]["status"] == "skipped" and "post" not in CALLS.of(run_id)
        with pytest.raises(Conflict, match="succeeded"):
            env.rt.runs.rerun(run_id)
        return
    if kind == "durable-wait":
        # The signal's timeout passes (on the fake clock): the workflow gives up.
        run_id = start(env, kind)
        stays_stopped(env, run_id, "failed", until_idle=True)
    else:
        # Every attempt of `k` outlives its timeout (400 ms of real time each): the
        # step fails once its retries are spent, and the halt stops the run.
        run_id = start(env, kind, hang="k")
        stays_stopped(env, run_id, "failed", until_idle=True)
    reruns(env, run_id, kind)
