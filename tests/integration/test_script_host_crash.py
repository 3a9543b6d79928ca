"""A script host killed (SIGKILL) in the middle of a script: the run goes on from its
last checkpoint on the host started again, and no step whose checkpoint was committed
runs twice (the step that was running may: at least once, under the same key)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.harness import BuildHarness

SCRIPT = """
orchestrator step one -- sh -c 'echo one >> "$1/effects"' _ "$DIR"
orchestrator step two -- sh -c 'echo two >> "$1/effects"
  while [ ! -f "$1/gate" ]; do sleep 0.05; done' _ "$DIR"
orchestrator step three -- sh -c 'echo three >> "$1/effects"' _ "$DIR"
echo finished
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _host(port: int, secret: str, folder: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.script_host_main", str(port),
                             secret], env={**os.environ, "DIR": str(folder)},
                            cwd=Path(__file__).resolve().parents[2])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the script host did not start")


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_host_killed_mid_script_resumes_from_the_last_checkpoint(
        build_harness: BuildHarness, tmp_path: Path) -> None:
    port, secret = _port(), secrets.token_hex(8)
    manifest = f"""
backends:
  scripts: {{ url: "http://127.0.0.1:{port}", secret: "{secret}", capabilities: [shell] }}
workflows:
  noop:
    steps:
      one: {{ run: "true" }}
"""
    host = _host(port, secret, tmp_path)
    h = build_harness(manifest, tmp_path, {})
    try:
        h.start_workers(1, threads=4)
        h.start_sweeper()
        with BackgroundServer(create_app(h.rt)) as api:
            started = httpx.post(f"{api.url}/scripts/runs",
                                 json={"name": "crash", "text": SCRIPT}).json()
            run_id = started["run_id"]
            effects = tmp_path / "effects"
            deadline = time.monotonic() + 30
            while _lines(effects) != ["one", "two"]:
                assert time.monotonic() < deadline, _lines(effects)
                time.sleep(0.02)
            # Kill the host with step two's command running, once step one's checkpoint
            # is committed (the journal shows it).
            while not any(e.get("name") == "one" for e in
                          httpx.get(f"{api.url}/runs/{run_id}/journal").json()["journal"]):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            host.send_signal(signal.SIGKILL)
            host.wait()
            (tmp_path / "gate").touch()  # the orphaned step's command may end now
            host = _host(port, secret, tmp_path)
            view = h.wait(run_id, timeout=60)
            assert view["status"] == "success", view
            assert "finished" in view["output"]["log"]
            ran = _lines(effects)
            assert ran.count("one") == 1 and ran.count("three") == 1, ran
            assert ran.count("two") in (1, 2)  # the running step: at least once
    finally:
        h.close()
        host.kill()
        host.wait()
