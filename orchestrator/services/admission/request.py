"""What a trigger asks of admission: one request, built by each trigger source (the API,
a webhook, an event, a schedule fire, a rerun, a parent's child, the dashboard) and
nothing more: every rule about how it is taken is a stage's (pipeline.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.engine.definition import Definition

__all__ = ["StartRequest"]


@dataclass(frozen=True)
class StartRequest:
    workflow: str
    input: Any = None
    # The trigger's own id: a run id chosen by the caller or derived from what the
    # trigger carried (an event's id, a webhook delivery's, a schedule fire's, a child's
    # operation). Its repeat is the same trigger.
    run_id: str | None = None
    # Where the run came from: {"source": api | webhook | event | schedule | manual |
    # rerun | parent, ...ids}.
    trigger: Mapping[str, Any] | None = None
    # An Idempotency-Key, and the request document it was sent with (its fingerprint
    # tells a retry from a reuse of the key).
    idempotency_key: str | None = None
    document: Any = None
    # A schedule fire's `overlap` (skip | allow | replace) for `fire_key`.
    overlap: str | None = None
    fire_key: str = ""
    # A rerun: the old run's definition (the steps it reuses), the old run, and whether
    # the input is the old run's (checked when it was first sent).
    definition: Definition | None = None
    rerun_of: str | None = None
    kept_input: bool = False
    # A workflow named by no manifest or stored script, given whole: a submitted
    # script's (`orchestrator submit FILE`), with the throttle it was submitted with.
    adhoc: Any = None
    # The run's priority among the runs waiting for its concurrency limits (0-100; None:
    # the workflow's `priority`).
    priority: int | None = None
