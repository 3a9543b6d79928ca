"""The shape every runner shares: the attempt it is handed, and what it answers.

A worker claims an attempt, makes its start check, and hands it to the runner of its
step's kind (kinds.py); the runner carries it as far as it goes now (called and
recorded, released to wait, or ended) and answers the next row to run inline on the
same thread, if any."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from orchestrator.adapters.store import Lease
from orchestrator.engine.attempts import Outcome
from orchestrator.engine.backend_limits import Limits
from orchestrator.engine.context import RunContext
from orchestrator.engine.definition import StepSpec
from orchestrator.engine.records import StepRecord
from orchestrator.services.execution.tally import Tally

__all__ = ["Attempt", "BackendRef", "Fold", "Runner"]

# A wide join's completion folded into the worker's next flush: (run, join, dep, in-degree).
Fold = Callable[[str, str, str, int], None]


@dataclass(frozen=True)
class BackendRef:
    """Where a backend's functions are served, and the secret its calls are signed with."""

    url: str
    secret: str | None = None
    # What protects it (`limits:`): its calls take a slot first (runners/backend_gate.py).
    limits: Limits | None = None

    def url_of(self, route: str) -> str:
        return self.url.rstrip("/") + route


@dataclass
class Attempt:
    """One claimed attempt, past its start check, as a runner gets it."""

    row: StepRecord
    # The run as the start check found it (None: the run is gone).
    ctx: RunContext | None
    tally: Tally
    backend: BackendRef | None
    # Whether the longest of the named steps' timeouts still fits in this thread's time
    # (a Lambda invocation's): the step itself, or the dependant it would take inline.
    room: Callable[[tuple[str, ...]], bool]
    # A new lease of this worker's (for a dependant taken inline).
    lease: Callable[[], Lease]
    # Where a wide join's completion goes while the worker folds them (None: written now).
    fold: Fold | None = None
    # Set by a runner once the step has ended (its success, or its last failure): what
    # it held for its attempts (a lock) can go.
    ended: bool = False
    # Set by a runner once its call answered: how (a 429 holds its backend off).
    outcome: Outcome | None = None

    @property
    def spec(self) -> StepSpec | None:
        """The step as its YAML declares it (None for a durable run's driver rows)."""
        if self.ctx is None or self.ctx.definition is None:
            return None
        return self.ctx.definition.specs.get(self.row.step)


class Runner(Protocol):
    def run(self, attempt: Attempt) -> StepRecord | None:
        """Carry the attempt on; the next row to run inline, if any."""
