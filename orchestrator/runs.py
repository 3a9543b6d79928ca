"""Starting, viewing and killing runs: the service the API, the CLI and the tests share.

A run row stores the workflow definition it started with (timeouts resolved), so a run
never changes under its feet when the manifest is edited, and the sweeper can rebuild
any step row a crashed start left out."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.advance import Advancer
from orchestrator.engine import StepSpec, plan_steps
from orchestrator.errors import ConditionFailed, NotFound, UsageError
from orchestrator.queue import Dispatch
from orchestrator.records import RunRecord, StepRecord, dumps
from orchestrator.states import RunStatus, StepStatus

__all__ = [
    "RunService",
    "definition_of",
    "plan_for_run",
    "run_view",
    "topological",
]

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
MAX_INPUT_BYTES = 256 * 1024


def definition_of(
    workflow: Any, backends: Mapping[str, Any], default_timeout: float
) -> dict[str, Any]:
    """The JSON form of a manifest workflow, with each step's timeout resolved."""
    steps: dict[str, Any] = {}
    for name, st in workflow.steps.items():
        backend = backends.get(st.backend)
        timeout = st.timeout or (backend.timeout if backend is not None else None)
        steps[name] = {
            "backend": st.backend,
            "route": st.route,
            "dependsOn": list(st.depends_on),
            "payload": dict(st.payload),
            "retry": {
                "max": st.retry.max,
                "strategy": st.retry.strategy,
                "delay": st.retry.delay,
                "maxDelay": st.retry.max_delay,
            },
            "timeout": timeout or default_timeout,
        }
    return {"steps": steps, "onFailure": workflow.on_failure}


def specs_of(definition: Mapping[str, Any]) -> list[StepSpec]:
    out = []
    for name, st in definition.get("steps", {}).items():
        retry = st.get("retry") or {}
        out.append(
            StepSpec(
                name=name,
                backend=st["backend"],
                route=st["route"],
                deps=tuple(st.get("dependsOn") or ()),
                payload=st.get("payload") or {},
                retry_max=int(retry.get("max", 3)),
                retry_strategy=retry.get("strategy", "linear"),
                retry_delay=float(retry.get("delay", 1.0)),
                retry_max_delay=float(retry.get("maxDelay", 300.0)),
                timeout=float(st.get("timeout") or 60.0),
            )
        )
    return out


def plan_for_run(run: RunRecord) -> list[StepRecord]:
    return plan_steps(run.run_id, specs_of(run.definition), run.created_at)


def topological(definition: Mapping[str, Any]) -> list[str]:
    steps = definition.get("steps", {})
    order: list[str] = []
    placed: set[str] = set()
    pending = list(steps)
    while pending:
        progressed = False
        for name in list(pending):
            if all(d in placed for d in steps[name].get("dependsOn") or ()):
                order.append(name)
                placed.add(name)
                pending.remove(name)
                progressed = True
        if not progressed:  # cannot happen for a linted manifest; never loop forever
            order.extend(pending)
            break
    return order


def step_view(s: StepRecord | None, name: str, load: Callable[[StepRecord], Any]) -> dict[str, Any]:
    if s is None:
        return {
            "step": name,
            "status": StepStatus.BLOCKED.value,
            "attempts": 0,
            "output": None,
            "error": None,
        }
    return {
        "step": s.step,
        "status": s.status.value,
        "attempts": s.attempt,
        "output": load(s) if s.status is StepStatus.SUCCESS else None,
        "error": s.error if s.status is not StepStatus.SUCCESS else None,
        "depends_on": list(s.deps),
        "started_at": s.started_at,
        "finished_at": s.finished_at,
        "output_bytes": s.output_size if s.status is StepStatus.SUCCESS else None,
    }


def run_view(
    run: RunRecord, steps: list[StepRecord], load: Callable[[StepRecord], Any]
) -> dict[str, Any]:
    by_name = {s.step: s for s in steps}
    order = topological(run.definition)
    order += [n for n in by_name if n not in order]  # steps added at run time
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status.value,
        "input": run.input,
        "error": run.error,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "kill_reason": run.kill_reason,
        "steps": [step_view(by_name.get(n), n, load) for n in order],
    }


class RunService:
    def __init__(self, advancer: Advancer, manifest: Any, *, default_timeout: float) -> None:
        self.adv = advancer
        self.store = advancer.store
        self.manifest = manifest
        self.default_timeout = default_timeout

    def new_run_id(self, workflow: str, now: float) -> str:
        return f"{workflow}-{int(now * 1000)}-{secrets.token_hex(3)}"

    def start(
        self, workflow: str, input: Any = None, run_id: str | None = None
    ) -> tuple[RunRecord, bool]:
        """Start a run; returns (run, created). A caller-chosen run id that exists
        already returns the existing run (created=False)."""
        wf = self.manifest.workflows.get(workflow)
        if wf is None:
            known = ", ".join(sorted(self.manifest.workflows)) or "none"
            raise NotFound(f"workflow {workflow!r} is not defined (known: {known})")
        if run_id is not None and not RUN_ID_RE.match(run_id):
            raise UsageError(f"run_id {run_id!r}: use 1-200 of A-Z a-z 0-9 _ . : -")
        if len(dumps(input).encode()) > MAX_INPUT_BYTES:
            raise UsageError(f"input: larger than {MAX_INPUT_BYTES} bytes")
        now = self.adv.clock()
        rid = run_id or self.new_run_id(workflow, now)
        definition = definition_of(wf, self.manifest.backends, self.default_timeout)
        rows = plan_steps(rid, specs_of(definition), now)
        run = RunRecord(
            run_id=rid,
            workflow=workflow,
            status=RunStatus.RUNNING,
            input=input,
            definition=definition,
            created_at=now,
            total=len(rows),
            # A hint that triggers the verified finish: only sinks count down (see
            # StepRecord.counted), so a fan-out pays no per-step write on the run row.
            remaining=sum(1 for r in rows if r.counted),
            on_failure=wf.on_failure,
            updated_at=now,
        )
        # Order matters for crash safety: the run row first (the sweeper can rebuild
        # missing step rows from its definition), then the steps, then the roots' dispatch.
        try:
            self.store.create_run(run)
        except ConditionFailed:
            existing = self.store.get_run(rid, now)
            if existing is None:
                raise UsageError(f"run_id {rid!r} was used by a run that has expired") from None
            return existing, False
        self.store.put_steps(rows)
        roots = [Dispatch(run_id=rid, step=r.step, attempt=1) for r in rows if not r.deps]
        self.adv.queues.dispatch(roots)
        return run, True

    def get(self, run_id: str) -> RunRecord:
        run = self.store.get_run(run_id, self.adv.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        return run

    def view(self, run_id: str) -> dict[str, Any]:
        run = self.get(run_id)
        steps = self.store.query_steps(run_id)
        return run_view(run, steps, self.adv.load_output)

    def kill(self, run_id: str, reason: str) -> dict[str, Any]:
        run = self.get(run_id)
        if run.status.terminal:
            raise ConditionFailed(f"run {run_id} already finished ({run.status.value})")
        try:
            self.adv.kill(run_id, reason)
        except ConditionFailed:
            raise ConditionFailed(f"run {run_id} already finished") from None
        return self.view(run_id)

    def latest(self, workflow: str) -> RunRecord | None:
        runs, _ = self.store.list_runs(workflow, self.adv.clock(), limit=1)
        return runs[0] if runs else None
