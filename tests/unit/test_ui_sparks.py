"""A workflow's sparkline (orchestrator/api/ui/sparks.py): a bar a run, oldest on the
left, as tall as the run took against the longest, each with its status; a run still
going as long as it has been going."""

from __future__ import annotations

from orchestrator.api.ui.sparks import BAR_W, FLOOR, GAP, HEIGHT, sparkline


def run(run_id: str, status: str, start: float, end: float | None) -> dict[str, object]:
    return {"run_id": run_id, "status": status, "created_at": start - 0.1,
            "started_at": start, "finished_at": end}


def test_a_bar_a_run_oldest_first_as_tall_as_it_took() -> None:
    newest_first = [run("c", "running", 100.0, None), run("b", "failed", 50.0, 52.0),
                    run("a", "success", 10.0, 11.0)]
    s = sparkline(newest_first, now=104.0)
    assert [b.run_id for b in s.bars] == ["a", "b", "c"]
    assert [b.status for b in s.bars] == ["success", "failed", "running"]
    assert [b.x for b in s.bars] == [0, BAR_W + GAP, 2 * (BAR_W + GAP)]
    assert s.longest == 4.0 and s.bars[2].h == HEIGHT and s.bars[2].y == 0
    # Heights go with the time taken: 1 s of 4 s, 2 s of 4 s (above a floor of FLOOR px).
    assert s.bars[0].h == FLOOR + (HEIGHT - FLOOR) / 4 and s.bars[0].y == HEIGHT - s.bars[0].h
    assert s.bars[1].h == FLOOR + (HEIGHT - FLOOR) / 2
    assert s.counts == {"success": 1, "failed": 1, "running": 1}
    assert s.width == 3 * BAR_W + 2 * GAP and s.height == HEIGHT


def test_no_run_no_bar_and_instant_runs_still_show() -> None:
    assert sparkline([], now=1.0).bars == []
    s = sparkline([run("a", "success", 5.0, 5.0)], now=9.0)
    assert s.bars[0].h == FLOOR and s.longest == 0.0
