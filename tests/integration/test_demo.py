"""The demo: reference 000's monthly report on the example functions, signed calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.examples.monthly_report import create_app
from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from tests.support.harness import Harness, fresh_settings, steps_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(build_harness: Any, tmp_path: Path) -> Iterator[tuple[Harness, Path]]:
    work = tmp_path / "work"
    secret = "demo-secret"
    with BackgroundServer(create_app(work_dir=work, secret=secret)) as fns:
        env = {"FUNCTIONS_URL": fns.url, "FUNCTIONS_SECRET": secret}
        h = build_harness((ROOT / "orchestrator.yml").read_text(), ROOT, env)
        try:
            yield h, work
        finally:
            h.close()


def test_monthly_report_end_to_end(demo: tuple[Harness, Path]) -> None:
    h, work = demo
    h.start_workers(threads=4)
    run_id = h.start("monthly-report", {"month": "2026-10"})
    view = h.wait(run_id, timeout=60)
    steps = steps_of(view)
    assert view["status"] == "success", view
    assert [s["step"] for s in view["steps"]] == [
        "extract-orders", "extract-users", "transform", "notify", "archive"]
    report = json.loads(Path(steps["transform"]["output"]["path"]).read_text())
    assert report["month"] == "2026-10"
    assert steps["extract-orders"]["output"]["count"] > 0
    outbox = (work / "outbox" / "slack.jsonl").read_text().splitlines()
    assert len(outbox) == 1
    assert Path(steps["archive"]["output"]["path"]).exists()


def test_wrong_secret_is_a_permanent_failure(emulator: Emulator, tmp_path: Path) -> None:
    with BackgroundServer(create_app(work_dir=tmp_path, secret="right")) as fns:
        env = {"FUNCTIONS_URL": fns.url, "FUNCTIONS_SECRET": "wrong"}
        h = Harness.build(
            fresh_settings(emulator.url), (ROOT / "orchestrator.yml").read_text(), ROOT, env
        )
        try:
            h.start_workers()
            view = h.wait(h.start("monthly-report"))
        finally:
            h.close()
    first: dict[str, Any] = view["steps"][0]
    assert view["status"] == "failed"
    assert first["error"]["status"] == 401
    assert first["attempts"] == 1
