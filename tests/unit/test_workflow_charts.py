"""A workflow page's numbers (issue 42, section 3): a percentile estimated from the step
duration histogram's buckets (linear inside the bucket where the rank falls, the last
bound past it), a failed run grouped by its step's error code, and the server-drawn SVG
charts: bars proportional to the counts and stacked by status, lines with gaps where a
bucket has nothing, every chart titled."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.adapters.tallies import DURATION_BUCKETS, bucket_attr
from orchestrator.api.ui.charts import (
    LEFT,
    PLOT_H,
    PLOT_W,
    latency_chart,
    rate_chart,
    runs_chart,
)
from orchestrator.api.ui.render import macros
from orchestrator.services.health.latency import bucket_counts, quantile
from orchestrator.services.health.workflow_stats import error_code, summary

INF = len(DURATION_BUCKETS)


def hist(**by_index: float) -> list[float]:
    return bucket_counts({bucket_attr(int(i[1:])): n for i, n in by_index.items()})


def test_a_quantile_interpolates_inside_the_bucket_where_its_rank_falls() -> None:
    # 10 in (0.01, 0.025], 10 in (0.05, 0.1]: the median's rank (10) closes the first.
    h = hist(b2=10, b4=10)
    assert quantile(0.5, h) == pytest.approx(0.025)
    assert quantile(0.95, h) == pytest.approx(0.05 + 0.05 * 9 / 10)
    assert quantile(0.25, h) == pytest.approx(0.01 + 0.015 * 5 / 10)
    # The first bucket starts at 0; past the last bound only that bound is known.
    assert quantile(0.5, hist(b0=4)) == pytest.approx(0.0025)
    assert quantile(0.95, hist(b0=1, **{f"b{INF}": 99})) == DURATION_BUCKETS[-1]
    assert quantile(0.5, hist()) is None


def test_a_summary_counts_runs_rates_and_latency() -> None:
    s = summary({"started": 5, "finished_success": 3, "finished_failed": 1,
                 bucket_attr(3): 2})
    assert s["finished"] == {"success": 3, "failed": 1, "killed": 0, "skipped": 0}
    assert s["success_rate"] == 0.75 and s["steps"] == 2
    assert s["p50"] == pytest.approx(0.0375)
    assert summary({})["success_rate"] is None and summary({})["p95"] is None


def test_a_run_failed_by_a_step_is_grouped_by_the_steps_code() -> None:
    assert error_code({"code": "step_failed", "reason": {"code": "timeout"}}) == "timeout"
    assert error_code({"code": "step_failed", "reason": None}) == "step_failed"
    assert error_code({"code": "boom"}) == "boom" and error_code({}) == "unknown"


def bucket(start: float, **finished: int) -> dict[str, Any]:
    ended = sum(finished.values())
    return {"start": start, "finished": finished,
            "success_rate": None if not ended else finished.get("success", 0) / ended,
            "p50": 0.01 * ended if ended else None, "p95": 0.02 * ended if ended else None}


BUCKETS = [bucket(0, success=4), bucket(3600), bucket(7200, success=1, failed=1)]


def test_the_runs_bars_are_proportional_and_stacked_by_status() -> None:
    chart = runs_chart(BUCKETS, 3600)
    assert not chart.empty
    assert [b.status for b in chart.bars] == ["success", "success", "failed"]
    first, ok, failed = chart.bars
    # 4 runs fill the axis (its top is 5): 4/5 of the plot; 1 run a quarter of that.
    assert ok.h == pytest.approx(first.h / 4, abs=0.1)
    assert failed.h == pytest.approx(ok.h, abs=0.1)
    assert first.y + first.h == pytest.approx(ok.y + ok.h)  # on the same base line
    assert failed.y + failed.h == pytest.approx(ok.y, abs=0.1)  # stacked on top
    # Each bucket in its own slot, left to right; the empty one draws nothing.
    slot = PLOT_W / 3
    assert first.x == pytest.approx(LEFT + slot * 0.15, abs=0.1)
    assert ok.x == pytest.approx(LEFT + 2 * slot + slot * 0.15, abs=0.1)
    assert len({b.x for b in chart.bars}) == 2
    assert first.h == pytest.approx(PLOT_H * 4 / 5, abs=0.1)
    assert runs_chart([bucket(0)], 3600).empty


def test_the_lines_leave_a_gap_where_a_bucket_has_nothing() -> None:
    rate = rate_chart(BUCKETS, 3600)
    (line,) = rate.series
    assert len(line.segments) == 2 and len(line.dots) == 2
    # 100% at the plot's top, 50% half way down.
    (_, top, _), (_, half, _) = line.dots
    bottom = rate.y_ticks[0][0]
    assert bottom - half == pytest.approx((bottom - top) / 2, abs=0.1)
    latency = latency_chart(BUCKETS, 3600)
    assert [s.name for s in latency.series] == ["p50", "p95"]
    assert latency.y_ticks[-1][1] == "100 ms"  # the highest p95 (80 ms), rounded up


def test_each_chart_is_drawn_titled_with_its_numbers() -> None:
    svg = str(macros("_charts.html").chart(runs_chart(BUCKETS, 3600), "t", "Runs"))
    assert 'role="img" aria-labelledby="t-title"' in svg
    assert '<title id="t-title">Runs ended, by status</title>' in svg
    assert svg.count("<rect") == 3 and "<title>00:00: 4 success</title>" in svg
    empty = str(macros("_charts.html").chart(rate_chart([bucket(0)], 3600), "e", "Rate"))
    assert "Success rate: nothing in this window" in empty and "<circle" not in empty
