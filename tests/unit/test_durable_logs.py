"""Durable code's log lines (issue 23, section 3): each names its operation and attempt,
so a log pipeline groups them; a replay logs nothing again."""

from __future__ import annotations

from typing import Any

import pytest

from functions.durable import Context, RetryableError, step, workflow
from tests.unit.test_durable_replay import Driver


def test_lines_name_their_operation_and_attempt(caplog: pytest.LogCaptureFixture) -> None:
    tries = {"n": 0}

    @workflow("grouped")
    async def grouped(ctx: Context, payload: Any) -> None:
        ctx.logger.info("starting")

        def flaky() -> int:
            tries["n"] += 1
            ctx.logger.info("trying")
            if tries["n"] == 1:
                raise RetryableError("not yet", retry_after=0)
            return 1

        await step("flaky", flaky)
        ctx.logger.info("done")

    with caplog.at_level("INFO", logger="functions.durable.workflow"):
        Driver(grouped).run()
    said = [(r.getMessage().rsplit("] ", 1)[1], r.__dict__) for r in caplog.records]
    # Each line once: replays of "starting" (before the step) log nothing again.
    assert [m for m, _ in said] == ["starting", "trying", "trying", "done"]
    starting, first, second, done = (fields for _, fields in said)
    assert first["operation"] == second["operation"] and first["operation_name"] == "flaky"
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["run_id"] == "r1" and first["workflow"] == "grouped"
    # Between operations: the place of the next one in its scope.
    assert (starting["operation"], done["operation"]) == ("@0", "@1")
    assert starting["attempt"] == done["attempt"] == 1
