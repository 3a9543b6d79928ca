"""An operator's resume waits for the worker that paused the run to let the driver go
(orchestrator/services/durable/admin.py, DurableAdmin._restart): that worker writes the
pause first and releases the driver after, and a resume in between used to answer 409.

Deterministic: the real engine on the embedded emulator, driven from the test's thread
by WorkflowEnv (no worker or sweeper thread, a clock that stands still). The pausing
worker caught between its two writes is a stand-in that claims the paused run's driver
as a worker does and releases it as the pausing worker does (the store's own
suspend_driver, no message sent). The stand-in lets go inside the `sleep` injected into
DurableAdmin, which is where _restart waits: no timer, no race, no real sleep."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from infra.emulator import Emulator
from orchestrator.adapters.store.step_writes import Lease
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable_moves import release_of
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.errors import Code, Conflict
from orchestrator.services.durable.admin import HOLD_RETRY, HOLD_WAIT, DurableAdmin
from orchestrator.testing import WorkflowEnv
from tests.support.durable_fns import LEDGER
from tests.support.durable_fns import create_app as durable_app

STAND_IN = "pausing-worker#1"


@pytest.fixture(params=[2, pytest.param(1, marks=pytest.mark.slow)],
                ids=["protocol2", "protocol1"])
def env(request: pytest.FixtureRequest, emulator: Emulator) -> Iterator[WorkflowEnv]:
    """tests/support/durable_fns.py's workflows answering in version 2 of the durable
    protocol, and in the slow suite in version 1 only (the pause is the SDK's answer)."""
    app = durable_app(None if request.param == 2 else (1,))
    with WorkflowEnv(app, secret="durable-secret", emulator=emulator) as e:
        yield e


def paused_run(env: WorkflowEnv) -> str:
    """A run of `versioned` paused by a replay mismatch (a deploy renamed its second
    step), then fixed: what an operator resumes. Its driver is free (the pausing worker
    has let go), as test_durable.py's resume test finds it."""
    run_id = env.start("versioned", {})
    env.run_until_idle()
    assert env.view(run_id)["waiting"]["kind"] == "signal"
    # The clock stands still: the driver's next claims carry its first claim's time, and
    # are still known not to be its first (engine.durable_scopes.first_holder), so each call is
    # given the journal and no step's body runs again (assert_finishes_after_the_fix).
    LEDGER.version[run_id] = 2  # the deploy
    env.send_signal(run_id, "finish", {})
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "paused" and view["paused"]["code"] == "replay_mismatch", view
    LEDGER.version[run_id] = 1  # the fix
    return run_id


@dataclass
class StandIn:
    """The worker that paused the run, between its write of the pause and its release of
    the driver: it holds the driver's lease (taken as a worker claims an attempt)."""

    env: WorkflowEnv
    run_id: str
    row: StepRecord
    released: list[str] = field(default_factory=list)

    @classmethod
    def take(cls, env: WorkflowEnv, run_id: str) -> StandIn:
        store, now = env.rt.store, env.clock()
        driver = store.drivers.get_driver(run_id)
        assert driver is not None and driver.lease_owner is None, driver
        assert driver.waiting is not None and driver.waiting["kind"] == "mismatch", driver
        row = store.steps.claim(run_id, DRIVER, driver.attempt,
                                Lease(STAND_IN, now + env.rt.settings.lease_margin), now)
        assert row.lease_owner == STAND_IN and not row.status.terminal, row
        return cls(env, run_id, row)

    def release(self) -> None:
        """Let go as the pausing worker does (DurableCalls._pause, _release): the driver
        left waiting with the pause's wait, by the store's own suspend_driver. A wait
        with no end sends no message, and none is sent here."""
        store, now, row = self.env.rt.store, self.env.clock(), self.row
        assert row.waiting is not None
        out = release_of(Waiting.from_json(row.waiting), now,
                         redispatch_after=store.wake.redispatch_after)
        assert not (out.dispatch or out.timer), out
        left = store.drivers.suspend_driver(self.run_id, STAND_IN, row.attempt, row.pokes,
                                            row.waiting, out.due, out.wake, now,
                                            reset_attempt=row.attempt > 1)
        self.released.append(left)
        assert left == "ok", left


@dataclass
class Sleeps:
    """The `sleep` given to DurableAdmin: it records each call and sleeps not at all.
    `first`, if given, runs inside the first call (before the next try of the hold)."""

    first: Callable[[], None] | None = None
    calls: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if len(self.calls) == 1 and self.first is not None:
            self.first()


def admin(env: WorkflowEnv, sleep: Sleeps) -> DurableAdmin:
    return DurableAdmin(env.rt.store, env.rt.queues, env.rt.clock, sleep=sleep)


def pause_and_resume(env: WorkflowEnv, run_id: str) -> list[str]:
    return [e["type"] for e in env.rt.runs.history(run_id)
            if e["type"] in ("run.paused", "run.resumed")]


def assert_finishes_after_the_fix(env: WorkflowEnv, run_id: str) -> None:
    env.run_until_idle()
    assert env.result(run_id) == {"done": "two"}
    assert LEDGER.bodies(run_id) == ["one", "two"]  # replayed: no body ran again
    assert pause_and_resume(env, run_id) == ["run.paused", "run.resumed"]


def test_a_resume_waits_for_the_pausing_worker_to_let_go(env: WorkflowEnv) -> None:
    run_id = paused_run(env)
    stand_in = StandIn.take(env, run_id)
    seen: list[tuple[str, str | None]] = []

    def let_go() -> None:
        # While the resume waits: the pause is written and the stand-in holds the driver.
        driver = env.rt.store.drivers.get_driver(run_id)
        seen.append((env.status(run_id), driver.lease_owner if driver else None))
        stand_in.release()

    sleep = Sleeps(first=let_go)
    out = admin(env, sleep).resume(run_id)
    assert out == {"run_id": run_id, "resumed": True, "was_paused": True}
    assert seen == [("paused", STAND_IN)]
    assert stand_in.released == ["ok"]
    # Refused once, waited once, held on the next try.
    assert sleep.calls == [HOLD_RETRY]
    driver = env.rt.store.drivers.get_driver(run_id)
    assert driver is not None and driver.lease_owner is None, driver
    assert driver.waiting is not None and driver.waiting["kind"] == "next", driver
    assert env.status(run_id) == "running"
    assert_finishes_after_the_fix(env, run_id)


def test_a_resume_answers_409_when_the_holder_never_lets_go(env: WorkflowEnv) -> None:
    run_id = paused_run(env)
    stand_in = StandIn.take(env, run_id)
    sleep = Sleeps()
    began = time.monotonic()
    with pytest.raises(Conflict, match="is being advanced right now") as refused:
        admin(env, sleep).resume(run_id)
    took = time.monotonic() - began
    assert refused.value.code == Code.CONFLICT
    # Every try of HOLD_WAIT's worth, each after one injected (and empty) sleep.
    assert sleep.calls == [HOLD_RETRY] * int(HOLD_WAIT / HOLD_RETRY)
    # The sleeps slept not at all: no HOLD_WAIT of real time went by.
    assert took < HOLD_WAIT, took
    # Nothing was touched: still paused, still the stand-in's.
    assert env.status(run_id) == "paused"
    driver = env.rt.store.drivers.get_driver(run_id)
    assert driver is not None and driver.lease_owner == STAND_IN, driver
    assert pause_and_resume(env, run_id) == ["run.paused"]
    # Tried again once the run waits, the resume goes through at once.
    stand_in.release()
    again = Sleeps()
    assert admin(env, again).resume(run_id)["was_paused"] is True
    assert again.calls == []
    assert_finishes_after_the_fix(env, run_id)


def test_a_resume_of_a_driver_nobody_holds_never_sleeps(env: WorkflowEnv) -> None:
    run_id = paused_run(env)
    sleep = Sleeps()
    assert admin(env, sleep).resume(run_id)["was_paused"] is True
    assert sleep.calls == []
    assert_finishes_after_the_fix(env, run_id)


def test_a_release_right_after_the_refused_hold_is_not_a_409(env: WorkflowEnv) -> None:
    run_id = paused_run(env)
    stand_in = StandIn.take(env, run_id)
    events = env.rt.clients.dynamodb.meta.events
    holds: list[bool] = []  # the resume's holds of this run's driver: refused?

    def mark(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        owner = params.get("ExpressionAttributeValues", {}).get(":o", {}).get("S", "")
        if params.get("Key", {}).get("run_id", {}).get("S") == run_id \
                and params.get("UpdateExpression", "").startswith("SET lease_owner = :o") \
                and owner.startswith("resume:"):
            context["resume_hold"] = True

    def refused(http_response: Any, parsed: dict[str, Any], context: dict[str, Any],
                **_: Any) -> None:
        if not context.get("resume_hold"):
            return
        no = (http_response.status_code >= 300 and parsed.get("Error", {}).get("Code")
              == "ConditionalCheckFailedException")
        holds.append(no)
        if no and not stand_in.released:
            stand_in.release()  # the pausing worker lets go just now

    events.register("before-parameter-build.dynamodb.UpdateItem", mark)
    events.register("after-call.dynamodb.UpdateItem", refused)
    sleep = Sleeps()
    try:
        out = admin(env, sleep).resume(run_id)
    finally:
        events.unregister("before-parameter-build.dynamodb.UpdateItem", mark)
        events.unregister("after-call.dynamodb.UpdateItem", refused)
        # The resume's first hold was refused while the stand-in held the driver, the
        # stand-in let go right then, and the driver is free: a 409 now is the race's.
        assert holds[:1] == [True] and stand_in.released == ["ok"]
        driver = env.rt.store.drivers.get_driver(run_id)
        assert driver is not None and driver.lease_owner is None, driver
    assert out["was_paused"] is True
    assert_finishes_after_the_fix(env, run_id)
