"""A run's context: the immutable facts of a run a worker needs on every step (its
workflow, input, failure policy, in-degrees, sinks, timeouts, definition), with its stop
flags as last read. Cached per process by the worker; pure, built from a run row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.definition import Definition
from orchestrator.engine.plan import plan_row, with_unwritten
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    """The immutable facts of a run a worker needs on every step (cached per process)."""

    run_id: str
    workflow: str
    input: Any
    on_failure: OnFailure
    ndeps: dict[str, int]
    # Cancelled, halted or halting when it was read (only a fresh read is worth acting
    # on: the worker's start check reads it right before each call).
    stopping: bool = False
    # Steps nothing depends on: only their terminal transitions count towards the finish.
    sinks: int = 0
    # The run's one sink, when its success alone finishes the run (see Executor.end_with).
    ends_with: str | None = None
    started_at: float = 0.0
    # When the run was created: tells it from an earlier run of the same id (whose
    # context a worker may still hold) at each start check.
    created_at: float = 0.0
    # Each step's timeout: how long an attempt may take (a Lambda invocation checks it
    # against its remaining time before it starts one).
    timeouts: Mapping[str, float] = field(default_factory=dict)
    # What the run runs: the planned rows of the steps its start left out come from it.
    definition: Definition | None = field(default=None, compare=False, repr=False)
    # The subject of the event that started the run, if one did (durable event waits
    # default to it).
    subject: str | None = None
    # Its finish has follow-ups (RunRecord.follow_ups): the finish moves its wake.
    follow_ups: bool = True
    # When it was launched (its rows written and its roots dispatched); None while it
    # waits for admission, or if it never was (refused): its roots are not ready then.
    launched_at: float | None = None
    # A durable run's version of its backend's code (RunRecord.version), as last read:
    # each start check reads it again (a migration moves it).
    version: str | None = None

    @property
    def served(self) -> str:
        """A durable run's workflow name at its backend (else the workflow's name)."""
        durable = self.definition.durable if self.definition is not None else None
        return durable or self.workflow

    def plan(self, step: str) -> StepRecord | None:
        """The planned row of a step its start leaves out (engine.plan: a root, or a
        step blocked on one dependency): the write that first moves it creates it. None
        for any other step, whose row the start wrote."""
        if self.definition is None or self.ndeps.get(step, 2) > 1:
            return None
        return plan_row(self.run_id, self.definition, step)

    def rows(self, read: list[StepRecord]) -> list[StepRecord]:
        """The run's rows as read, with the ones its start left out, as planned."""
        if self.definition is None:
            return read
        return with_unwritten(read, self.run_id, self.definition, self.launched_at)

    @classmethod
    def of(cls, run: RunRecord) -> RunContext:
        sinks = run.definition.sinks
        # With one sink, every other step is one of its dependencies (each step leads to
        # a sink), so once it succeeds every step has. Not for a run holding a group's
        # lock (its release reads the run) or reusing rows of another run (their
        # expiry is the finish's to check).
        # A run whose finish has follow-ups (a group's next run, locks to hand on, a
        # parent waiting or to notify) finishes through the counted path, whose finish
        # does them at once: the one-write finish would leave them to the sweeper.
        alone = len(sinks) == 1 and not run.definition.reused and not run.follow_ups
        return cls(
            run_id=run.run_id,
            workflow=run.workflow,
            input=run.input,
            on_failure=run.on_failure,
            ndeps=run.definition.ndeps,
            stopping=run.stopping,
            sinks=len(sinks),
            ends_with=next(iter(sinks)) if alone else None,
            started_at=run.started_at or run.created_at,
            created_at=run.created_at,
            timeouts={st.name: st.timeout for st in run.definition.steps},
            definition=run.definition,
            subject=_subject(run),
            follow_ups=run.follow_ups,
            launched_at=run.started_at,
            version=run.version,
        )

    @classmethod
    def missing(cls, run_id: str) -> RunContext:
        """For a step whose run row is gone: its failure stops nothing else."""
        return cls(run_id, "", None, OnFailure.HALT, {})


def _subject(run: RunRecord) -> str | None:
    trigger = run.trigger
    if trigger is None or trigger.source != "event":
        return None
    key = trigger.detail.get("key")
    return None if key is None else str(key)
