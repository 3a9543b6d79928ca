"""The watch screen's state apart from the terminal (orchestrator/cli/watch.py): keys move
the selection within the steps, K asks before it kills, and only y confirms."""

from __future__ import annotations

from orchestrator.cli.watch import WatchState


def state(status: str = "running") -> WatchState:
    return WatchState({"run_id": "r-1", "status": status, "steps": [
        {"step": "a", "status": "success", "attempts": 1, "output": {"n": 1}},
        {"step": "b", "status": "failed", "attempts": 2, "error": {"code": "http_error"}},
    ]})


def test_the_selection_moves_within_the_steps() -> None:
    s = state()
    assert s.details()[0].startswith("▶ a")
    for key in ("down", "j", "j"):
        s.key(key)
    assert s.selected == 1 and s.details()[0].startswith("▶ b")
    assert '  error: {"code":"http_error"}' in s.details()
    for key in ("up", "k", "k"):
        s.key(key)
    assert s.selected == 0


def test_K_asks_first_and_only_y_kills() -> None:
    s = state()
    assert s.key("K") is None and s.confirming
    assert s.key("n") is None and not s.confirming and s.message == "not killed"
    s.key("K")
    assert s.key("y") == "kill"
    assert s.key("r") == "refresh" and s.key("q") == "quit"


def test_a_finished_run_is_not_offered_a_kill() -> None:
    s = state("success")
    assert s.key("K") is None and not s.confirming
    assert "success already" in s.message


def test_the_selected_step_shows_what_it_was_sent() -> None:
    s = WatchState({"run_id": "r-1", "status": "running", "input": {"day": "mon"}, "steps": [
        {"step": "a", "status": "success", "attempts": 1, "output": {"n": 1},
         "depends_on": []},
        {"step": "b", "status": "running", "attempts": 1, "depends_on": ["a"]},
    ]})
    assert s.details()[1] == '  sent: {"input":{"day":"mon"},"steps":{}}'
    s.key("j")
    assert s.details()[1] == '  sent: {"input":{"day":"mon"},"steps":{"a":{"n":1}}}'
    durable = WatchState({"run_id": "r-2", "kind": "durable", "status": "running",
                          "input": {"x": 1}, "steps": [{"step": "op", "status": "success"}]})
    assert not any("sent:" in line for line in durable.details())


def test_the_selected_box_is_drawn_in_heavy_lines_and_only_it() -> None:
    from orchestrator.cli.diagram import render_diagram

    view = {"run_id": "r-1", "workflow": "w", "status": "running", "steps": [
        {"step": "first", "status": "success", "attempts": 1, "depends_on": []},
        {"step": "second", "status": "running", "attempts": 1, "depends_on": ["first"]}]}
    plain = render_diagram(view, width=100)
    assert "┏" not in plain and "┃" not in plain
    drawn = render_diagram(view, width=100, selected="second")
    heavy = [line for line in drawn.splitlines() if "┃" in line]
    assert [line.count("┃") for line in heavy] == [2, 2]
    assert "┃ ◐ second           ┃" in heavy[0] and "│ ✔ first            │" in heavy[0]
    assert drawn.count("┏") == 1 and drawn.count("┛") == 1
    assert drawn.replace("┏", "┌").replace("┓", "┐").replace("┗", "└").replace(
        "┛", "┘").replace("━", "─").replace("┃", "│") == plain
    ascii_text = render_diagram(view, width=100, ascii_only=True, selected="first")
    assert "#" in ascii_text and "====" in ascii_text
