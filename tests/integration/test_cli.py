"""The `orchestrator` command against a real API over HTTP, and its exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.cli.commands import main
from orchestrator.errors import NotFound
from tests.support.cli import cli, out_json
from tests.support.harness import Harness
from tests.support.polling import until
from tests.support.testfns import Recorder

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
  gated:
    steps:
      prepare: { backend: fn, route: /echo }
      check: { backend: fn, route: /gate, dependsOn: [prepare] }
  latched:
    steps:
      nap: { backend: fn, route: /latch }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  solo:
    concurrency: { group: solo }
    steps:
      hold: { backend: fn, route: /latch }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


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
    # As a diagram (orchestrator/cli/diagram.py): a box a step, a line between them.
    assert res.output.count("+" + "-" * 20) == 4 and "----->|" in res.output, res.output
    # As a waterfall: a row a step, each with at least one column of its call.
    res = cli("show", view["run_id"], "--timeline", "--url", url)
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.split()[:1] in (["one"], ["two"])]
    assert len(rows) == 2 and all("#" in row and " ok " in row for row in rows), res.output
    res = cli("runs", "chain", "--json", "--url", url)
    assert json.loads(res.output)["runs"][0]["run_id"] == view["run_id"]


def test_a_piped_timeline_of_a_short_run_counts_its_columns_in_ms(
        api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = h.start("chain", {})
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert view["finished_at"] - view["started_at"] < 5  # a short run: ms a column
    res = cli("show", run_id, "--timeline", "--url", url)  # piped: CliRunner is no tty
    assert res.exit_code == 0, res.output
    scale = re.search(r"\((\S+) a column\)", res.output)
    assert scale is not None, res.output
    assert re.fullmatch(r"\d+(\.\d+)?ms", scale.group(1)), res.output
    assert float(scale.group(1)[:-2]) > 0 and "0.00s" not in res.output, res.output


def test_run_wait_exits_1_on_failure(api: tuple[Harness, str]) -> None:
    _, url = api
    res = cli("run", "broken", "--wait", "--url", url)
    assert res.exit_code == 1
    assert "failed" in res.output


def test_kill(api: tuple[Harness, str], recorder: Recorder) -> None:
    h, url = api
    res = cli("run", "latched", "--url", url)
    run_id = res.output.strip()
    h.wait_for_step(run_id, "nap", ("dispatched",))  # in flight, held until it is killed
    res = cli("kill", run_id, "--url", url)
    assert res.exit_code == 0, res.output
    recorder.latch(run_id).set()
    view = h.wait(run_id)
    assert view["status"] == "killed"
    assert [s["status"] for s in view["steps"]] == ["success", "skipped"]
    again = cli("kill", run_id, "--url", url)
    assert again.exit_code == 2 and "already finished" in again.output


def test_help_lists_every_command() -> None:
    res = cli("--help")
    assert res.exit_code == 0
    for name in ("trigger", "run", "runs", "show", "cancel", "kill", "rerun", "history",
                 "event", "schedules", "webhook", "keys", "lint", "worker", "sweeper", "api",
                 "dev"):
        assert re.search(rf"^  {name} ", res.stdout, re.M), name
    assert "Exit codes:" in res.stdout and "5  authentication failed" in res.stdout


def test_trigger_with_an_idempotency_key_twice_is_one_run(api: tuple[Harness, str]) -> None:
    h, url = api
    first = cli("trigger", "chain", "--idempotency-key", "order-7", "--input", '{"n": 7}',
                "--url", url)
    assert first.exit_code == 0, first.output
    run_id = first.stdout.strip()
    again = cli("trigger", "chain", "--idempotency-key", "order-7", "--input", '{"n": 7}',
                "--json", "--url", url)
    started = out_json(again)
    assert started == {"run_id": run_id, "workflow": "chain", "status": started["status"],
                       "created": False, "duplicate": True, "debounced": False,
                       "outcome": "duplicate"}
    assert h.wait(run_id)["trigger"] == {"source": "api", "idempotency_key": "order-7"}
    # the same key with another body is refused (422): a usage error
    other = cli("trigger", "chain", "--idempotency-key", "order-7", "--input", '{"n": 8}',
                "--url", url)
    assert other.exit_code == 2, other.output
    # without a key, each trigger is a new run
    a = cli("trigger", "chain", "--url", url).stdout.strip()
    b = cli("trigger", "chain", "--url", url).stdout.strip()
    assert a != b and run_id not in (a, b)


def test_trigger_wait_waits_while_the_run_is_queued(api: tuple[Harness, str],
                                                    recorder: Recorder) -> None:
    h, url = api
    # Each run holds the group until the test opens its latch: a sleep could end before
    # a loaded machine has looked at the queue.
    first = cli("trigger", "solo", "--url", url).stdout.strip()
    second = cli("trigger", "solo", "--json", "--url", url)
    queued = out_json(second)
    assert queued["status"] == "queued"  # the group is busy with the first run
    listed = out_json(cli("runs", "solo", "--status", "queued", "--json", "--url", url))
    assert [r["run_id"] for r in listed["runs"]] == [queued["run_id"]]
    text = cli("runs", "solo", "--url", url).stdout
    assert re.search(rf"^wait queued .*{queued['run_id']}\s+api$", text, re.M), text
    # a third run queues behind the second: --wait keeps polling through `queued`
    recorder.latch(first).set()
    until("the second run to hold the group",
          lambda: h.rt.runs.view(queued["run_id"])["status"] == "running")
    third = f"solo-third-{uuid.uuid4().hex[:8]}"
    recorder.latch(third).set()  # its turn comes once the second has ended
    seen: list[str] = []

    def once_the_third_waits() -> None:
        seen.append(until("the third run queued", lambda: _status(h, third) == "queued"))
        recorder.latch(queued["run_id"]).set()

    opener = threading.Thread(target=once_the_third_waits, daemon=True)
    opener.start()
    view = out_json(cli("trigger", "solo", "--run-id", third, "--wait", "--json",
                        "--url", url))
    opener.join(timeout=30)
    assert seen == [True]
    assert view["status"] == "success" and view["run_id"] == third
    assert h.wait(first)["finished_at"] < h.wait(queued["run_id"])["finished_at"] <= view[
        "finished_at"]


def _status(h: Harness, run_id: str) -> str | None:
    try:
        return str(h.rt.runs.view(run_id)["status"])
    except NotFound:
        return None


def test_runs_of_every_workflow_by_status_and_page(api: tuple[Harness, str]) -> None:
    h, url = api
    ok = h.wait(out_json(cli("trigger", "chain", "--json", "--url", url))["run_id"])
    bad = h.wait(out_json(cli("trigger", "broken", "--json", "--url", url))["run_id"])
    everything = out_json(cli("runs", "--json", "--url", url))
    assert set(everything) == {"runs", "next_cursor"} and everything["next_cursor"] is None
    assert [r["run_id"] for r in everything["runs"]] == [bad["run_id"], ok["run_id"]]
    assert set(everything["runs"][0]) == {"run_id", "workflow", "status", "created_at",
                                          "started_at", "finished_at", "trigger", "rerun_of"}
    failed = out_json(cli("runs", "--status", "failed", "--json", "--url", url))["runs"]
    assert [(r["workflow"], r["status"]) for r in failed] == [("broken", "failed")]
    assert out_json(cli("runs", "chain", "--status", "failed", "--json", "--url", url)) == {
        "runs": [], "next_cursor": None}
    # pages: the cursor hint goes to stderr, the listing to stdout
    page = cli("runs", "--limit", "1", "--url", url)
    assert page.exit_code == 0
    assert bad["run_id"] in page.stdout and ok["run_id"] not in page.stdout
    cursor = re.search(r"--cursor (\S+)", page.stderr)
    assert cursor, page.stderr
    rest = out_json(cli("runs", "--cursor", cursor.group(1), "--json", "--url", url))
    assert [r["run_id"] for r in rest["runs"]] == [ok["run_id"]]
    text = cli("runs", "--url", url).stdout
    assert re.search(rf"FAIL failed .* broken\s+{bad['run_id']}\s+api$", text, re.M), text
    assert cli("runs", "--status", "nosuch", "--url", url).exit_code == 2
    assert cli("runs", "--cursor", "garbage", "--url", url).exit_code == 2


def test_cancel_a_running_run_then_a_finished_one(api: tuple[Harness, str],
                                                  recorder: Recorder) -> None:
    h, url = api
    run_id = cli("trigger", "latched", "--url", url).stdout.strip()
    h.wait_for_step(run_id, "nap", ("dispatched",))  # in flight, held until cancelled
    res = cli("cancel", run_id, "--reason", "wrong input", "--url", url)
    assert res.exit_code == 0, res.output
    recorder.latch(run_id).set()
    assert f"{run_id}: cancel requested" in res.stdout
    view = h.wait(run_id)
    assert view["status"] == "killed" and view["kill_reason"] == "wrong input"
    again = cli("cancel", run_id, "--url", url)
    assert again.exit_code == 2 and "already finished (killed)" in again.stderr
    assert cli("cancel", "nosuch-run", "--url", url).exit_code == 4


def test_rerun_reuses_what_succeeded(api: tuple[Harness, str]) -> None:
    h, url = api
    res = cli("trigger", "gated", "--input", '{"ok": false}', "--wait", "--url", url)
    assert res.exit_code == 1 and "failed" in res.stdout
    old = re.search(r"(gated-\S+)", res.stdout)
    assert old
    old_id = old.group(1)
    # the same input fails again: exit 1, and the new run says where it came from
    res = cli("rerun", old_id, "--wait", "--url", url)
    assert res.exit_code == 1 and f"rerun of {old_id}" in res.stdout, res.output
    # a new input, a chosen id: success, with `prepare` reused, not run again
    res = cli("rerun", old_id, "--input", '{"ok": true}', "--run-id", "gated-fixed",
              "--wait", "--json", "--url", url)
    view = out_json(res)
    assert (view["run_id"], view["status"], view["rerun_of"]) == ("gated-fixed", "success",
                                                                  old_id)
    assert view["input"] == {"ok": True}
    assert view["trigger"] == {"source": "rerun", "run_id": old_id}
    events = out_json(cli("history", "gated-fixed", "--json", "--url", url))["events"]
    assert {"step": "prepare", "type": "step.reused"}.items() <= next(
        e for e in events if e.get("step") == "prepare").items()
    # without --wait: just the new id
    res = cli("rerun", old_id, "--url", url)
    assert res.exit_code == 0 and res.stdout.strip().startswith("gated-")
    h.wait(res.stdout.strip())
    # refused: a run that succeeded (409 → exit 2), one that does not exist (4)
    res = cli("rerun", "gated-fixed", "--url", url)
    assert res.exit_code == 2 and "succeeded" in res.stderr
    assert cli("rerun", "nosuch-run", "--url", url).exit_code == 4


def test_rerun_of_a_running_run_is_refused(api: tuple[Harness, str],
                                           recorder: Recorder) -> None:
    h, url = api
    run_id = cli("trigger", "latched", "--url", url).stdout.strip()  # held: still running
    res = cli("rerun", run_id, "--url", url)
    assert res.exit_code == 2 and "still running" in res.stderr, res.output
    recorder.latch(run_id).set()
    h.wait(run_id)


def test_history_lists_every_transition(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = cli("trigger", "chain", "--url", url).stdout.strip()
    h.wait(run_id)
    data = out_json(cli("history", run_id, "--json", "--url", url))
    assert data["run_id"] == run_id
    kinds = [(e["type"], e.get("step")) for e in data["events"]]
    assert kinds[0] == ("run.running", None) and kinds[-1] == ("run.success", None)
    assert ("step.started", "one") in kinds and ("step.succeeded", "two") in kinds
    assert kinds.index(("step.succeeded", "one")) < kinds.index(("step.started", "two"))
    started = next(e for e in data["events"] if e["type"] == "step.started")
    assert started["attempt"] == 1 and isinstance(started["at"], float)
    text = cli("history", run_id, "--url", url)
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert re.fullmatch(r"-- \d{4}-\d\d-\d\d --", lines[0])
    assert len(lines) == len(data["events"]) + 1
    assert any(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}  step\.started\s+one\s+attempt 1", line)
               for line in lines), text.stdout
    assert "by api" in lines[1]
    assert cli("history", "nosuch-run", "--url", url).exit_code == 4


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


def run_dev(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "dev", "--demo", "--exit-after-demo",
         "--manifest", str(ROOT / "orchestrator.yml"), "--port", "0", "--functions-port", "0",
         "--scripts-port", "0",
         "--emulator-port", "0", *args],
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
    for word in ("emulator", "functions", "api", "workers", "orchestrator trigger monthly-report",
                 "export ORCHESTRATOR_URL=", "ORCHESTRATOR_API_KEY=ok_",
                 "Authorization: Bearer $ORCHESTRATOR_API_KEY"):
        assert word in out
    assert "monthly-report" in out and "success" in out
    assert (tmp_path / ".orchestrator" / "work" / "outbox" / "slack.jsonl").exists()


@pytest.mark.slow
def test_dev_runs_its_emulator_in_a_process_of_its_own_unless_asked_not_to(
    tmp_path: Path
) -> None:
    own = run_dev(tmp_path, clean_env())
    kept = run_dev(tmp_path, clean_env(), "--emulator-in-process")
    for proc in (own, kept):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "monthly-report" in proc.stdout and "success" in proc.stdout
    assert " · its own process, over a socket" in own.stdout
    assert " · in-process calls" in kept.stdout and "its own process" not in kept.stdout


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
    from orchestrator.adapters.aws import make_clients
    from orchestrator.settings import Settings

    ddb = make_clients(Settings(endpoint_url=emulator.url)).dynamodb
    items = ddb.scan(TableName="devexternal-runs")["Items"]
    assert [i["status"]["S"] for i in items] == ["success"]


def test_api_command_serves_the_api_alone(
    harness_factory: Any, emulator: Any, testfns: str, tmp_path: Path
) -> None:
    import socket

    import httpx

    h = harness_factory(MANIFEST)
    manifest = tmp_path / "api.yml"
    manifest.write_text(MANIFEST)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ENDPOINT_URL": emulator.url, "ORCH_PREFIX": h.rt.settings.prefix,
           "ORCH_API_AUTH": "off", "FN": testfns, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "api", "--manifest", str(manifest),
         "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "orchestrator api never answered"
            time.sleep(0.05)
        started = httpx.post(url + "/runs", json={"workflow": "chain", "input": {}}, timeout=5)
        assert started.status_code == 201, started.text
        # no worker runs inside `orchestrator api`: the run waits for one
        h.start_workers()
        assert h.wait(started.json()["run_id"])["status"] == "success"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sweeper_once_resends_a_lost_dispatch(
    harness_factory: Any, emulator: Any, testfns: str, tmp_path: Path
) -> None:
    h = harness_factory(MANIFEST)
    manifest = tmp_path / "sweep.yml"
    manifest.write_text(MANIFEST)
    h.rt.queues.tamper = lambda msgs: []  # the start's dispatch is lost
    run_id = h.start("chain")
    h.rt.queues.tamper = None
    env = {"AWS_ENDPOINT_URL": emulator.url, "ORCH_PREFIX": h.rt.settings.prefix,
           "ORCH_REDISPATCH_AFTER": "1", "ORCH_WAKE_LAG": "0.1", "FN": testfns}
    runner = CliRunner()
    deadline = time.monotonic() + 20
    while True:  # the root's wake (sent + 1 s) passes, then one sweep sends it again
        res = runner.invoke(main, ["sweeper", "--once", "--all", "--manifest", str(manifest)],
                            env=env, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        if json.loads(res.stdout)["redispatched"]:
            break
        assert time.monotonic() < deadline, res.output
        time.sleep(0.2)
    h.start_workers()
    assert h.wait(run_id)["status"] == "success"
    res = runner.invoke(main, ["sweeper", "--all", "--manifest", str(manifest)], env=env)
    assert res.exit_code == 2 and "--all goes with --once" in res.output
