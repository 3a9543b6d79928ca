"""`orchestrator --version`, `orchestrator doctor` and the `dev` banner's emulator line, as
a user runs them: real processes against a real `orchestrator dev` (its emulator, its
functions, its API), a real closed port, a real broken manifest."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli import ROOT, clean_env

MANIFEST = ROOT / "orchestrator.yml"
SECTIONS = {"ok", "versions", "emulator", "endpoints", "manifest", "backends"}


def orchestrator(*args: str, env: dict[str, str] | None = None,
                 cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          env=clean_env() if env is None else env, capture_output=True,
                          text=True, timeout=90)


def closed_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class Dev:
    """An `orchestrator dev` process and what its banner said."""

    lines: list[str]
    emulator: str
    functions: str
    api: str
    key: str

    def env(self) -> dict[str, str]:
        """A shell's environment as the banner tells a user to set it up."""
        return clean_env() | {"AWS_ENDPOINT_URL": self.emulator, "ORCHESTRATOR_URL": self.api,
                              "ORCHESTRATOR_API_KEY": self.key, "FUNCTIONS_URL": self.functions}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("doctor")
    with (tmp / "stderr.txt").open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "dev", "--manifest", str(MANIFEST),
             "--port", "0", "--functions-port", "0", "--scripts-port", "0", "--emulator-port", "0"],
            cwd=tmp, env=clean_env(), stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines: list[str] = []
        ready = threading.Event()

        def read() -> None:  # drains stdout for the life of the process
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("Ready."):
                    ready.set()
            ready.set()  # it ended: stop waiting

        threading.Thread(target=read, daemon=True).start()
        try:
            ready.wait(timeout=90)
            out = "\n".join(lines)
            assert proc.poll() is None and "Ready." in out, (
                out + (tmp / "stderr.txt").read_text())
            found = {name: re.search(rf"^{name}\s+(http://\S+)", out, re.M)
                     for name in ("emulator", "functions")}
            export = re.search(r"export ORCHESTRATOR_URL=(\S+) ORCHESTRATOR_API_KEY=(\S+)", out)
            assert found["emulator"] and found["functions"] and export, out
            yield Dev(list(lines), found["emulator"].group(1), found["functions"].group(1),
                      export.group(1), export.group(2))
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_version_names_the_emulators_dependencies_and_counts_its_speed_ups() -> None:
    res = orchestrator("--version")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # click's own line, as before
    assert re.fullmatch(r"(python -m )?orchestrator, version \S+", lines[0]), lines
    for dist in ("moto", "boto3", "botocore", "werkzeug"):
        assert f"{dist}: {metadata.version(dist)}" in lines
    assert any(re.fullmatch(r"python: 3\.\d+\.\d+\S*", line) for line in lines), lines
    counted = re.search(r"^speed-ups: (\d+) of (\d+) on", res.stdout, re.M)
    assert counted, res.stdout
    on, total = int(counted.group(1)), int(counted.group(2))
    assert total > 0 and on <= total


def test_dev_prints_the_emulators_versions_and_speed_ups_under_its_address(dev: Dev) -> None:
    at = next(i for i, line in enumerate(dev.lines) if line.startswith("emulator   "))
    facts = dev.lines[at + 1]
    assert re.fullmatch(rf" {{11}}moto {re.escape(metadata.version('moto'))}"
                        r" · speed-ups \d+/\d+ on"
                        r" · (its own process, over a socket|in-process calls|calls over HTTP)"
                        r"( · off: .+ \(`orchestrator doctor` says why\))?", facts), facts
    # the lines after it are those they were
    assert dev.lines[at + 2].startswith("functions  http://")


def test_doctor_against_a_running_dev_stack_passes(dev: Dev) -> None:
    res = orchestrator("doctor", "--manifest", str(MANIFEST), "--ascii", env=dev.env())
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert out.rstrip().endswith("doctor: no check failed"), out
    assert f"moto {metadata.version('moto')}" in out
    assert re.search(r"^emulator .*speed-ups \d+ of \d+ on$", out, re.M), out
    assert re.search(r"^  (ok|off)\s+speedup:update-parse\s+\S", out, re.M), out
    assert re.search(r"^  (ok|off)\s+in-process\s+\S", out, re.M), out
    for service, api in (("dynamodb", "ListTables"), ("sqs", "ListQueues"),
                         ("s3", "ListBuckets")):
        assert re.search(rf"^  ok\s+{service}\s+{re.escape(dev.emulator)} answers {api}$",
                         out, re.M), out
    assert re.search(rf"^  ok\s+api\s+{re.escape(dev.api)} answers, key accepted$", out, re.M)
    manifest = re.search(rf"^  ok\s+{re.escape(str(MANIFEST))}\s+\d+ workflows: (.+)$", out,
                         re.M)
    assert manifest and "monthly-report" in manifest.group(1).split(", "), out
    for backend in ("api", "analytics", "notify"):  # the demo's backends, all on `dev`'s app
        assert re.search(rf"^  ok\s+{backend}\s+{re.escape(dev.functions)} answers \(HTTP \d+\)$",
                         out, re.M), out
    assert "FAIL" not in out


def test_doctor_json_holds_the_same_facts(dev: Dev) -> None:
    res = orchestrator("doctor", "--manifest", str(MANIFEST), "--json", env=dev.env())
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert set(report) == SECTIONS and report["ok"] is True
    assert report["versions"]["moto"] == metadata.version("moto")
    assert {"python", "orchestrator", "boto3", "botocore", "werkzeug"} <= set(report["versions"])
    pieces = {c["name"]: c for c in report["emulator"]}
    assert any(name.startswith("speedup:") for name in pieces) and "in-process" in pieces
    for piece in pieces.values():
        assert piece["status"] == ("ok" if piece["active"] else "off")
        assert {"what", "reason", "detail"} <= set(piece)
    endpoints = {c["name"]: c for c in report["endpoints"]}
    assert {n: (c["status"], c["url"]) for n, c in endpoints.items()} == {
        "dynamodb": ("ok", dev.emulator), "sqs": ("ok", dev.emulator),
        "s3": ("ok", dev.emulator), "api": ("ok", dev.api)}
    [manifest] = report["manifest"]
    assert manifest["status"] == "ok" and "monthly-report" in manifest["workflows"]
    assert {(b["name"], b["status"], b["url"]) for b in report["backends"]} == {
        (name, "ok", dev.functions) for name in ("api", "analytics", "notify")}


def test_doctor_fails_naming_a_backend_and_an_endpoint_that_do_not_answer(
    tmp_path: Path, emulator: Any, testfns: str
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    manifest = tmp_path / "orchestrator.yml"
    manifest.write_text(
        f"backends:\n  live: {{ url: '{testfns}' }}\n  gone: {{ url: '{dead}' }}\n"
        "workflows:\n  w:\n    steps:\n      a: { backend: live, route: /echo }\n"
        "      b: { backend: gone, route: /echo, dependsOn: [a] }\n")
    env = clean_env() | {"AWS_ENDPOINT_URL": emulator.url, "AWS_ENDPOINT_URL_SQS": dead}
    res = orchestrator("doctor", "--manifest", str(manifest), "--ascii", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout
    assert re.search(rf"^  FAIL gone\s+{re.escape(dead)} unreachable: \S", out, re.M), out
    assert re.search(rf"^  ok\s+live\s+{re.escape(testfns)} answers", out, re.M), out
    assert re.search(rf"^  FAIL sqs\s+{re.escape(dead)} does not answer: \S", out, re.M), out
    assert re.search(rf"^  ok\s+dynamodb\s+{re.escape(emulator.url)} answers", out, re.M)
    assert out.rstrip().endswith("doctor: 2 failed: endpoints sqs; backends gone"), out
    # the same in JSON
    report = json.loads(orchestrator("doctor", "--manifest", str(manifest), "--json",
                                     env=env).stdout)
    assert report["ok"] is False
    assert [(b["name"], b["status"]) for b in report["backends"]] == [("live", "ok"),
                                                                      ("gone", "fail")]


def test_doctor_fails_naming_each_problem_of_a_broken_manifest(tmp_path: Path,
                                                                 emulator: Any) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("backends:\n  fn: { url: http://127.0.0.1:9 }\nworkflows:\n  w:\n"
                   "    steps:\n      a: { backend: fn, route: /a, timeout: soon }\n")
    env = clean_env() | {"AWS_ENDPOINT_URL": emulator.url}
    res = orchestrator("doctor", "--manifest", str(bad), "--ascii", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    problem = re.search(r"^  FAIL (\S*bad\.yml):(\d+)\s+(.+)$", res.stdout, re.M)
    assert problem and problem.group(1) == str(bad) and problem.group(2) == "6", res.stdout
    assert problem.group(3).startswith("workflows.w.steps.a.timeout: 'soon' is not a duration")
    # what a manifest that did not load cannot say is said so, not failed on
    assert re.search(r"^  --\s+backends\s+not checked: the manifest did not load$",
                     res.stdout, re.M), res.stdout
    missing = orchestrator("doctor", "--manifest", str(tmp_path / "none.yml"), "--ascii",
                           env=env)
    assert missing.returncode == 1 and "manifest not found" in missing.stdout


def test_doctor_with_no_endpoint_and_no_credentials_says_so_without_failing(
    tmp_path: Path, testfns: str
) -> None:
    manifest = tmp_path / "orchestrator.yml"
    manifest.write_text(f"backends:\n  fn: {{ url: '{testfns}' }}\n"
                        "workflows:\n  w:\n    steps:\n      a: { backend: fn, route: /echo }\n")
    # A fresh machine: no AWS variables, no ~/.aws, no instance metadata to ask.
    env = clean_env() | {"HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true",
                         "AWS_CONFIG_FILE": str(tmp_path / "none"),
                         "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    env.pop("ORCHESTRATOR_URL", None)
    started = time.monotonic()
    res = orchestrator("doctor", "--manifest", str(manifest), "--ascii", env=env,
                       cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    for service in ("dynamodb", "sqs", "s3"):
        assert re.search(rf"^  --\s+{service}\s+not configured: `orchestrator dev` runs a"
                         " local one$", res.stdout, re.M), res.stdout
    assert re.search(r"^  --\s+api\s+ORCHESTRATOR_URL not set", res.stdout, re.M)
    assert time.monotonic() - started < 60
