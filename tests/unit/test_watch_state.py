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
    assert 'error: {"code":"http_error"}' in s.details()[1]
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
