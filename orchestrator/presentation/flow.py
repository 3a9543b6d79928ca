"""A workflow's flow control as `GET /workflows`, `workflows list` and the dashboard's
workflow page show it: its concurrency limits, priority, throttle, debounce, event
batch, cancel-on events and the limits of the backends it calls (`flow_of`, JSON), and
the same as short lines of text (`flow_lines`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["flow_lines", "flow_of"]

_FIELDS = ("throttle", "debounce", "batch", "cancel_on")


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


def flow_of(wf: Any, backends: Mapping[str, Any]) -> dict[str, Any]:
    """The flow-control fields the workflow declares (those it leaves out are absent)."""
    out: dict[str, Any] = {}
    limits = list(getattr(wf, "limits", None) or ())
    if limits:
        out["concurrency"] = [
            {"group": c.group, "key": c.key, "limit": c.limit, "policy": c.policy}
            for c in limits]
    priority = getattr(wf, "priority", 0)
    if priority:
        out["priority"] = priority
    for name in _FIELDS:
        value = getattr(wf, name, None)
        if value:
            out["cancelOn" if name == "cancel_on" else name] = _dump(value)
    called = _backends_called(wf)
    limited = {name: _dump(backends[name].limits) for name in called
               if name in backends and getattr(backends[name], "limits", None)}
    if limited:
        out["backends"] = limited
    return out


def _backends_called(wf: Any) -> list[str]:
    if getattr(wf, "backend", None):
        return [wf.backend]
    names = [getattr(s, "backend", None) for s in (getattr(wf, "steps", None) or {}).values()]
    return list(dict.fromkeys(n for n in names if n))


def flow_lines(flow: Mapping[str, Any]) -> list[str]:
    """The flow control in a line a control: `concurrency 3; 2 per tenant`."""
    lines = []
    limits = flow.get("concurrency") or []
    if limits:
        parts = []
        for c in limits:
            scope = f"group {c['group']}" if c.get("group") else ""
            per = f" per {c['key']}" if c.get("key") else ""
            policy = "" if c.get("policy", "queue") == "queue" else f" ({c['policy']})"
            parts.append(" ".join(p for p in (f"{c['limit']}{per}", scope) if p) + policy)
        lines.append("concurrency " + "; ".join(parts))
    if flow.get("priority"):
        lines.append(f"priority {flow['priority']}")
    if flow.get("throttle"):
        t = flow["throttle"]
        per = f" per {t['key']}" if t.get("key") else ""
        lines.append(f"throttle {t['limit']}/{t['period']:g}s{per}")
    if flow.get("debounce"):
        d = flow["debounce"]
        lines.append(f"debounce {d['period']:g}s")
    if flow.get("batch"):
        b = flow["batch"]
        lines.append(f"batch {b.get('size')} events or {float(b.get('timeout') or 0):g}s")
    for c in flow.get("cancelOn") or ():
        cond = f" if {c['if']}" if c.get("if") else ""
        lines.append(f"cancel on {c.get('event')}{cond}")
    for name, lim in (flow.get("backends") or {}).items():
        shown = ", ".join(f"{k} {v}" for k, v in lim.items())
        lines.append(f"backend {name}: {shown}")
    return lines
