"""Reference 002's recipes as durable shell scripts, run as written (with `orchestrator`
for `spool` and ORCHESTRATOR_* for SPOOL_*) on a live stack through the CLI and the
API, each printing what the recipe says it prints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, script_stack


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_saga_cancels_what_it_booked_newest_first(stack: ScriptStack) -> None:
    res = stack.cli("run", stack.recipe("saga.sh"))
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    run_id = lines[0].removeprefix("  run: ")
    assert lines[0].startswith("  run: ") and run_id
    assert lines[1:] == ["no cars left", "cancelled HT-2207", "cancelled FL-881",
                         f"  {run_id} failed: script exited 1"]
    assert stack.steps(run_id) == ["book-flight", "book-hotel", "book-car", "cancel", "cancel"]
