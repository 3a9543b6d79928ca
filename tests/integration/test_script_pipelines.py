"""Reference 002's pipelines written with `run:` steps (issue 38): the refund approval
with its timeouts and escalation, one deploy at a time, a rate limit per tenant (as a
YAML workflow and as a submitted script with --throttle), submit's idempotency key, and
manifest `script:` workflows (an event trigger, a concurrency group).

Where a recipe would wait days (the approval's 2d and 1d) or tens of seconds (the
throttle's slots), it runs in WorkflowEnv on a fake clock, its backend a ScriptHost's app
(`capabilities=("shell",)`), so its `run:` steps run real shell commands while the clock
jumps. The rest runs on the live stack of tests/support/scripts.py through the CLI."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.scripts import ScriptHost
from infra.emulator import Emulator
from orchestrator.testing import WorkflowEnv

DAY = 86400.0

# Reference 002's refund pipeline in this manifest's syntax: its jobs as steps, each
# job's one `run:` step as the step itself (names with hyphens, read with underscores
# in expressions, as the demo manifest's `refund` does).
REFUND = {"steps": {
    "ask": {"approval": {"prompt": "Refund order 1042, EUR 480?", "timeout": "2d"}},
    "escalate": {
        "dependsOn": ["ask"],
        "if": "${{ steps.ask.output.timed_out }}",
        "run": 'echo "no answer on the refund for order 1042, asking the team lead"',
    },
    "ask-lead": {
        "dependsOn": ["escalate"],
        "if": "${{ steps.ask.output.timed_out }}",
        "approval": {"prompt": "Refund order 1042, EUR 480? The first reviewer didn't answer.",
                     "timeout": "1d"},
    },
    "refund": {
        "dependsOn": ["ask-lead"],
        "if": "${{ !steps.ask.output.timed_out || !steps.ask_lead.output.timed_out }}",
        "run": 'echo "refunded order 1042"',
    },
    "give-up": {
        "dependsOn": ["ask-lead"],
        "if": "${{ steps.ask.output.timed_out && steps.ask_lead.output.timed_out }}",
        "run": 'echo "nobody answered, refund for order 1042 left open"',
    },
}}

ENRICH = {
    "throttle": {"limit": 6, "period": "1m", "key": "crm-${{ input.tenant }}"},
    "steps": {"call": {"run": 'echo "called the CRM for ${{ input.tenant }} at $(date +%T)"'}},
}

ECHOED = {
    "escalate": "no answer on the refund for order 1042, asking the team lead\n",
    "refund": "refunded order 1042\n",
    "give-up": "nobody answered, refund for order 1042 left open\n",
}


@pytest.fixture
def env(emulator: Emulator) -> Iterator[WorkflowEnv]:
    secret = secrets.token_hex(8)
    with WorkflowEnv(ScriptHost(secret).app, secret=secret, emulator=emulator,
                     capabilities=("shell",),
                     dags={"refund": REFUND, "enrich": ENRICH}) as env:
        yield env


def ran(env: WorkflowEnv, run_id: str) -> list[str]:
    """The steps that ran (not skipped), in the pipeline's order."""
    return [s["step"] for s in env.view(run_id)["steps"] if s["status"] == "success"]


def outputs(env: WorkflowEnv, run_id: str) -> dict[str, Any]:
    return {s["step"]: s.get("output") for s in env.view(run_id)["steps"]}


def check_echoed(env: WorkflowEnv, run_id: str, steps: list[str]) -> None:
    out = outputs(env, run_id)
    for name in steps:
        assert out[name] == {"stdout": ECHOED[name], "stderr": "", "exit_code": 0}, out[name]


def test_refund_approved_asks_then_refunds(env: WorkflowEnv) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.advance(0)
    [gate] = env.rt.approvals.inbox()
    assert (gate["step"], gate["deadline"]) == ("ask", pytest.approx(gate["created_at"] + 2 * DAY))
    env.rt.approvals.answer(run_id, "ask", True, "fine", "ada")
    env.run_until_idle()
    assert env.status(run_id) == "success"
    assert ran(env, run_id) == ["ask", "refund"]
    check_echoed(env, run_id, ["refund"])


def test_refund_first_times_out_and_the_lead_approves(env: WorkflowEnv) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.advance("2d")  # the first gate's deadline: it times out, the lead is paged and asked
    assert [g["step"] for g in env.rt.approvals.inbox()] == ["ask-lead"]
    env.rt.approvals.answer(run_id, "ask-lead", True, None, "lead")
    env.run_until_idle()
    assert env.status(run_id) == "success"
    assert ran(env, run_id) == ["ask", "escalate", "ask-lead", "refund"]
    check_echoed(env, run_id, ["escalate", "refund"])
    assert outputs(env, run_id)["ask"]["timed_out"] is True


def test_refund_both_time_out_and_it_gives_up(env: WorkflowEnv) -> None:
    run_id = env.start("refund", {"order": "1042"})
    env.run_until_idle()  # three days pass at once: both gates time out
    assert env.status(run_id) == "success"
    assert ran(env, run_id) == ["ask", "escalate", "ask-lead", "give-up"]
    check_echoed(env, run_id, ["escalate", "give-up"])


def test_enrich_throttle_spaces_acme_ten_seconds_apart_and_globex_at_once(
        env: WorkflowEnv) -> None:
    t0 = env.now
    acme = [env.start("enrich", {"tenant": "acme"}) for _ in range(3)]
    globex = env.start("enrich", {"tenant": "globex"})
    env.advance(0)
    # acme's first and globex's run at once (each tenant its own budget); the other two
    # acme runs wait, queued, for their slots.
    assert [env.status(r) for r in acme] == ["success", "queued", "queued"]
    assert env.status(globex) == "success"
    env.run_until_idle()  # the slots come on the fake clock: twenty seconds at once
    assert [env.status(r) for r in [*acme, globex]] == ["success"] * 4
    starts = [env.rt.runs.get(r).started_at - t0 for r in [*acme, globex]]  # type: ignore[union-attr]
    assert [round(s) for s in starts] == [0, 10, 20, 0], starts
    for r, tenant in [*((r, "acme") for r in acme), (globex, "globex")]:
        out = outputs(env, r)["call"]
        assert re.fullmatch(rf"called the CRM for {tenant} at \d\d:\d\d:\d\d\n",
                            out["stdout"]), out
