"""Admission decisions (pure): the gate a new run needs, rendered from its input, a
waiting run's place (priority with ageing), and the throttle's slot math.
services/admission/gate.py applies them with conditional writes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.engine.definition import Gate, Limit, Throttle
from orchestrator.engine.policies import GroupPolicy, Overlap, ThrottlePolicy
from orchestrator.errors import UsageError
from orchestrator.expressions import ExpressionError, compile_template

__all__ = ["AGEING", "MAX_GATE_KEY", "MAX_PRIORITY", "effective_time", "gate_of",
           "priority_of", "render_key", "throttle_slot"]

MAX_GATE_KEY = 200
MAX_PRIORITY = 100
# Seconds of waiting a point of priority is worth: a run waits at most 100 x AGEING
# (10 minutes) longer than any run of a higher priority that arrived after it.
AGEING = 6.0


def throttle_slot(
    tat: float, now: float, *, limit: int, period: float, burst: int
) -> tuple[float, float]:
    """(start time, new tat) for one arrival: the generic cell-rate algorithm."""
    interval = period / limit
    tolerance = (burst - 1) * interval
    start = max(now, tat - tolerance)
    return start, max(tat, start) + interval


def gate_of(
    wf: Any, workflow: str, input: Any, overlap: str | None, fire_key: str,
    priority: int | None = None,
) -> Gate | None:
    """The admission a new run needs: its concurrency limits and throttle, with keys
    rendered from the run's input, and its priority (`priority`, a caller's, before the
    workflow's); None when it may start at once. A schedule fire's `overlap` (skip |
    replace) is a group of its own per fire key; the workflow's own concurrency limits
    take precedence."""
    try:
        gate = _gate(wf, workflow, input, overlap, fire_key)
        if gate is None or not gate.group:
            return gate
        chosen = priority if priority is not None else priority_of(wf, input)
        return replace(gate, priority=chosen) if chosen else gate
    except ExpressionError as exc:
        raise UsageError(f"workflow {workflow!r}: a concurrency or throttle key or the"
                         f" priority: {exc}") from None


def render_key(template: str, context: dict[str, Any], what: str) -> str:
    """A burst's or a batch's key rendered from its template (empty: ""), at most
    `MAX_GATE_KEY` characters; UsageError naming `what` otherwise."""
    try:
        key = compile_template(template).render(context) if template else ""
    except ExpressionError as exc:
        raise UsageError(f"{what}: {exc}") from None
    if len(key) > MAX_GATE_KEY:
        raise UsageError(f"{what} is longer than {MAX_GATE_KEY} characters once rendered")
    return key


def priority_of(wf: Any, input: Any) -> int:
    """The workflow's `priority` for this input: an integer, or a template rendering a
    number (clamped to 0-100; empty: 0)."""
    value = getattr(wf, "priority", 0) or 0
    if isinstance(value, int):
        return value
    text = compile_template(value).render({"input": input}).strip()
    if not text or text == "null":
        return 0
    try:
        number = float(text)
    except ValueError:
        raise UsageError(f"priority: {text[:40]!r} is not a number (0-100)") from None
    return int(min(MAX_PRIORITY, max(0, number)))


def effective_time(created_at: float, priority: int) -> float:
    """A waiting run's place among those waiting with it: its arrival, moved earlier by
    `AGEING` seconds a point of priority. A higher priority goes first, and a run
    waiting longer gains on every newer one: it is ahead of any run that arrives more
    than `AGEING` x (their difference in priority) seconds after it."""
    return created_at - AGEING * priority


def _gate(
    wf: Any, workflow: str, input: Any, overlap: str | None, fire_key: str
) -> Gate | None:
    context = {"input": input}
    limits = list(getattr(wf, "limits", None) or ())
    gate = Gate()
    if limits:
        rendered = [_limit(c, workflow, context, i) for i, c in enumerate(limits)]
        # A limit without a key of its own takes turns by the run's keyed limit's key.
        turns = next((c.key for c, spec in zip(rendered, limits, strict=True) if spec.key), "")
        rendered = [c if spec.key else replace(c, turns=turns)
                    for c, spec in zip(rendered, limits, strict=True)]
        first = rendered[0]
        gate = Gate(group=first.group, key=first.key, policy=first.policy, limit=first.limit,
                    turns=first.turns if first.turns != first.key else None,
                    more=tuple(rendered[1:]))
    elif overlap in (Overlap.SKIP, Overlap.REPLACE):
        gate = Gate(
            group=f"schedule:{workflow}",
            key=fire_key,
            policy=GroupPolicy.SKIP if overlap == Overlap.SKIP else GroupPolicy.CANCEL_RUNNING,
        )
    throttle = getattr(wf, "throttle", None)
    if throttle is not None:
        gate = replace(gate, throttle=Throttle(
            key=compile_template(throttle.key).render(context) if throttle.key else "",
            limit=throttle.limit,
            period=throttle.period,
            burst=throttle.burst,
            policy=ThrottlePolicy(throttle.policy),
        ))
    seen: set[str] = set()
    for limit in gate.limits:
        for name, value in (("group", limit.group), ("key", limit.key)):
            if len(value) > MAX_GATE_KEY:
                raise UsageError(
                    f"concurrency {name}: longer than {MAX_GATE_KEY} characters once rendered"
                )
        if limit.line_id in seen:
            raise UsageError(f"concurrency: two limits render to group {limit.group!r} key"
                             f" {limit.key!r}: give them groups or keys that differ")
        seen.add(limit.line_id)
    return None if gate.group is None and gate.throttle is None else gate


def _limit(spec: Any, workflow: str, context: dict[str, Any], index: int) -> Limit:
    """One concurrency limit rendered for a run; without `group`, the workflow's own:
    `workflow:<name>` for the first of its list, `workflow:<name>/<index>` for a later
    one (so a key that renders empty never shares another limit's item)."""
    if spec.group:
        # A group that renders empty (a missing input field) is still a group.
        group = compile_template(spec.group).render(context) or spec.group
    else:
        group = f"workflow:{workflow}" + (f"/{index}" if index else "")
    key = compile_template(spec.key).render(context) if spec.key else ""
    return Limit(group=group, key=key, limit=spec.limit, policy=GroupPolicy(spec.policy),
                 turns=key)
