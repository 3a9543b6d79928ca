"""Cancel on an event (a workflow's `cancelOn: [{event: NAME, if: EXPR}]`).

An event of that name cancels each run of the workflow that is open when the event is
handled (queued or running) and for which `if` holds; `if` is an expression over
`input` (the run's input) and `event` (`{name, key, id, data, received_at}`, as
`on[].if` sees it), written bare or as one `${{ }}` hole; without `if`, every open run
of the workflow. The cancel is the one `POST /runs/{id}/cancel` makes
(`RunService.cancel`): a queued run (waiting for its gate, its debounce or its batch)
ends `killed` at once and gives its place up, a running one (DAG or durable) is
stopped, its durable children with it. The reason names the event:
`cancelled by event NAME (ID)`.

Only runs created before the event was received are its to cancel: a run started after
it is not one it was about. EventService calls it for the first delivery of an event id,
and for a repeat soon after (which repairs a first delivery cut short): the repeat sees
the first delivery's `received_at`, so it reaches only the runs the first delivery did,
and a cancel is idempotent (a run already cancelled, or finished, is left as it is): a
repeat cancels nothing twice and nothing new."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.expressions import compile_expression
from orchestrator.manifest.event_flow import CANCEL_NAMES, cancel_condition
from orchestrator.services.runs import RunService

__all__ = ["EventCancels", "kill_reason"]

log = logging.getLogger(__name__)


def kill_reason(event: dict[str, Any]) -> str:
    """The reason a run cancelled by `event` keeps."""
    return f"cancelled by event {event['name']} ({event['id']})"


@dataclass(frozen=True)
class EventCancels:
    runs: RunService
    clock: Callable[[], float]

    def listeners(self, name: str) -> dict[str, list[Any]]:
        """Workflows that an event `name` may cancel runs of: their `cancelOn`
        conditions for it (None: no `if`)."""
        out: dict[str, list[Any]] = {}
        for wf_name, wf in self.runs.manifest.workflows.items():
            for entry in getattr(wf, "cancel_on", None) or ():
                if entry.event == name:
                    out.setdefault(wf_name, []).append(
                        None if entry.if_ is None else
                        compile_expression(cancel_condition(entry.if_), names=CANCEL_NAMES))
        return out

    def cancel(self, event: dict[str, Any]) -> list[str]:
        """Cancel the open runs `event` matches; the ids of those it cancelled."""
        cancelled = []
        reason = kill_reason(event)
        for workflow, conditions in self.listeners(event["name"]).items():
            for run in self.runs.store.runs.open_runs(workflow, self.clock()):
                if run.created_at > float(event["received_at"]):
                    continue  # started after the event: not a run it was about
                context = {"input": run.input, "event": event}
                if run.imported is not None or not any(
                        c is None or c.test(context) for c in conditions):
                    continue  # an imported copy is never advanced here
                if self.runs.cancel(run.run_id, reason):
                    log.info("run %s: %s", run.run_id, reason)
                    cancelled.append(run.run_id)
        return cancelled
