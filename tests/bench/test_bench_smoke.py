"""The benchmark must keep running: a --quick pass prints every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def quick(script: str) -> dict[str, Any]:
    """The figures `tests/bench/<script> --quick --json` prints."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / script), "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.slow
def test_quick_benchmark_prints_its_figures() -> None:
    r = quick("run.py")
    for key in ("floor_ms", "w1", "w2", "w3", "fan10", "fan100", "worker_peak_rss_mib",
                "h1", "h2"):
        assert key in r
    assert 0 < r["h1"]["p50_ms"] <= r["h1"]["p99_ms"] and r["h1"]["p50_ratio_to_floor"] > 0
    assert r["h2"]["per_s"] > 0 and r["h2"]["requests_per_delivery"]["total"] > 0
    assert r["w1"]["per_step_ms"] > 0 and r["w1"]["ratio_to_floor"] > 0
    assert r["fan100"]["requests_per_step"]["total"] > 0
    assert set(r["targets"]) == {
        "w1_ratio_le_1.5", "requests_per_step_flat_10pct", "requests_per_step_le_6"}


@pytest.mark.slow
def test_quick_emulator_benchmark_prints_both_sides() -> None:
    r = quick("emulator.py")
    assert set(r) == {"stock", "memoized"}
    for side in r.values():
        assert set(side) == {"update", "get", "query", "wake"}
        assert all(v > 0 for v in side.values())
