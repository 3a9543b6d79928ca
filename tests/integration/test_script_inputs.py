"""Bad input to durable shell scripts: each gets a clear error, and no run is left
stuck (the API answers 4xx with a JSON body; the CLI exits non-zero naming the file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import cli
from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, log_of, script_stack


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_a_missing_or_binary_script_is_refused_naming_the_file(stack: ScriptStack,
                                                               tmp_path: Path) -> None:
    gone = tmp_path / "gone.sh"
    res = stack.cli("run", str(gone))
    assert res.exit_code == 2 and f"{gone}: no such script" in res.output
    binary = tmp_path / "blob.sh"
    binary.write_bytes(b"\x7fELF\x00\x01\x02")
    res = stack.cli("submit", str(binary))
    assert res.exit_code == 2 and "NUL byte" in res.output and str(binary) in res.output
    empty = tmp_path / "empty.sh"
    empty.write_text("  \n")
    assert stack.cli("submit", str(empty)).exit_code == 2
    listed, _ = stack.h.rt.store.runs.list_runs(None, stack.h.rt.clock())
    assert listed == []  # nothing was started


def test_the_api_refuses_a_bad_script_with_a_json_error(stack: ScriptStack) -> None:
    bad = httpx.post(f"{stack.api}/scripts/runs", json={"name": "x", "text": "echo \x00"})
    assert bad.status_code == 400 and "NUL" in bad.json()["error"]["message"]
    unnamed = httpx.post(f"{stack.api}/scripts/runs", json={"text": "echo hi"})
    assert unnamed.status_code == 422 and "name" in unnamed.json()["error"]["message"]
    taken = httpx.put(f"{stack.api}/scripts/noop", json={"text": "echo hi"})
    assert taken.status_code == 409  # the manifest's workflow keeps its name


def test_a_script_that_exits_non_zero_outside_a_step_fails_its_run(stack: ScriptStack,
                                                                   tmp_path: Path) -> None:
    path = tmp_path / "oops.sh"
    path.write_text('orchestrator step one -- echo fine\necho "about to fail"\nexit 3\n')
    res = stack.cli("run", str(path))
    assert res.exit_code == 1, res.output
    run_id = res.output.splitlines()[0].removeprefix("  run: ")
    assert res.output.splitlines()[1:] == ["fine", "about to fail",
                                           f"  {run_id} failed: script exited 3"]
    view = stack.h.rt.runs.view(run_id)
    assert view["status"] == "failed" and "about to fail" in log_of(view)


def test_an_in_script_command_outside_a_run_says_so() -> None:
    for args in (["step", "x", "--", "true"], ["sleep", "5s"], ["wait", "signal", "go"],
                 ["activity", "wait", "a"]):
        res = cli(*args)
        assert res.exit_code == 2, args
        assert f"orchestrator {args[0]}: an in-script command: not inside a script run" \
            in res.output


def test_an_activity_no_backend_can_run_fails_its_script_clearly(stack: ScriptStack,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "gpu.sh"
    path.write_text("orchestrator activity run train --requires gpu -- echo trained\n")
    res = stack.cli("run", str(path))
    assert res.exit_code == 1, res.output
    run_id = res.output.splitlines()[0].removeprefix("  run: ")
    view = stack.h.rt.runs.view(run_id)
    assert view["status"] == "failed", view
    # The child could not start: the run fails, saying why, instead of waiting for it.
    assert "no backend has the 'gpu' capability" in view["error"]["message"], view["error"]
    assert "no backend has the 'gpu' capability" in res.output


def test_run_of_a_workflow_name_still_triggers_it(stack: ScriptStack) -> None:
    res = stack.cli("run", "noop", "--wait")
    assert res.exit_code == 0, res.output
    assert "success" in res.output
