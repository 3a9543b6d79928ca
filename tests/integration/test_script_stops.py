"""A shell script's run meets every stop: a cancel reaches the step command that is
running (its process is killed, nothing after it runs), a cancel of a waiting script
ends it at once, and a rerun of a failed script runs it again from the top."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, log_of, script_stack

LONG = """
orchestrator step before -- sh -c 'echo before >> "$1/effects"' _ "$DIR"
orchestrator step long -- sh -c 'echo $$ > "$1/pid"; sleep 60; echo after >> "$1/effects"' _ "$DIR"
orchestrator step never -- sh -c 'echo never >> "$1/effects"' _ "$DIR"
"""


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def _until(what: str, probe: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_cancel_kills_the_running_step_command(stack: ScriptStack, tmp_path: Path) -> None:
    text = LONG.replace("$DIR", str(tmp_path))
    res = stack.cli("submit", stack.recipe("long.sh", text))
    assert res.exit_code == 0, res.output
    run_id = res.output.strip()
    pid_file = tmp_path / "pid"
    _until("the long step to start", lambda: pid_file.exists() and pid_file.read_text().strip())
    pid = int(pid_file.read_text())
    assert _alive(pid)
    res = stack.cli("cancel", run_id, "--reason", "enough")
    assert res.exit_code == 0, res.output
    view = stack.h.wait(run_id, timeout=30)
    assert view["status"] == "killed", view
    _until("the step's command to be killed", lambda: not _alive(pid), timeout=15)
    effects = (tmp_path / "effects").read_text().split()
    assert effects == ["before"]  # neither the rest of the long step nor the next


def test_a_cancel_ends_a_waiting_script(stack: ScriptStack, tmp_path: Path) -> None:
    path = stack.recipe("waits.sh", "orchestrator wait signal go\necho went\n")
    run_id = stack.cli("submit", path).output.strip()
    _until("the script to wait",
           lambda: (stack.h.rt.runs.view(run_id).get("waiting") or {}).get("kind") == "signal")
    assert stack.cli("cancel", run_id).exit_code == 0
    view = stack.h.wait(run_id, timeout=30)
    assert view["status"] == "killed" and "went" not in log_of(view)


def test_a_rerun_of_a_failed_script_starts_it_again_from_the_top(stack: ScriptStack,
                                                                  tmp_path: Path) -> None:
    # As for any durable run, a rerun is a new run of the same text whose journal starts
    # empty (reference 002: a retried script job's recorded steps are cleared).
    flag = tmp_path / "fixed"
    text = (f'orchestrator step once -- sh -c \'echo once >> "{tmp_path}/effects"\'\n'
            f'[ -f "{flag}" ] || {{ echo "not yet" >&2; exit 4; }}\n'
            "echo done\n")
    res = stack.cli("run", stack.recipe("fixme.sh", text))
    assert res.exit_code == 1 and "script exited 4" in res.output, res.output
    run_id = res.output.splitlines()[0].removeprefix("  run: ")
    flag.touch()
    res = stack.cli("rerun", run_id, "--wait")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "effects").read_text().split() == ["once", "once"]
    rerun = stack.h.rt.runs.view(run_id)
    assert rerun["status"] == "failed"  # the old run stays as it ended
