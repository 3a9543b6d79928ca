"""The JSON views of a run and its steps, as the API and the CLI show them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.adapters.metering import summed
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.services.reads.cost import estimate

__all__ = ["durable_steps", "entry_step", "render", "run_view", "step_view", "view_json",
           "waiting_for"]

_ENTRY_STATUS = {"ok": "success", "error": "failed", "timeout": "timed_out"}
_WAIT_STATUS = {"sleep": "waiting", "signal": "waiting", "retry": "retrying", "next": "ready",
                "mismatch": "paused"}


# Stands for a view's steps while the rest of it is rendered (view_json).
_STEPS_MARK = f"steps-{secrets.token_hex(16)}"


def render(value: Any) -> str:
    """JSON as the API sends it (Starlette's JSONResponse encoding)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def view_json(view: dict[str, Any], head: list[str]) -> bytes:
    """`view` as the API sends it, its steps after `head` (steps rendered already)."""
    if not head:
        return render(view).encode()
    steps = render(view["steps"])
    joined = "[" + ",".join(head) + ("," + steps[1:] if len(steps) > 2 else "]")
    return render({**view, "steps": _STEPS_MARK}).replace(
        f'"{_STEPS_MARK}"', joined, 1).encode()


def step_view(s: StepRecord | None, name: str, load: Callable[[StepRecord], Any],
              deps: Sequence[str] = ()) -> dict[str, Any]:
    """A step as the API shows it; a step with no row yet (`s` None: a run still waiting
    for admission) as blocked, on `deps` (its declared dependencies)."""
    if s is None:
        return {
            "step": name,
            "status": StepStatus.BLOCKED.value,
            "attempts": 0,
            "output": None,
            "error": None,
            "depends_on": list(deps),
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
        **({"waiting_for": w} if (w := waiting_for(s)) else {}),
    }


def waiting_for(s: StepRecord | None) -> dict[str, Any] | None:
    """What a step (or a durable run's driver) released to wait for its backend waits
    for (runners/backend_gate.py): `{backend, limit: concurrency | rate, limits, until}`;
    None while it is held (called) or ended, or waits for anything else."""
    if s is None or s.status.terminal or s.lease_owner or not s.waiting:
        return None
    detail = s.waiting.get("detail") or {}
    if not detail.get("backend") or detail.get("attempt", s.attempt) != s.attempt:
        return None  # another wait, or a past one (its attempt has been called since)
    return {"backend": detail["backend"], "limit": detail.get("limit"),
            "limits": detail.get("limits") or {}, "until": s.waiting.get("until")}


def entry_step(e: dict[str, Any]) -> dict[str, Any]:
    """One journal entry as the run's step it shows."""
    status = _ENTRY_STATUS.get(str(e.get("status")), str(e.get("status")))
    return {
        "step": e.get("name"), "kind": e.get("kind"), "status": status,
        "attempts": int(e.get("attempts") or 1) if e.get("kind") == "step" else 0,
        "output": e.get("value") if status != "failed" else None,
        "error": e.get("error"), "scope": e.get("scope", ""), "position": e.get("pos"),
        "id": e.get("id"), "started_at": e.get("started"), "finished_at": e.get("ended"),
    }


def durable_steps(journal: list[dict[str, Any]], driver: StepRecord | None,
                  shown: Callable[[str, Any], bool] | None = None) -> list[dict[str, Any]]:
    """A durable run's operations as its steps: what the journal records, in order, then
    what the run waits for (if anything). `shown(scope, position)`: whether an entry
    outside `journal` is shown already (the caller shows those itself, before these)."""
    out = [entry_step(e) for e in sorted(
        journal, key=lambda e: (str(e.get("scope", "")), int(e.get("pos", 0))))]
    waiting = None if driver is None or driver.status.terminal else driver.waiting
    if waiting and waiting.get("kind") in ("sleep", "signal", "retry", "mismatch") and not any(
            o["scope"] == waiting.get("scope", "") and o["position"] == waiting.get("pos")
            for o in out) and not (shown is not None
                                   and shown(waiting.get("scope", ""), waiting.get("pos"))):
        detail = waiting.get("detail") or {}
        kind = "step" if waiting["kind"] == "retry" else waiting["kind"]
        if waiting["kind"] == "mismatch":
            kind = str((detail.get("issued") or {}).get("kind", "step"))
        out.append({
            "step": waiting.get("name"), "kind": kind,
            "status": _WAIT_STATUS.get(waiting["kind"], "waiting"),
            "attempts": int(waiting.get("attempt") or 0), "output": None,
            "error": detail.get("error"), "scope": waiting.get("scope", ""),
            "position": waiting.get("pos"), "id": waiting.get("id"),
            "started_at": waiting.get("since"), "finished_at": None,
            "until": waiting.get("until"),
        })
    return out


def run_view(
    run: RunRecord, steps: list[StepRecord] | None, load: Callable[[StepRecord], Any],
    journal: list[dict[str, Any]] | None = None,
    shown: Callable[[str, Any], bool] | None = None,
) -> dict[str, Any]:
    """A run as the API shows it; without `steps` (None) the run alone, from its row
    (and no `cost`: most of a run's requests are counted on its step rows).
    A durable run shows its operations (`journal`) as its steps, and its result;
    `shown`: see durable_steps."""
    view = {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.shown_status,
        "input": run.input,
        "error": run.error,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "kill_reason": run.kill_reason,
        "trigger": None if run.trigger is None else run.trigger.to_json(),
        "rerun_of": run.rerun_of,
        "imported": run.imported,
        "parent_run_id": (None if run.trigger is None
                          else run.trigger.detail.get("parent_run_id")),
        "admission": None
        if run.gate is None
        else {
            "group": run.gate.group,
            "key": run.gate.key if run.gate.group else None,
            "policy": run.gate.policy.value if run.gate.group else None,
            "throttle_key": None if run.gate.throttle is None else run.gate.throttle.key,
            "admit_at": run.admit_at,
            "limit": run.gate.limit if run.gate.group else None,
            "limits": [lim.to_json() | {"limit": lim.limit, "turns": lim.turns}
                       for lim in run.gate.limits],
            "priority": run.gate.priority,
        },
    }
    if steps is not None:
        # What the run cost: its requests as its rows carry them (adapters/metering.py).
        view["cost"] = estimate(summed(run.requests, *(s.requests for s in steps)))
    if run.definition.durable is not None:
        view["kind"] = "durable"
        view["paused"] = run.paused
        view["version"] = run.version
        if steps is not None:
            driver = next((s for s in steps if s.step == DRIVER), None)
            view["output"] = (load(driver) if driver is not None
                              and driver.status is StepStatus.SUCCESS else None)
            if driver is not None and driver.status is not StepStatus.SUCCESS and driver.error:
                view["error"] = view["error"] or driver.error
            view["waiting"] = None if driver is None or driver.status.terminal else driver.waiting
            view["waiting_for"] = waiting_for(driver)
            view["steps"] = durable_steps(journal or [], driver, shown)
        return view
    if steps is not None:
        by_name = {s.step: s for s in steps}
        order = run.definition.order()
        order += [n for n in by_name if n not in order]  # steps added at run time
        specs = run.definition.specs
        view["steps"] = [step_view(by_name.get(n), n, load,
                                   specs[n].deps if n in specs else ()) for n in order]
        # A rerun's steps carried over from the run it reruns (their output copied, not
        # called again) name that run.
        reused = run.definition.reused
        for s in view["steps"] if reused else ():
            if s["step"] in reused and s["status"] == StepStatus.SUCCESS.value:
                s["reused_from"] = reused[s["step"]]
    return view
