"""What a DAG run's step was sent, as the dashboard's step pane and `watch` show it: the
run's input and its dependencies' outputs by step name (the body's `input` and `steps`
of the function contract; its static payload is the step's own). Pure: the run's view
(GET /runs/{id}) in."""

from __future__ import annotations

from typing import Any

__all__ = ["sent_to"]


def sent_to(view: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """`{"input": the run's input, "steps": {dependency: its output}}` for `step`."""
    outputs = {s["step"]: s.get("output") for s in view.get("steps") or ()}
    return {"input": view.get("input"),
            "steps": {d: outputs.get(d) for d in step.get("depends_on") or ()}}
