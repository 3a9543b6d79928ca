"""Admission's stages, in order, for every way a run starts: one request in
(request.py), one typed result out (result.py).

1. dedupe (dedupe.py): an Idempotency-Key is claimed and names the run id; any other
   trigger's id is its run id already;
2. the gate a run needs is decided (engine/admission.py: its concurrency group and
   throttle, keys rendered from its input);
3. debounce (debounce.py): a trigger of a debounced workflow joins its key's burst, or
   begins one (a repeat of a trigger it took is a duplicate); batch (batch.py): an
   event of a batched workflow joins its key's open batch, or begins one;
4. create and launch (launch.py): the run row (a repeat of its id answers the run
   that exists), then, for a gated run, throttle (throttle.py) and concurrency
   (concurrency.py) take it through `arrive`; else its steps and the roots' dispatch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.metering import metered
from orchestrator.engine.admission import gate_of
from orchestrator.engine.definition import Definition, Gate, Trigger
from orchestrator.engine.records import RunRecord
from orchestrator.errors import NotFound
from orchestrator.services.admission.batch import Batcher
from orchestrator.services.admission.debounce import Debouncer
from orchestrator.services.admission.dedupe import IdempotencyKeys, resolve
from orchestrator.services.admission.launch import Launcher, new_run_id
from orchestrator.services.admission.request import StartRequest
from orchestrator.services.admission.result import Outcome, Started

__all__ = ["Pipeline"]


class Pipeline:
    def __init__(self, manifest: Any, launcher: Launcher, debouncer: Debouncer,
                 keys: IdempotencyKeys | None, *, default_timeout: float,
                 clock: Callable[[], float],
                 store_script: Callable[[str], str] | None = None,
                 batcher: Batcher | None = None) -> None:
        self.manifest = manifest
        self.batcher = batcher
        # Stores a script's text (blob store, by hash) before its run's first call.
        self.store_script = store_script
        self.launcher = launcher
        self.debouncer = debouncer
        self.keys = keys
        self.default_timeout = default_timeout
        self.clock = clock

    def workflow(self, name: str) -> Any:
        wf = self.manifest.workflows.get(name)
        if wf is None:
            why_missing = getattr(self.manifest, "why_missing", None)
            why = why_missing(name) if why_missing is not None else None
            if why:
                raise NotFound(f"workflow {name!r}: {why}")
            known = ", ".join(sorted(self.manifest.workflows)) or "none"
            raise NotFound(f"workflow {name!r} is not defined (known: {known})")
        return wf

    def admit(self, req: StartRequest) -> Started:
        """Take one trigger through the stages: the run it made or joined, and how."""
        # A rerun's definition is the old run's: its workflow may have left the manifest.
        wf = (req.adhoc if req.adhoc is not None
              else self.manifest.workflows.get(req.workflow) if req.definition is not None
              else self.workflow(req.workflow))
        text = getattr(wf, "script_text", None)
        if text is not None and self.store_script is not None and req.definition is None:
            self.store_script(text)
        if self.keys is not None:
            req = resolve(req, self.keys, self.clock(), new_run_id)
        definition = req.definition or Definition.of(
            wf, self.manifest.backends, self.default_timeout, req.workflow)
        gate = gate_of(wf, req.workflow, req.input, req.overlap, req.fire_key, req.priority)
        trigger = Trigger.from_json(dict(req.trigger or {"source": "api"}))
        launcher = self.launcher
        if (getattr(wf, "batch", None) is not None and self.batcher is not None
                and req.rerun_of is None and trigger.source == "event"):
            return self._batch(req, wf, definition, trigger)
        if getattr(wf, "debounce", None) is not None and req.rerun_of is None:
            # One run per burst: the run id the trigger came with names the trigger,
            # not the burst's run.
            def record(admit_at: float) -> RunRecord:
                return launcher.record(req.workflow, definition, req.input, None,
                                       trigger=trigger, gate=gate or Gate(), admit_at=admit_at)

            return self.debouncer.trigger(req.workflow, wf.debounce, req.input, record,
                                          self._begin, trigger_id=req.run_id)
        run, created = launcher.create(
            req.workflow, definition, req.input, req.run_id, trigger=trigger, gate=gate,
            rerun_of=req.rerun_of, kept_input=req.kept_input)
        return Started.new(run) if created else Started(run, Outcome.DUPLICATE)

    def _batch(self, req: StartRequest, wf: Any, definition: Definition,
               trigger: Trigger) -> Started:
        """An event of a batched workflow (batch.py): the batch's run is queued from its
        first event, its gate rendered from that input (`{"events": [...]}`)."""
        launcher = self.launcher
        assert self.batcher is not None

        def record(admit_at: float, input: Any) -> RunRecord:
            gate = gate_of(wf, req.workflow, input, None, "")
            return launcher.record(req.workflow, definition, input, None,
                                   trigger=trigger, gate=gate or Gate(), admit_at=admit_at)

        return self.batcher.trigger(req.workflow, wf.batch, req.input, record, self._begin,
                                    trigger_id=req.run_id)

    def _begin(self, run: RunRecord, also: list[dict[str, Any]]) -> RunRecord:
        """Write a burst's or a batch's run with the items that go with it (one
        transaction), then take it to the gate."""
        with metered(run.run_id):
            self.launcher.store.runs.create_run_with(run, also)
            return self.launcher.arrive(run)
