"""Reference 002's pipelines written with `run:` steps (issue 38): the refund approval
with its timeouts and escalation, one deploy at a time, a rate limit per tenant (as a
YAML workflow and as a submitted script with --throttle), submit's idempotency key, and
manifest `script:` workflows (an event trigger, a concurrency group).

Where a recipe would wait days (the approval's 2d and 1d) or tens of seconds (the
throttle's slots), it runs in WorkflowEnv on a fake clock, its backend a ScriptHost's app
(`capabilities=("shell",)`), so its `run:` steps run real shell commands while the clock
jumps. The rest runs on the live stack of tests/support/scripts.py through the CLI."""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.sdk.scripts import ScriptHost
from infra.emulator import Emulator
from orchestrator.testing import WorkflowEnv
from tests.support.harness import BuildHarness
from tests.support.scripts import RECIPES, ScriptStack, log_of, poll, script_stack

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

# A command that fails its first try (exit 75) and answers on the next: the counter
# lives in the file the input names.
FLAKY = ('n=$(( $(cat ${{ input.count }} 2>/dev/null || echo 0) + 1 )); '
         'echo $n > ${{ input.count }}; [ $n -ge 2 ] || { echo "not yet" >&2; exit 75; }; '
         'echo "answered on try $n"')
# A value with shell syntax in it stays text: the hole is a variable, not code.
QUOTED = {"steps": {"say": {"run": 'echo "got ${{ input.text }}"; ls'}}}
RETRIED = {"steps": {"fetch": {"run": FLAKY, "retry": {"max": 2, "delay": "5s"}}}}
ONCE = {"steps": {"fetch": {"run": FLAKY}}}

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
                     dags={"refund": REFUND, "enrich": ENRICH, "retried": RETRIED,
                           "once": ONCE, "quoted": QUOTED}) as env:
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


# ---- on the live stack ----------------------------------------------------------------

# Reference 002's "One deploy at a time" (its `sleep 4` shortened to 1: the test only
# needs the two sections to be seen not to overlap; the deploy first waits, at most 30 s,
# for the test's gate file), and manifest `script:` workflows.
LIVE = """
backends:
  scripts:
    url: "${SCRIPTS}"
    secret: "${SCRIPTS_SECRET}"
    capabilities: [shell]
workflows:
  deploy-prod:
    concurrency: { group: deploy-prod, policy: queue }
    steps:
      deploy:
        run: >-
          echo "deploy started $(date +%T)";
          for i in $(seq 600); do [ -e "@GATE@" ] && break; sleep 0.05; done;
          sleep 1; echo "deploy done $(date +%T)"
  greet:
    script: greet.sh
    on: { event: greet }
  serial:
    script: serial.sh
    concurrency: { group: g, policy: queue }
"""

# A script started by an event reads the event's data as its payload.
GREET = (
    "name=\"$(python3 -c 'import json, os; "
    "print(json.load(open(os.environ[\"ORCHESTRATOR_INPUT_FILE\"]))[\"payload\"][\"name\"])')\"\n"
    'echo "hello $name"\n'
)

SERIAL = """echo "start $(date +%s.%N)"
sleep 1
echo "end $(date +%s.%N)"
"""


@pytest.fixture
def live(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    (tmp_path / "greet.sh").write_text(GREET)
    (tmp_path / "serial.sh").write_text(SERIAL)
    manifest = LIVE.replace("@GATE@", str(tmp_path / "gate"))
    with script_stack(build_harness, tmp_path, manifest=manifest) as s:
        yield s



def _trigger(stack: ScriptStack, workflow: str) -> str:
    res = stack.cli("trigger", workflow)
    assert res.exit_code == 0, res.output
    return str(res.output.strip().splitlines()[-1].strip())


def _view(stack: ScriptStack, run_id: str) -> dict[str, Any]:
    return stack.h.rt.runs.view(run_id)


def _not_overlapping(stack: ScriptStack, runs: list[dict[str, Any]]) -> None:
    """Each run started after the one before it finished (the runs' own times)."""
    rows = [stack.h.rt.runs.get(v["run_id"]) for v in runs]
    spans = sorted((r.started_at, r.finished_at) for r in rows if r is not None)
    assert len(spans) == len(runs) and all(a is not None and b is not None for a, b in spans)
    for (_, prev_end), (start, _) in itertools.pairwise(spans):
        assert start >= prev_end, spans  # type: ignore[operator]


def test_one_deploy_at_a_time_the_second_waits_queued(live: ScriptStack) -> None:
    first = _trigger(live, "deploy-prod")
    second = _trigger(live, "deploy-prod")
    # The deploy holds at its gate until the test has seen the second one wait: a plain
    # `sleep` could end before a loaded machine gets to look.
    poll("the first deploy to run", lambda: _view(live, first)["status"] == "running")
    assert _view(live, second)["status"] == "queued"
    (live.folder / "gate").touch()
    runs = live.runs_of("deploy-prod", 2)
    assert [v["status"] for v in runs] == ["success", "success"], runs
    assert [v["run_id"] for v in runs] == [first, second]
    _not_overlapping(live, runs)
    spans = []
    for v in runs:
        [step] = v["steps"]
        out = step["output"]
        assert out["exit_code"] == 0, out
        m = re.fullmatch(r"deploy started (\S+)\ndeploy done (\S+)\n", out["stdout"])
        assert m, out
        spans.append((m.group(1), m.group(2)))
    assert spans[1][0] >= spans[0][1], spans


def test_a_script_workflow_starts_on_its_event(live: ScriptStack) -> None:
    res = live.cli("event", "emit", "greet", "--payload", '{"name":"x"}')
    assert res.exit_code == 0, res.output
    [view] = live.runs_of("greet", 1)
    assert view["status"] == "success", view
    assert log_of(view) == "hello x\n", view


def test_a_script_workflow_in_a_concurrency_group_queues(live: ScriptStack) -> None:
    first = _trigger(live, "serial")
    second = _trigger(live, "serial")
    runs = live.runs_of("serial", 2)
    assert [v["status"] for v in runs] == ["success", "success"], runs
    assert {v["run_id"] for v in runs} == {first, second}
    _not_overlapping(live, runs)
    spans = sorted(tuple(float(x) for x in re.findall(r"(?:start|end) (\S+)", log_of(v)))
                   for v in runs)
    assert all(len(s) == 2 for s in spans), [log_of(v) for v in runs]
    assert spans[1][0] >= spans[0][1], spans


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_submit_with_an_idempotency_key_answers_the_first_run(stack: ScriptStack) -> None:
    path = stack.recipe("enrich.sh")
    ids = []
    for _ in range(2):
        res = stack.cli("submit", path, "--idempotency-key", "K",
                        "--input", '{"tenant":"acme"}')
        assert res.exit_code == 0, res.output
        ids.append(res.output.strip())
    assert ids[0] == ids[1] and ids[0], ids
    res = stack.cli("submit", path, "--idempotency-key", "K", "--input", '{"tenant":"globex"}')
    assert res.exit_code == 2, res.output
    assert "Idempotency-Key 'K' was used with a different request body" in res.output, res.output
    [view] = stack.runs_of("enrich", 1)
    assert view["run_id"] == ids[0] and view["status"] == "success", view
    assert "called the CRM for acme" in log_of(view)


@pytest.mark.slow
def test_submit_with_a_throttle_queues_the_second_run_ten_seconds(stack: ScriptStack) -> None:
    path = stack.recipe("enrich.sh")
    ids = []
    for _ in range(2):
        res = stack.cli("submit", path, "--throttle", "6/1m", "--throttle-key", "crm-acme",
                        "--input", '{"tenant":"acme"}')
        assert res.exit_code == 0, res.output
        ids.append(res.output.strip())
    view = _view(stack, ids[1])
    assert view["status"] == "queued", view
    assert view["admission"]["throttle_key"] == "crm-acme", view
    runs = stack.runs_of("enrich", 2, timeout=40)
    assert [v["run_id"] for v in runs] == ids
    assert all(v["status"] == "success" for v in runs), runs
    assert all("called the CRM for acme" in log_of(v) for v in runs), runs
    rows = [stack.h.rt.runs.get(r) for r in ids]
    assert rows[0] is not None and rows[1] is not None
    assert rows[0].started_at is not None and rows[1].started_at is not None
    assert rows[1].started_at - rows[0].started_at >= 9.0, rows


def test_a_run_step_retries_its_command_only_when_it_declares_retry(
        env: WorkflowEnv, tmp_path: Path) -> None:
    # With `retry:`, a failing command is tried again after its backoff (5 s, on the
    # fake clock) and answers on its second try.
    run_id = env.start("retried", {"count": str(tmp_path / "a")})
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "success", view
    step = next(iter(view["steps"].values())) if isinstance(view["steps"], dict) \
        else view["steps"][0]
    assert step["output"]["stdout"] == "answered on try 2\n" and step["attempts"] == 2
    # Without it, as a reference pipeline's job without `retry:`, it runs once.
    once = env.start("once", {"count": str(tmp_path / "b")})
    env.run_until_idle()
    failed = env.view(once)
    assert failed["status"] == "failed"
    assert (tmp_path / "b").read_text().strip() == "1"
    assert "exit 75: not yet" in str(failed["error"]) or "exit 75: not yet" in str(
        failed["steps"])


def test_a_run_steps_values_are_never_shell_code(env: WorkflowEnv) -> None:
    evil = '$(touch pwned) `touch pwned2`; touch pwned3 "quoted"'
    run_id = env.start("quoted", {"text": evil})
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "success", view
    step = next(iter(view["steps"].values())) if isinstance(view["steps"], dict) \
        else view["steps"][0]
    out = step["output"]["stdout"].splitlines()
    assert out[0] == f"got {evil}"
    assert not [name for name in out[1:] if name.startswith("pwned")]  # nothing ran


@pytest.fixture
def recipes(emulator: Emulator) -> Iterator[WorkflowEnv]:
    """Reference 002's recipe scripts, served from functions/examples/scripts on the fake
    clock (a wait of days passes at once)."""
    recipes_dir = RECIPES
    with WorkflowEnv(ScriptHost(directory=recipes_dir).app, emulator=emulator) as env:
        yield env


def test_the_approval_script_escalates_when_nobody_answers(recipes: WorkflowEnv) -> None:
    # Both bounded waits time out (2 days, then 1): the lead is paged, the refund is left.
    run_id = recipes.start("approve")
    recipes.run_until_idle()
    log = recipes.result(run_id)["log"]
    # Each wait that timed out says so on stderr, which is in the log.
    assert log == ("orchestrator wait signal approve: timed out after 2d\n"
                   "no answer on the refund for order 1042, asking the team lead\n"
                   "orchestrator wait signal approve: timed out after 1d\n"
                   "nobody answered, refund for order 1042 left open\n")
    # The first wait times out, the lead approves within the day: refunded.
    second = recipes.start("approve")
    recipes.advance("2d")
    recipes.send_signal(second, "approve", {"by": "lead"})
    recipes.run_until_idle()
    assert recipes.result(second)["log"] == (
        "orchestrator wait signal approve: timed out after 2d\n"
        "no answer on the refund for order 1042, asking the team lead\n"
        '{"by":"lead"}\n'  # the signal's payload: the recipe leaves it on stdout
        "refunded order 1042\n")


def test_a_rejected_gate_stops_the_run_before_any_run_step(env: WorkflowEnv) -> None:
    # The stop a rejection is: the run is killed, naming who and why, and no `run:`
    # step below the gate runs its command.
    run_id = env.start("refund", {"order": "1042"})
    env.advance(0)
    env.rt.approvals.answer(run_id, "ask", False, "not this one", "ada")
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "killed", view
    assert "rejected by ada" in str(view["error"]) and "not this one" in str(view["error"])
    out = outputs(env, run_id)
    assert all(out.get(name) is None for name in ("escalate", "refund", "give-up")), out
