"""Admission: every way a run starts (the API, a webhook, an event, a schedule, a rerun,
a child run) goes through these stages, in this order:

1. dedupe (`dedupe.py`): the trigger's id (an Idempotency-Key, an event id, a webhook
   delivery id, a child's or a caller's run id) is claimed once; a repeat is answered
   with what the first made;
2. debounce (`debounce.py`): a trigger of a debounced workflow joins its key's burst, or
   begins one;
3. throttle and concurrency (`gate.py`): a queued run waits for its slot and its group;
4. create and launch (services/runs.py): the run row, then its steps, then the roots'
   dispatch.

Each answers with one typed result (`result.Started`: the run and its `Outcome`)."""

from orchestrator.services.admission.gate import Admission
from orchestrator.services.admission.request import StartRequest
from orchestrator.services.admission.result import Outcome, Started

__all__ = ["Admission", "Outcome", "StartRequest", "Started"]
