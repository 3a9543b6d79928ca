"""The `orchestrator` command against a real API over HTTP, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from functions.serving import BackgroundServer
from orchestrator.api import create_app
from orchestrator.cli import main
from tests.support.harness import Harness

ROOT = Path(__file__).resolve().parents[2]

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  broken:
    steps:
      nope: { backend: fn, route: /status, payload: { code: 400 } }
  sleepy:
    steps:
      nap: { backend: fn, route: /slow, payload: { seconds: 2 } }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_run_wait_json_and_show(api: tuple[Harness, str]) -> None:
    _, url = api
    res = cli("run", "chain", "--input", '{"n": 1}', "--wait", "--json", "--url", url)
    assert res.exit_code == 0, res.output
    view = json.loads(res.output)
    assert view["status"] == "success"
    res = cli("show", view["run_id"], "--json", "--url", url)
    shown = json.loads(res.output)
    assert set(shown) == {"run_id", "workflow", "status", "steps"}
    assert [set(s) for s in shown["steps"]] == [
        {"step", "status", "attempts", "output", "error"}] * 2
    assert shown["steps"][1]["output"]["input"] == {"n": 1}
    # by workflow name: the newest run
    res = cli("show", "chain", "--url", url, "--ascii")
    assert res.exit_code == 0 and view["run_id"] in res.output and "ok" in res.output
    res = cli("runs", "chain", "--json", "--url", url)
    assert json.loads(res.output)["runs"][0]["run_id"] == view["run_id"]


def test_run_wait_exits_1_on_failure(api: tuple[Harness, str]) -> None:
    _, url = api
    res = cli("run", "broken", "--wait", "--url", url)
    assert res.exit_code == 1
    assert "failed" in res.output


def test_kill(api: tuple[Harness, str]) -> None:
    h, url = api
    res = cli("run", "sleepy", "--url", url)
    run_id = res.output.strip()
    time.sleep(0.3)
    res = cli("kill", run_id, "--url", url)
    assert res.exit_code == 0, res.output
    view = h.wait(run_id)
    assert view["status"] == "killed"
    assert [s["status"] for s in view["steps"]] == ["success", "skipped"]
    again = cli("kill", run_id, "--url", url)
    assert again.exit_code == 2 and "already finished" in again.output


def test_usage_and_lookup_errors(api: tuple[Harness, str]) -> None:
    _, url = api
    assert cli("run", "chain", "--input", "{not json", "--url", url).exit_code == 2
    assert cli("run", "--url", url).exit_code == 2  # missing argument
    res = cli("run", "nosuch", "--url", url)
    assert res.exit_code == 4 and "nosuch" in res.output
    assert cli("show", "nosuch-run", "--url", url).exit_code == 4
    res = cli("run", "chain", "--url", "http://127.0.0.1:9")
    assert res.exit_code == 3 and "cannot reach" in res.output


def test_lint_ok_and_problems(tmp_path: Path) -> None:
    res = cli("lint", "--manifest", str(ROOT / "orchestrator.yml"))
    assert res.exit_code == 0, res.output
    bad = tmp_path / "bad.yml"
    bad.write_text("backends:\n  fn: { url: http://x }\nworkflows:\n  w:\n    steps:\n"
                   "      a: { backend: fn, route: /a, dependsOn: [b] }\n"
                   "      b: { backend: fn, route: /b, dependsOn: [a] }\n")
    res = cli("lint", "--manifest", str(bad))
    assert res.exit_code == 1
    assert ("bad.yml:" in res.output and "a -> b -> a" in res.output) or "b -> a -> b" in res.output
    assert cli("lint", "--manifest", str(tmp_path / "missing.yml")).exit_code == 2


def run_dev(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "dev", "--demo", "--exit-after-demo",
         "--manifest", str(ROOT / "orchestrator.yml"), "--port", "0", "--functions-port", "0",
         "--emulator-port", "0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORCH_"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.slow
def test_dev_demo_runs_the_monthly_report(tmp_path: Path) -> None:
    proc = run_dev(tmp_path, clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for word in ("emulator", "functions", "api", "workers", "orchestrator run monthly-report"):
        assert word in out
    assert "monthly-report" in out and "success" in out
    assert (tmp_path / ".orchestrator" / "work" / "outbox" / "slack.jsonl").exists()


@pytest.mark.slow
def test_dev_uses_aws_endpoint_url_instead_of_the_embedded_emulator(
    tmp_path: Path, emulator: Any
) -> None:
    env = clean_env() | {"AWS_ENDPOINT_URL": emulator.url, "ORCH_PREFIX": "devexternal"}
    proc = run_dev(tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"endpoint   {emulator.url}" in proc.stdout
    assert "emulator   " not in proc.stdout
    # the run lives in the external endpoint's tables
    from orchestrator.aws import make_clients
    from orchestrator.settings import Settings

    ddb = make_clients(Settings(endpoint_url=emulator.url)).dynamodb
    items = ddb.scan(TableName="devexternal-runs")["Items"]
    assert [i["status"]["S"] for i in items] == ["success"]
