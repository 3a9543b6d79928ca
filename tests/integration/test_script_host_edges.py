"""The script host where a script does what it should not count on: a step or a script
leaving a background job (the call ends, the job is killed with its group), reading the
host's secrets (it gets none), naming a path for a script; and the Lambda form refusing
to serve unsigned calls."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from functions.sdk.scripts import ScriptHost
from functions.sdk.scripts.commands import parse
from functions.sdk.scripts.lambda_host import create_app
from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.testing import WorkflowEnv

SCRIPTS = {
    # A step whose command leaves a job holding its output open: the step ends with its
    # command, and the job dies with the command's process group.
    "leaver": 'orchestrator step bg -- sh -c \'sleep 30 & echo "$!" > "$0"; echo done\' "$PIDS"\n'
              "echo after\n",
    # A script that ends leaving a job behind.
    "ender": "sleep 30 &\necho bye\n",
    # A step past its own timeout: killed, recorded as exit 124, the same on replay.
    "slow": "rc=0\norchestrator step slow --timeout 1s -- sleep 30 || rc=$?\n"
            "orchestrator sleep 1h\necho \"rc=$rc\"\n",
    "secrets": 'echo "fs=${FUNCTIONS_SECRET-unset} ss=${SCRIPTS_SECRET-unset}'
               ' ws=${WEBHOOK_SECRET-unset} keep=${KEEP_ME-unset}"\n',
}


@pytest.fixture
def env(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[WorkflowEnv]:
    for name, text in SCRIPTS.items():
        (tmp_path / f"{name}.sh").write_text(text)
    monkeypatch.setenv("PIDS", str(tmp_path / "pid"))
    monkeypatch.setenv("FUNCTIONS_SECRET", "fn-secret")
    monkeypatch.setenv("SCRIPTS_SECRET", "sc-secret")
    monkeypatch.setenv("WEBHOOK_SECRET", "wh-secret")
    monkeypatch.setenv("KEEP_ME", "kept")
    host = ScriptHost(secret="s3cret", directory=tmp_path)
    with WorkflowEnv(host.app, secret="s3cret", emulator=emulator) as e:
        yield e


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_step_leaving_a_background_job_ends_with_its_command(env: WorkflowEnv,
                                                               tmp_path: Path) -> None:
    started = time.monotonic()
    run_id = env.start("leaver")
    env.run_until_idle()
    assert env.result(run_id)["log"] == "done\nafter\n"
    assert time.monotonic() - started < 20  # not the job's 30 s
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, f"background job {pid} still alive"
        time.sleep(0.05)


def test_a_script_leaving_a_background_job_ends_its_call(env: WorkflowEnv) -> None:
    started = time.monotonic()
    run_id = env.start("ender")
    env.run_until_idle()
    assert env.result(run_id)["log"] == "bye\n"
    assert time.monotonic() - started < 20


def test_a_script_gets_none_of_the_hosts_secrets(env: WorkflowEnv) -> None:
    run_id = env.start("secrets")
    env.run_until_idle()
    assert env.result(run_id)["log"] == "fs=unset ss=unset ws=unset keep=kept\n"
    assert os.environ["FUNCTIONS_SECRET"] == "fn-secret"  # the host's own are untouched


def test_a_script_name_is_never_a_path(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "x.sh").write_text("echo escaped\n")
    host = ScriptHost(directory=tmp_path / "inner" / ".." / "inner")
    body = {"run": {"run_id": "r", "started_at": 1.0, "now": 1.0}, "journal": []}
    with BackgroundServer(host.app) as server:
        for name in ("..%2Finner%2Fx", "a/b", "%2E%2E"):
            r = httpx.post(f"{server.url}/durable/{name}", json=body)
            assert r.status_code == 404, (name, r.text)
        assert httpx.post(f"{server.url}/durable/x", json=body).status_code == 200


def test_the_lambda_host_refuses_to_serve_without_a_secret() -> None:
    with pytest.raises(RuntimeError, match="SCRIPTS_SECRET is empty"):
        create_app(None)
    assert create_app("a-secret") is not None


def test_a_step_past_its_timeout_is_killed_and_fails_with_124(env: WorkflowEnv) -> None:
    started = time.monotonic()
    run_id = env.start("slow")
    env.run_until_idle()
    # The sleep after it replays the script: the recorded failure answers again.
    assert env.result(run_id)["log"] == "sleep: timed out after 1s\nrc=124\n"
    assert time.monotonic() - started < 20  # not the command's 30 s
    assert parse(["step", "x", "--timeout", "2m", "--", "true"]).timeout == 120
