"""The dashboard's layouts (orchestrator/api/ui/layout.py): columns by longest path, an
order that uncrosses a fan-in, edges from box to box; a waterfall that squeezes idle
gaps and zooms to a window."""

from __future__ import annotations

from typing import Any

from orchestrator.api.ui.layout import AXIS_W, BOX_W, graph, waterfall


def _steps(deps: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [{"step": n, "status": "success", "depends_on": d} for n, d in deps.items()]


def test_columns_go_by_longest_path_and_a_fan_in_is_ordered_under_its_parents() -> None:
    g = graph(_steps({"a": [], "b": [], "x": ["b"], "y": ["a"], "end": ["a", "x"]}))
    at = {b.name: b for b in g.boxes}
    assert at["a"].x == at["b"].x < at["y"].x == at["x"].x < at["end"].x
    # y hangs from a (row 0), x from b (row 1): y is drawn above x, so no edge crosses.
    assert at["y"].y < at["x"].y
    assert len(g.edges) == 4
    assert g.width >= at["end"].x + BOX_W


def test_a_200_step_fan_out_is_one_column_of_200() -> None:
    deps = {"start": [], **{f"s{i:03}": ["start"] for i in range(200)}}
    g = graph(_steps(deps))
    xs = {b.x for b in g.boxes if b.name != "start"}
    assert len(xs) == 1 and len(g.edges) == 200


def _view(end: float) -> dict[str, Any]:
    return {"started_at": 100.0, "finished_at": 100.0 + end,
            "steps": [{"step": "a", "status": "success"}, {"step": "b", "status": "success"}]}


def _history() -> list[dict[str, Any]]:
    return [
        {"step": "a", "type": "step.ready", "at": 100.0},
        {"step": "a", "type": "step.started", "at": 100.5},
        {"step": "a", "type": "step.succeeded", "at": 101.0},
        {"step": "b", "type": "step.ready", "at": 160.0},  # a minute of nothing before
        {"step": "b", "type": "step.started", "at": 160.0},
        {"step": "b", "type": "step.succeeded", "at": 161.0},
    ]


def test_an_idle_minute_is_squeezed_and_shown_as_a_gap() -> None:
    shown = waterfall(_view(61.0), _history(), now=0.0)
    assert len(shown.gaps) == 1 and round(shown.gaps[0][1]) == 59
    call_a = next(b for b in shown.bars if b.row == 0 and b.kind == "call")
    call_b = next(b for b in shown.bars if b.row == 1 and b.kind == "call")
    # Squeezed, each one-second call is a visible share of the axis, not 1/61 of it.
    assert call_a.w > AXIS_W / 5 and call_b.w > AXIS_W / 5
    plain = waterfall(_view(61.0), _history(), now=0.0, collapse=False)
    assert plain.gaps == []
    assert next(b for b in plain.bars if b.row == 0 and b.kind == "call").w < AXIS_W / 50


def test_a_window_zooms_to_its_seconds() -> None:
    shown = waterfall(_view(61.0), _history(), now=0.0, window=(0.0, 1.0), collapse=False)
    assert (shown.t0, shown.t1) == (0.0, 1.0)
    queue, call = (next(b for b in shown.bars if b.row == 0 and b.kind == k)
                   for k in ("queue", "call"))
    assert queue.x == 0 and abs(call.x - AXIS_W / 2) < 1 and abs(call.w - AXIS_W / 2) < 1
    assert all(b.row == 0 for b in shown.bars)  # b ran after the window


def test_a_short_runs_axis_is_in_ms() -> None:
    from orchestrator.api.ui.layout import seconds

    assert [seconds(s) for s in (0.0, 0.044, 0.9994, 2.5, 75.0)] == [
        "0ms", "44ms", "999ms", "2.5s", "75s"]
