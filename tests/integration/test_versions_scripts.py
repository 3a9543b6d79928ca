"""A durable shell script's run is on the text it started on (its version: `s-` and the
text's hash); `runs check --script FILE --workflow W` replays the open runs of a script
workflow against a new text, running nothing. A real script host over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, poll, script_stack

OLD = "orchestrator step one -- true\norchestrator wait signal go\necho went\n"


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_script_runs_are_checked_against_a_new_text(stack: ScriptStack,
                                                    tmp_path: Path) -> None:
    path = stack.recipe("waits.sh", OLD)
    run_id = stack.cli("submit", path).output.strip()
    poll("the script to wait",
         lambda: (stack.h.rt.runs.view(run_id).get("waiting") or {}).get("kind") == "signal")
    view = stack.h.rt.runs.view(run_id)
    assert view["version"].startswith("s-")
    workflow = view["workflow"]
    same = tmp_path / "same.sh"
    same.write_text(OLD + "echo and more\n")
    ok = stack.cli("runs", "check", "--script", str(same), "--workflow", workflow, "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["compatible"] == 1
    other = tmp_path / "other.sh"
    other.write_text("orchestrator step zero -- true\n" + OLD)
    bad = stack.cli("runs", "check", "--script", str(other), "--workflow", workflow)
    assert bad.exit_code == 1, bad.output
    assert (f"{run_id}  diverging at position 1: recorded step 'one', issued step 'zero'"
            in bad.stdout)
    no_workflow = stack.cli("runs", "check", "--script", str(other))
    assert no_workflow.exit_code == 2
    # The run goes on with the text it started on.
    stack.h.rt.signals.send(run_id, "go", {})
    assert stack.h.wait(run_id, timeout=30)["status"] == "success"
