"""A shell script's run is shown like any run: `show` lists its steps (a repeated
step by its label) and prints its log; `show --timeline` draws its waterfall; `history`
has its transitions; the dashboard's run page shows its steps and its log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from tests.support.harness import Harness, fresh_settings
from tests.support.scripts import ScriptStack, script_stack


@pytest.fixture(scope="module")
def saga(emulator: Emulator,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScriptStack, str]]:
    def build(manifest: str, tmp: Path, env: dict[str, str], **settings: object) -> Harness:
        s = fresh_settings(emulator.url, **settings)
        return Harness.build(s, manifest, tmp, env, clients=emulator.attach(make_clients(s)))

    with script_stack(build, tmp_path_factory.mktemp("views")) as s:
        res = s.cli("run", s.recipe("saga.sh"))
        assert res.exit_code == 1, res.output
        yield s, res.output.splitlines()[0].removeprefix("  run: ")


def test_show_lists_the_steps_by_label_and_prints_the_log(saga: tuple[ScriptStack, str]
                                                         ) -> None:
    s, run_id = saga
    out = s.cli("show", run_id, "--ascii").output.splitlines()
    assert "ok script saga  sha256 " in "\n".join(out)
    assert [line for line in out if " step " in line] == [
        "ok step book-flight  FL-881", "ok step book-hotel  HT-2207",
        "FAIL step book-car  exit 1: no cars left",
        "ok step cancel (HT-2207)  cancelled HT-2207", "ok step cancel (FL-881)  cancelled FL-881"]
    at = out.index("log:")
    assert out[at + 1:at + 4] == ["  no cars left", "  cancelled HT-2207", "  cancelled FL-881"]
    assert 'error: {"code":"script_failed","message":"script exited 1"}' in out


def test_show_timeline_draws_each_operation_on_one_scale(saga: tuple[ScriptStack, str]
                                                         ) -> None:
    s, run_id = saga
    res = s.cli("show", run_id, "--timeline", "--ascii")
    assert res.exit_code == 0, res.output
    rows = res.output.splitlines()
    named = [r.split("  ")[0] for r in rows if r.startswith("step ")]
    assert named == ["step book-flight", "step book-hotel", "step book-car",
                     "step cancel (HT-2207)", "step cancel (FL-881)"]
    bars = [r for r in rows if r.startswith("step ")]
    assert all("#" in r for r in bars) and "# running" in res.output


def test_history_and_the_dashboard_show_the_run(saga: tuple[ScriptStack, str]) -> None:
    s, run_id = saga
    history = s.cli("history", run_id).output
    assert "run.failed" in history and "script exited 1" in history
    page = httpx.get(f"{s.api}/ui/runs/{run_id}", follow_redirects=True)
    assert page.status_code == 200
    html = page.text
    assert "<h2>Log</h2>" in html and "cancelled HT-2207" in html and "book-car" in html
