"""Admission decisions (pure): the gate a new run needs, rendered from its input, and
the throttle's slot math. services/admission/gate.py applies them with conditional writes."""

from __future__ import annotations

from typing import Any

from orchestrator.engine.definition import Gate, Throttle
from orchestrator.engine.policies import GroupPolicy, Overlap, ThrottlePolicy
from orchestrator.errors import UsageError
from orchestrator.expressions import ExpressionError, compile_template

__all__ = ["MAX_GATE_KEY", "gate_of", "throttle_slot"]

MAX_GATE_KEY = 200


def throttle_slot(
    tat: float, now: float, *, limit: int, period: float, burst: int
) -> tuple[float, float]:
    """(start time, new tat) for one arrival: the generic cell-rate algorithm."""
    interval = period / limit
    tolerance = (burst - 1) * interval
    start = max(now, tat - tolerance)
    return start, max(tat, start) + interval


def gate_of(
    wf: Any, workflow: str, input: Any, overlap: str | None, fire_key: str
) -> Gate | None:
    """The admission a new run needs: its concurrency group and throttle, with keys
    rendered from the run's input; None when it may start at once. A schedule fire's
    `overlap` (skip | replace) is a group of its own per fire key; the workflow's own
    concurrency group takes precedence."""
    try:
        return _gate(wf, workflow, input, overlap, fire_key)
    except ExpressionError as exc:
        raise UsageError(f"workflow {workflow!r}: a concurrency or throttle key: {exc}") from None


def _gate(
    wf: Any, workflow: str, input: Any, overlap: str | None, fire_key: str
) -> Gate | None:
    context = {"input": input}
    group = getattr(wf, "group", None)
    gate = Gate()
    if group is not None:
        gate = Gate(
            # A group that renders empty (a missing input field) is still a group.
            group=compile_template(group.group).render(context) or group.group,
            key=compile_template(group.key).render(context) if group.key else "",
            policy=GroupPolicy(group.policy),
        )
    elif overlap in (Overlap.SKIP, Overlap.REPLACE):
        gate = Gate(
            group=f"schedule:{workflow}",
            key=fire_key,
            policy=GroupPolicy.SKIP if overlap == Overlap.SKIP else GroupPolicy.CANCEL_RUNNING,
        )
    throttle = getattr(wf, "throttle", None)
    if throttle is not None:
        gate = Gate(gate.group, gate.key, gate.policy, Throttle(
            key=compile_template(throttle.key).render(context) if throttle.key else "",
            limit=throttle.limit,
            period=throttle.period,
            burst=throttle.burst,
            policy=ThrottlePolicy(throttle.policy),
        ))
    for name, value in (("group", gate.group or ""), ("key", gate.key)):
        if len(value) > MAX_GATE_KEY:
            raise UsageError(
                f"concurrency {name}: longer than {MAX_GATE_KEY} characters once rendered"
            )
    return None if gate.group is None and gate.throttle is None else gate
