"""Events: `POST /events` and `orchestrator event emit`, and the workflows they start.

An event has a name, an optional subject key (the customer, order, ... it is about), an
id (given, or made up) and a JSON payload. It is stored for ORCH_EVENT_RETENTION
(7 days by default) under its name, newest last, so that a run that starts waiting for
an event shortly after it arrived can still find it.

Every workflow with `on: {event: NAME, if: EXPR}` whose expression holds for the event
starts one run. The run id is derived from the workflow, the event name and the event
id, so the same event delivered twice (a client retry, a redelivery) starts one run.
The expression sees `event` = {name, key, id, data, received_at}; see expressions.py.
A workflow with `batch:` gathers its events into batches (services/admission/batch.py);
one with `cancelOn:` has its open runs cancelled by the events it names (cancel_on.py):
before the event starts any run."""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import doc_of, event_id_key, event_key, event_sk
from orchestrator.errors import UsageError
from orchestrator.expressions import compile_expression
from orchestrator.services.admission import Outcome, StartRequest
from orchestrator.services.admission.result import taken
from orchestrator.services.durable.event_waits import EventWaits
from orchestrator.services.runs import RunService
from orchestrator.services.triggers.cancel_on import EventCancels
from orchestrator.services.values import EVENT_NAME, MAX_VALUE_BYTES, check_value, checked_name

__all__ = ["EventService", "event_run_id"]

log = logging.getLogger(__name__)

# The rule of every name (services/values.py), with `/`.
NAME_RE = EVENT_NAME
ID_RE = re.compile(r"^[\x21-\x7e]{1,200}$")
MAX_EVENT_BYTES = MAX_VALUE_BYTES


def event_run_id(workflow: str, name: str, event_id: str) -> str:
    digest = hashlib.sha256(f"{name}\x00{event_id}".encode()).hexdigest()[:24]
    return f"{workflow[:150]}-ev-{digest}"


@dataclass(frozen=True)
class EventService:
    control: Control
    runs: RunService
    clock: Callable[[], float]
    retention: float  # how long events and their ids are kept
    # Durable runs waiting for events: where an event is published, and how a run
    # found waiting is woken.
    waits: EventWaits | None = None
    wake: Callable[[str, str], object] | None = None
    # Workflows' `cancelOn:` (cancel_on.py): the open runs an event cancels.
    cancels: EventCancels | None = None

    def emit(
        self, name: str, data: Any = None, *, key: str | None = None, event_id: str | None = None
    ) -> dict[str, Any]:
        name = checked_name("event name", name, event=True)
        if event_id is not None and not ID_RE.fullmatch(event_id):
            raise UsageError("id: 1-200 printable ASCII characters without spaces")
        if key is not None and len(key) > 512:
            raise UsageError("key: longer than 512 characters")
        check_value("data (an event's)", data)
        now = self.clock()
        eid = event_id or uuid.uuid4().hex
        event = {"name": name, "key": key, "id": eid, "data": data, "received_at": now}
        workflows = self.handlers(event)
        # The id is claimed with the workflows the event matched: a duplicate is answered
        # from the first delivery (its runs), whatever data it carries this time.
        claim = self.control.claim(
            event_id_key(name, eid), now=now, doc={"workflows": workflows},
            expires_at=now + self.retention,
        )
        first, repair = claim.first, claim.recent
        if not first:
            workflows = list(claim.doc.get("workflows", workflows))
            event = {**event, "received_at": float(claim.doc["at"])}
        cancelled: list[str] = []
        if first or repair:
            self._store(event)
            if self.waits is not None:
                for run_id, row in sorted(self.waits.publish(event)):
                    if self.wake is not None:
                        self.wake(run_id, row)
            # Before the runs it starts: an event cancels the runs open before it.
            if self.cancels is not None:
                cancelled = self.cancels.cancel(event)
        started = []
        # A run started by an event takes its subject (a durable run's event waits
        # default to it).
        trigger = {"source": "event", "event": name, "id": eid, **({"key": key} if key else {})}
        for wf_name in workflows:
            run_id = event_run_id(wf_name, name, eid)
            wf = self.runs.manifest.workflows.get(wf_name)
            gathers = getattr(wf, "debounce", None) is not None \
                or getattr(wf, "batch", None) is not None
            if first or (repair and self.runs.store.runs.get_run(run_id, now) is None) \
                    or gathers:
                # A debounced workflow's burst, or a batched one's batch, knows the run
                # this event joined (and a repeat of it moves nothing:
                # services/admission/debounce.py, batch.py).
                # A shell script's payload is the event's data (its subject is the
                # run's, its name and id the trigger's); code workflows get the event,
                # and a batch gathers events whole.
                given = data if getattr(wf, "script", None) is not None \
                    and getattr(wf, "batch", None) is None else event
                admitted = self.runs.admit(StartRequest(wf_name, given, run_id, trigger))
                run_id = admitted.run.run_id
                fields = admitted.fields()
            else:
                fields = taken(Outcome.DUPLICATE)
            started.append({"workflow": wf_name, "run_id": run_id, **fields})
        return {"id": eid, "name": name, "duplicate": not first, "runs": started,
                "cancelled": cancelled}

    def _store(self, event: dict[str, Any]) -> None:
        received = float(event["received_at"])
        # Keyed by arrival time and id, written only if absent: a crash repair completes
        # the first delivery and never overwrites what it stored.
        self.control.put_new(
            event_key(event["name"]), event_sk(received, event["id"]), now=received,
            doc=event, expires_at=received + self.retention,
        )

    def handlers(self, event: dict[str, Any]) -> list[str]:
        """Workflows with a trigger on this event whose `if` holds (each once)."""
        context = {"event": event}
        out = []
        for wf_name, wf in self.runs.manifest.workflows.items():
            for trigger in getattr(wf, "on", None) or ():
                if trigger.event != event["name"]:
                    continue
                condition = getattr(trigger, "if_", None)
                if condition is None or compile_expression(condition).test(context):
                    out.append(wf_name)
                    break
        return out

    def recent(self, name: str, limit: int = 20) -> list[dict[str, Any]]:
        """The newest stored events of a name, newest first."""
        name = checked_name("event name", name, event=True)
        items = self.control.query(
            event_key(name), now=self.clock(), limit=limit, newest_first=True
        )
        return [doc_of(i) for i in items]
