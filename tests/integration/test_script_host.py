"""Durable shell scripts end to end: bash scripts served by a ScriptHost (real uvicorn),
driven by the real engine on moto through WorkflowEnv (a fake clock: a sleep of an hour
costs nothing), each in-script command answered over the host's channel."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.sdk.scripts import ScriptHost
from infra.emulator import Emulator
from orchestrator.testing import RunFailed, WorkflowEnv

# `field NAME`: a field of the run's input. Scripts with side effects count them in a
# file of the directory given as `dir`.
FIELD = """field() {
  python3 -c 'import json, os, sys
print(json.load(open(os.environ["ORCHESTRATOR_INPUT_FILE"]))["payload"][sys.argv[1]])' "$1"
}
"""
READ_DIR = FIELD + 'dir="$(field dir)"\n'

SCRIPTS = {
    # Two steps around a sleep: each step's command appends to a file once.
    "chain": READ_DIR + """
echo "begin"
a="$(orchestrator step first --label "The first" \\
  -- sh -c 'echo one; echo first >> "$1/effects"' _ "$dir")"
orchestrator sleep 1h
b="$(orchestrator step second -- sh -c 'echo two; echo second >> "$1/effects"' _ "$dir")"
echo "done $a $b"
""",
    # A failing step caught by the script: its exit status survives a replay.
    "failing": READ_DIR + """
rc=0
orchestrator step boom \\
  -- sh -c 'echo tried >> "$1/effects"; echo "no luck" >&2; exit 7' _ "$dir" || rc=$?
orchestrator sleep 5m
echo "rc=$rc"
""",
    "waiter": """
if got="$(orchestrator wait signal approve --timeout 2d)"; then
  echo "approved: $got"
else
  echo "no answer"
fi
""",
    "upgrade": """
if got="$(orchestrator wait event plan.upgraded --timeout 1d)"; then
  echo "upgraded: $got"
else
  echo "trial over"
fi
""",
    "forever": """
got="$(orchestrator wait signal go)"
echo "went: $got"
""",
    "claim": """
rc=0
orchestrator state add order-1042 --entity orders || rc=$?
case $rc in
  0) echo "claimed" ;;
  3) echo "already handled"; exit 0 ;;
  *) exit 1 ;;
esac
""",
    "cells": """
mine="$(orchestrator state incr "ticket:acme" --entity reindex --op ticket)"
orchestrator sleep 5s
orchestrator state set note "hello world" --entity reindex
echo "mine=$mine now=$(orchestrator state get "ticket:acme" --entity reindex)"
echo "note=$(orchestrator state get note --entity reindex)"
echo "empty=[$(orchestrator state get nothing --entity reindex)]"
""",
    "locked": READ_DIR + """
orchestrator lock customer-acme -- sh -c 'echo inside; echo locked >> "$1/effects"' _ "$dir"
orchestrator lock held
echo "after"
""",
    "child": FIELD + """
echo $(( $(field n) * 2 ))
""",
    "parent": """
out="$(orchestrator call child --input '{"n": 21}')"
echo "called: $out"
id="$(orchestrator spawn child --input '{"n": 1}')"
echo "spawned: $id"
""",
    "bad-exit": """
echo "about to fail"
echo "oops" >&2
exit 4
""",
    "too-big": """
orchestrator step big -- sh -c 'head -c 17000000 /dev/zero | tr "\\0" a'
echo "not reached"
""",
    "misuse": """
orchestrator step x --nope -- true
""",
    "nested": """
orchestrator step outer -- bash -c 'orchestrator sleep 1s'
""",
    # Rewritten by the mismatch test while its run waits.
    "changing": """
orchestrator step a -- echo a
orchestrator wait signal go
""",
    "fanout": """
orchestrator activity submit probe --attempts 2 --backoff 5s -- sh -c 'echo probed'
orchestrator activity wait probe
echo "collected"
""",
}


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("scripts")
    for name, text in SCRIPTS.items():
        (where / f"{name}.sh").write_text(text)
    return where


def _run_step(command: str) -> dict[str, Any]:
    """A YAML workflow of one `run:` step, as the host's /run route serves it."""
    return {"steps": {"sh": {"backend": "app", "route": "/run", "payload": {"command": command}}}}


@pytest.fixture(scope="module")
def env(emulator: Emulator, scripts: Path) -> Iterator[WorkflowEnv]:
    host = ScriptHost(secret="script-secret", directory=scripts)
    dags = {
        "ghost": {"backend": "app", "workflow": "ghost"},
        "activity.shell": {"backend": "app", "workflow": "activity"},
        "shell": _run_step('echo "hi $(cat "$ORCHESTRATOR_INPUT_FILE")"'),
        "shellfail": _run_step("echo out; echo bad >&2; exit 3"),
    }
    with WorkflowEnv(host.app, secret="script-secret", emulator=emulator, dags=dags) as e:
        yield e


def _effects(d: Path) -> list[str]:
    f = d / "effects"
    return f.read_text().split() if f.exists() else []


def _failure(env: WorkflowEnv, run_id: str) -> Any:
    with pytest.raises(RunFailed) as info:
        env.result(run_id)
    return info.value.error


def test_steps_are_recorded_and_replayed_after_a_sleep_without_running_again(
        env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("chain", {"dir": str(tmp_path)})
    env.run_until_idle()
    out = env.result(run_id)
    assert out["exit_code"] == 0
    # The pass after the sleep replays the first step (printing it again): every line once.
    assert out["log"] == "begin\ndone one two\n"
    assert _effects(tmp_path) == ["first", "second"]
    journal = env.journal(run_id)
    assert [e["kind"] for e in journal] == ["script", "step", "sleep", "step"]
    assert journal[0]["name"] == hashlib.sha256(SCRIPTS["chain"].encode()).hexdigest()
    assert journal[1]["value"]["stdout"] == "one\n"
    assert journal[1]["label"] == journal[1]["value"]["label"] == "The first"


def test_a_failed_steps_exit_status_survives_replay(env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("failing", {"dir": str(tmp_path)})
    env.run_until_idle()
    out = env.result(run_id)
    assert out["log"] == "no luck\nrc=7\n"
    assert _effects(tmp_path) == ["tried"]
    boom = next(e for e in env.journal(run_id) if e["name"] == "boom")
    assert boom["status"] == "error" and boom["attempts"] == 1
    assert boom["error"]["details"]["exit_code"] == 7


def test_a_signal_wait_gets_the_payload(env: WorkflowEnv) -> None:
    run_id = env.start("waiter")
    env.advance("1h")
    assert env.status(run_id) == "running"
    env.send_signal(run_id, "approve", {"by": "ann"})
    env.run_until_idle()
    assert env.result(run_id)["log"] == 'approved: {"by":"ann"}\n'


def test_a_signal_wait_times_out_with_exit_1_and_a_line_on_stderr(env: WorkflowEnv) -> None:
    run_id = env.start("waiter")
    env.run_until_idle()  # two days pass at once
    log = env.result(run_id)["log"]
    assert "timed out" in log and log.endswith("no answer\n")


def test_an_event_wait_prints_the_events_data_or_times_out(env: WorkflowEnv) -> None:
    run_id = env.start("upgrade")
    env.advance("1h")
    env.emit("plan.upgraded", {"plan": "pro"})
    env.run_until_idle()
    assert env.result(run_id)["log"] == 'upgraded: {"plan":"pro"}\n'
    env.advance("1s")  # the fake clock stands still: the next run starts after the event
    late = env.start("upgrade")
    env.run_until_idle()
    assert env.result(late)["log"].endswith("timed out after 1d\ntrial over\n")


def test_state_add_exits_3_for_the_second_claim(env: WorkflowEnv) -> None:
    first, second = env.start("claim"), env.start("claim")
    env.run_until_idle()
    logs = sorted([env.result(first)["log"], env.result(second)["log"]])
    assert logs == ["already handled\n", "claimed\n"]


def test_state_incr_get_and_set(env: WorkflowEnv) -> None:
    run_id = env.start("cells")
    env.run_until_idle()
    log = env.result(run_id)["log"]
    assert "mine=1 now=1\n" in log
    assert "note=hello world\n" in log and "empty=[]\n" in log
    ticket = next(e for e in env.journal(run_id) if e["kind"] == "state")
    assert ticket["name"] == "ticket" and ticket["value"] == 1


def test_a_lock_with_a_command_runs_it_as_a_step_between_acquire_and_release(
        env: WorkflowEnv, tmp_path: Path) -> None:
    run_id = env.start("locked", {"dir": str(tmp_path)})
    env.run_until_idle()
    assert env.result(run_id)["log"] == "inside\nafter\n"
    assert _effects(tmp_path) == ["locked"]
    kinds = [(e["kind"], e["name"]) for e in env.journal(run_id)][1:]
    assert kinds == [("lock", "customer-acme"), ("step", "customer-acme"),
                     ("lock", "customer-acme"), ("lock", "held")]


def test_call_and_spawn_another_script(env: WorkflowEnv) -> None:
    run_id = env.start("parent")
    env.run_until_idle()
    log = env.result(run_id)["log"]
    assert 'called: {"exit_code":0,"log":"42\\n"}\n' in log
    spawned = log.split("spawned: ")[1].strip()
    assert env.result(spawned) == {"exit_code": 0, "log": "2\n"}


def test_a_changed_script_on_replay_pauses_the_run_with_a_mismatch(
        env: WorkflowEnv, scripts: Path) -> None:
    path = scripts / "changing.sh"
    run_id = env.start("changing")
    env.run_until_idle()
    path.write_text("orchestrator step b -- echo b\norchestrator wait signal go\n")
    env.send_signal(run_id, "go")
    env.run_until_idle()
    assert env.status(run_id) == "paused"
    assert "mismatch" in str(env.view(run_id).get("waiting") or env.view(run_id))


def test_a_script_that_exits_non_zero_fails_the_run_with_its_log(env: WorkflowEnv) -> None:
    run_id = env.start("bad-exit")
    env.run_until_idle()
    error = _failure(env, run_id)
    assert error["message"] == "script exited 4"
    assert error["details"] == {"exit_code": 4, "log": "about to fail\noops\n"}


def test_an_unknown_script_fails_clearly(env: WorkflowEnv) -> None:
    run_id = env.start("ghost")
    env.run_until_idle()
    error = _failure(env, run_id)
    assert "no script named 'ghost'" in error["message"]


def test_a_step_output_over_the_cap_fails_clearly(env: WorkflowEnv) -> None:
    run_id = env.start("too-big")
    env.run_until_idle()
    error = _failure(env, run_id)
    assert error["message"] == "script exited 1"
    assert "output_too_large" in error["details"]["log"]
    assert "not reached" not in error["details"]["log"]


def test_a_wrong_flag_exits_2_with_a_message(env: WorkflowEnv) -> None:
    run_id = env.start("misuse")
    env.run_until_idle()
    error = _failure(env, run_id)
    assert error["details"]["exit_code"] == 2
    assert "unknown flag --nope" in error["details"]["log"]


def test_a_command_from_inside_a_steps_command_is_refused(env: WorkflowEnv) -> None:
    run_id = env.start("nested")
    env.run_until_idle()
    error = _failure(env, run_id)
    assert "refused" in error["details"]["log"] and "'outer'" in error["details"]["log"]


def test_the_run_route_answers_the_commands_output(env: WorkflowEnv) -> None:
    run_id = env.start("shell", {"x": 1})
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "success", view
    out = next(iter(s["output"] for s in view["steps"].values())) \
        if isinstance(view["steps"], dict) else view["steps"][0]["output"]
    assert out == {"stdout": 'hi {"payload": {"x": 1}}\n', "stderr": "", "exit_code": 0}


def test_the_run_route_fails_with_the_exit_status(env: WorkflowEnv) -> None:
    run_id = env.start("shellfail")
    env.run_until_idle()
    view = env.view(run_id)
    assert view["status"] == "failed", view
    assert "exit 3: bad" in json.dumps(view)


def test_the_activity_workflow_retries_listed_exit_codes_with_backoff(
        env: WorkflowEnv, tmp_path: Path) -> None:
    count = tmp_path / "n"
    flaky = ["sh", "-c", 'n=$(($(cat "$1" 2>/dev/null || echo 0) + 1)); echo $n > "$1";'
             ' [ $n -ge 3 ] && echo ok || exit 75', "_", str(count)]
    run_id = env.start("activity", {"name": "fetch", "argv": flaky, "attempts": 5,
                                    "backoff": 2, "retry_on_exit": [75]})
    started = env.now
    env.run_until_idle()
    assert env.result(run_id) == {"stdout": "ok\n", "stderr": "", "exit_code": 0}
    assert count.read_text().strip() == "3"
    assert env.now - started >= 6  # waited 2 s, then 4 s
    other = env.start("activity", {"name": "bad", "argv": ["sh", "-c", "exit 64"],
                                   "attempts": 5, "backoff": 1, "retry_on_exit": [75]})
    env.run_until_idle()
    error = _failure(env, other)
    assert error["details"]["exit_code"] == 64


def test_activity_submit_spawns_the_child_and_wait_prints_its_outcome(
        env: WorkflowEnv) -> None:
    run_id = env.start("fanout")
    env.run_until_idle()
    spawn = next(e for e in env.journal(run_id) if e["kind"] == "spawn")
    child = spawn["value"]["run_id"]
    assert env.result(child) == {"stdout": "probed\n", "stderr": "", "exit_code": 0}
    # The child's end signalled its parent (`notify`): the wait collected its output.
    assert env.result(run_id)["log"] == "probed\ncollected\n"


def test_a_call_carrying_the_script_text_runs_it_and_a_wrong_hash_is_refused(
        env: WorkflowEnv) -> None:
    text = "echo from-ref\n"
    ref = {"name": "inline", "sha256": hashlib.sha256(text.encode()).hexdigest(),
           "text": text}
    body = {"run": {"run_id": "r-inline", "started_at": env.now, "now": env.now},
            "input": None, "journal": [], "protocol": 1, "script": ref}
    host = ScriptHost(directory=None)
    from functions.sdk.serving import BackgroundServer

    with BackgroundServer(host.app) as server:
        answer = httpx.post(f"{server.url}/durable/anything", json=body).json()
        assert answer["ops"][-1] == {"op": "complete",
                                     "value": {"exit_code": 0, "log": "from-ref\n"}}
        assert answer["ops"][0]["entry"]["kind"] == "script"
        wrong = {**body, "script": {**ref, "sha256": "0" * 64}}
        answer = httpx.post(f"{server.url}/durable/anything", json=wrong).json()
        assert answer["ops"][-1]["op"] == "fail"
        assert answer["ops"][-1]["error"]["code"] == "script_hash_mismatch"
