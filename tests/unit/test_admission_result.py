"""The typed result of admission (services/admission/result.py): how a run's status at
its creation and a repeat become its outcome, and the one way every answer renders it."""

from __future__ import annotations

import pytest

from orchestrator.engine.definition import Definition
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.services.admission import Outcome, Started


def run(status: RunStatus) -> RunRecord:
    return RunRecord(run_id="r", workflow="w", status=status, input=None,
                     definition=Definition(steps=()), created_at=1.0, total=0, remaining=0)


@pytest.mark.parametrize(("status", "outcome"), [
    (RunStatus.RUNNING, Outcome.CREATED), (RunStatus.QUEUED, Outcome.QUEUED),
    (RunStatus.SKIPPED, Outcome.SKIPPED)])
def test_a_new_run_is_created_queued_or_skipped_as_its_status_says(
        status: RunStatus, outcome: Outcome) -> None:
    started = Started.new(run(status))
    assert started.outcome is outcome and started.created
    assert started.fields() == {"created": True, "duplicate": False, "debounced": False,
                                "outcome": outcome.value}


def test_a_repeat_and_a_join_made_no_run_and_say_which() -> None:
    dup = Started(run(RunStatus.QUEUED), Outcome.DUPLICATE)
    joined = Started(run(RunStatus.QUEUED), Outcome.DEBOUNCED)
    assert dup.fields() == {"created": False, "duplicate": True, "debounced": False,
                            "outcome": "duplicate"}
    assert joined.fields() == {"created": False, "duplicate": False, "debounced": True,
                               "outcome": "debounced"}
