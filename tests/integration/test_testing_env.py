"""orchestrator.testing.WorkflowEnv: users' own durable workflows on the real engine, the
embedded emulator and a fake clock, driven from the test's thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from functions.durable import Context, TerminalError, step, workflow
from functions.sdk import FunctionApp
from infra.emulator import Emulator
from orchestrator.services.durable.hooks import Gone
from orchestrator.testing import RunFailed, RunNotFinished, StillRunning, WorkflowEnv

DAY = 86400.0

# What the step bodies really ran (a stubbed step's body must not show up here).
RAN: list[str] = []
_lock = threading.Lock()


def _ran(name: str) -> None:
    with _lock:
        RAN.append(name)


@step("create-user")
async def create_user(user_id: str) -> dict[str, Any]:
    _ran("create-user")
    return {"id": user_id}


@step("send-email", retries=0)
async def send_email(user_id: str, template: str) -> str:
    _ran("send-email")
    return f"{template}:{user_id}"


@workflow("trial")
async def trial(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    user = await create_user(payload["userId"])
    await ctx.sleep("14d")
    sent = await send_email(user["id"], "trial-ended")
    return {"user": user, "sent": sent}


@workflow("review")
async def review(ctx: Context, payload: dict[str, Any]) -> Any:
    return {"decision": await ctx.wait_for_signal("approve", timeout=payload.get("timeout"))}


@step("charge-card", retries=0)
async def charge(amount: int) -> dict[str, Any]:
    _ran("charge-card")
    raise TerminalError("the test must never reach the payment provider")


@workflow("checkout")
async def checkout(ctx: Context, payload: dict[str, Any]) -> Any:
    receipt = await charge(payload["amount"])
    return {"receipt": receipt}


@workflow("forever")
async def forever(ctx: Context, payload: Any) -> None:
    while True:
        await ctx.sleep("1h")


@workflow("ping")
async def ping(ctx: Context, payload: Any) -> Any:
    return {"pong": payload, "at": ctx.now().timestamp()}


FLAKY_CALLS: list[float] = []


@workflow("flaky")
async def flaky(ctx: Context, payload: Any) -> str:
    async def body() -> str:
        with _lock:
            FLAKY_CALLS.append(time.time())
            n = len(FLAKY_CALLS)
        if n < 3:
            raise RuntimeError(f"failure {n}")
        return f"ok after {n}"

    return await step("flaky", body, retries=3, delay="2m", backoff="fixed")


@workflow("verify-email")
async def verify_email(ctx: Context, payload: dict[str, Any]) -> Any:
    event = await ctx.wait_for_event("email.verified", subject=payload["userId"],
                                     timeout="3d")
    return None if event is None else event["data"]


@step("email-approver", retries=0)
async def email_approver(url: str) -> None:
    raise TerminalError("the test must never send mail")


@workflow("expense")
async def expense(ctx: Context, payload: dict[str, Any]) -> Any:
    hook = await ctx.create_hook("decision", metadata={"expense": payload["id"]})
    await email_approver(hook.url)
    return await hook.wait(timeout="7d")


@workflow("staggered")
async def staggered(ctx: Context, payload: dict[str, Any]) -> Any:
    def branch(days: int) -> Any:
        async def run() -> int:
            await ctx.sleep(f"{days}d")
            return int(await step("count", lambda: days))
        return run
    return await ctx.parallel([branch(d) for d in (3, 1, 2)], max_parallel=2)


WORKFLOWS = [trial, review, checkout, forever, ping, flaky, verify_email, expense, staggered]


@pytest.fixture
def env(emulator: Emulator) -> Iterator[WorkflowEnv]:
    """On the session's emulator (tests/conftest.py): one per test would cost most of a second."""
    with WorkflowEnv(workflows=WORKFLOWS, emulator=emulator) as e:
        yield e


def test_a_14_day_trial_runs_in_one_call_and_the_clock_jumps(env: WorkflowEnv) -> None:
    RAN.clear()
    before = env.now
    run_id = env.start("trial", {"userId": "u1"})
    wall = time.monotonic()
    env.run_until_idle()
    print(f"14-day trial: run_until_idle took {time.monotonic() - wall:.3f} s of wall time")
    assert env.result(run_id) == {"user": {"id": "u1"}, "sent": "trial-ended:u1"}
    assert RAN == ["create-user", "send-email"]
    assert env.now - before >= 14 * DAY
    kinds = [(e["kind"], e["name"], e["status"]) for e in env.journal(run_id)]
    assert kinds == [("step", "create-user", "ok"), ("sleep", "sleep", "ok"),
                     ("step", "send-email", "ok")]
    sleep = env.journal(run_id)[1]
    assert sleep["ended"] - sleep["started"] == pytest.approx(14 * DAY, abs=1.0)


def test_timers_inside_parallel_branches_jump_the_clock_too(env: WorkflowEnv) -> None:
    run_id = env.start("staggered", {})
    start = env.now
    env.run_until_idle()
    assert env.result(run_id) == [3, 1, 2]
    # Two at a time: 1 d and 3 d run first, 2 d starts when 1 d ends: all over by 3 d.
    assert 3 * DAY <= env.now - start < 3 * DAY + 60


def test_advance_stops_short_of_a_wake_up_and_then_runs_it(env: WorkflowEnv) -> None:
    before = env.now
    run_id = env.start("trial", {"userId": "u2"})
    env.advance("13d")
    assert env.now - before == pytest.approx(13 * DAY)
    assert env.status(run_id) == "running"
    assert env.view(run_id)["waiting"]["kind"] == "sleep"
    env.advance(timedelta(hours=12))
    assert env.status(run_id) == "running"
    env.advance(12 * 3600)  # a number is seconds
    assert env.status(run_id) == "success"
    with pytest.raises(ValueError, match="negative"):
        env.advance(timedelta(seconds=-1))


def test_a_signal_wait_times_out_with_none(env: WorkflowEnv) -> None:
    before = env.now
    run_id = env.start("review", {"timeout": "2d"})
    env.run_until_idle()
    assert env.result(run_id) == {"decision": None}
    assert env.now - before == pytest.approx(2 * DAY, abs=1.0)
    [entry] = env.journal(run_id)
    assert (entry["kind"], entry["status"]) == ("signal", "timeout")


def test_a_signal_wakes_the_waiting_run(env: WorkflowEnv) -> None:
    run_id = env.start("review", {"timeout": "2d"})
    env.advance("1h")
    assert env.status(run_id) == "running"
    env.send_signal(run_id, "approve", {"ok": True})
    env.run_until_idle()
    assert env.result(run_id) == {"decision": {"ok": True}}


def test_a_run_waiting_for_a_signal_is_idle_and_has_no_result(env: WorkflowEnv) -> None:
    run_id = env.start("review", {})
    before = env.now
    env.run_until_idle()
    assert env.status(run_id) == "running"
    assert env.now == before  # nothing to jump to
    with pytest.raises(RunNotFinished, match="waiting for signal 'approve' \\(no timeout\\)"):
        env.result(run_id)


def test_a_stubbed_step_answers_instead_of_its_body(env: WorkflowEnv) -> None:
    RAN.clear()
    env.stub_step("charge-card", {"id": "ch_1"})
    run_id = env.start("checkout", {"amount": 10})
    env.run_until_idle()
    assert env.result(run_id) == {"receipt": {"id": "ch_1"}}
    assert RAN == []
    [entry] = env.journal(run_id)
    assert (entry["name"], entry["value"]) == ("charge-card", {"id": "ch_1"})


def test_without_its_stub_the_step_fails_the_run(env: WorkflowEnv) -> None:
    RAN.clear()
    run_id = env.start("checkout", {"amount": 10})
    env.run_until_idle()
    with pytest.raises(RunFailed, match="must never reach") as failed:
        env.result(run_id)
    assert failed.value.status == "failed"
    assert RAN == ["charge-card"]


def test_a_run_that_never_stops_sleeping_is_reported(env: WorkflowEnv) -> None:
    run_id = env.start("forever")
    with pytest.raises(StillRunning, match=run_id):
        env.run_until_idle(max_rounds=5)


def test_retries_wait_out_their_backoff_on_the_fake_clock(env: WorkflowEnv) -> None:
    FLAKY_CALLS.clear()
    before = env.now
    run_id = env.start("flaky")
    env.run_until_idle()
    assert env.result(run_id) == "ok after 3"
    assert env.now - before == pytest.approx(2 * 120, abs=1.0)
    [entry] = env.journal(run_id)
    assert entry["attempts"] == 3


def test_emit_starts_the_runs_its_event_triggers(emulator: Emulator) -> None:
    options = {"ping": {"on": {"event": "user.signup", "if": "event.data.plan == 'pro'"}}}
    with WorkflowEnv(workflows=[ping], options=options, emulator=emulator) as env:
        assert env.emit("user.signup", {"plan": "free"}) == []
        [run_id] = env.emit("user.signup", {"plan": "pro"}, event_id="e1")
        env.run_until_idle()
        assert env.result(run_id)["pong"]["data"] == {"plan": "pro"}


def test_an_emitted_event_ends_a_wait_for_it(env: WorkflowEnv) -> None:
    run_id = env.start("verify-email", {"userId": "u7"})
    env.advance("1h")
    assert env.view(run_id)["waiting"]["kind"] == "event"
    assert env.emit("email.verified", {"by": "link"}, key="u8") == []  # not its subject
    env.advance("1h")
    assert env.status(run_id) == "running"
    env.emit("email.verified", {"by": "code"}, key="u7")
    env.run_until_idle()
    assert env.result(run_id) == {"by": "code"}
    [entry] = env.journal(run_id)
    assert entry["ended"] - entry["started"] == pytest.approx(2 * 3600, abs=1.0)


def test_executing_a_hook_delivers_its_signal(env: WorkflowEnv) -> None:
    urls: list[str] = []
    env.stub_step("email-approver", fn=urls.append)  # the URL the approver would get
    run_id = env.start("expense", {"id": "e1"})
    env.advance("1h")
    [url] = urls
    env.execute_hook(url, {"approved": True})
    env.run_until_idle()
    assert env.result(run_id) == {"approved": True, "expense": "e1"}
    with pytest.raises(Gone):
        env.execute_hook(url, {"approved": False})


def test_a_throttle_delays_runs_and_the_clock_jumps_to_their_slots(emulator: Emulator) -> None:
    options = {"ping": {"throttle": {"limit": 1, "period": "1h"}}}
    with WorkflowEnv(workflows=[ping], options=options, emulator=emulator) as env:
        before = env.now
        ids = [env.start("ping", i) for i in range(3)]
        env.run_until_idle()
        starts = sorted(env.result(r)["at"] - before for r in ids)
        assert starts == pytest.approx([0, 3600, 7200], abs=1.0)


def test_a_signed_app_is_called_with_real_timestamps_after_a_jump() -> None:
    # Its own emulator, too: the environment starts and stops it.
    app = FunctionApp(secret="s3cr3t")
    app.workflow(trial)
    with WorkflowEnv(app, secret="s3cr3t") as env:
        run_id = env.start("trial", {"userId": "u3"})
        env.run_until_idle()
        assert env.result(run_id)["sent"] == "trial-ended:u3"
    with pytest.raises(ValueError, match="pass its secret"):
        WorkflowEnv(app)


def test_options_must_name_served_workflows() -> None:
    with pytest.raises(ValueError, match=r"options for \['nope'\]"):
        WorkflowEnv(workflows=[ping], options={"nope": {}})


@workflow("mixed-branches")
async def mixed_branches(ctx: Context, payload: Any) -> Any:
    async def at_once() -> int:
        return 7

    return await ctx.parallel([step("a", lambda: 1), at_once, step("c", lambda: 3),
                               at_once, step("e", lambda: 5)], max_parallel=1)


def test_branches_that_return_at_once_pass_their_slot_on(emulator: Emulator) -> None:
    with WorkflowEnv(workflows=[mixed_branches], emulator=emulator) as env:
        run_id = env.start("mixed-branches", {})
        env.run_until_idle()
        assert env.result(run_id) == [1, 7, 3, 7, 5]
