"""`orchestrator show` in real terminals 30, 40 and 60 columns wide (tmux, as a user
runs it, against a real API over HTTP): every line it prints fits the terminal, so the
terminal wraps none (read back with tmux's -J, which joins what it wrapped), and no
piece is lost: the header's fields, each step and its other dependencies, the legend or
a failed run's errors, and the cost's figures."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from rich.cells import cell_len

from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from orchestrator.api.app import create_app
from tests.support.harness import Harness, fresh_settings
from tests.support.terminal import ORCHESTRATOR, Terminal

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (Debian: apt install tmux)")

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  monthly-report:
    steps:
      extract-orders: { backend: fn, route: /check }
      extract-users:  { backend: fn, route: /echo }
      transform: { backend: fn, route: /echo, dependsOn: [extract-orders, extract-users] }
      notify:    { backend: fn, route: /echo, dependsOn: [transform] }
      archive:   { backend: fn, route: /echo, dependsOn: [transform] }
"""


@pytest.fixture(scope="module")
def runs(emulator: Emulator, testfns: str, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Harness, str, str, str]]:
    """A failed run and its successful rerun, shown by each test (one per width)."""
    s = fresh_settings(emulator.url)
    h = Harness.build(s, MANIFEST, tmp_path_factory.mktemp("show"), {"FN": testfns},
                      clients=emulator.attach(make_clients(s)))
    try:
        h.start_workers()
        bad = h.start("monthly-report", {"ok": False})
        assert h.wait(bad)["status"] == "failed"
        good = h.rt.runs.rerun(bad, input={"ok": True})[0].run_id
        assert h.wait(good)["status"] == "success"
        with BackgroundServer(create_app(h.rt)) as server:
            yield h, server.url, bad, good
    finally:
        h.close()


def whole(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("width", [30, 40, 60])
def test_every_line_show_prints_fits_the_terminal_and_nothing_is_lost(
        runs: tuple[Harness, str, str, str], width: int) -> None:
    h, url, bad, good = runs
    t = Terminal([ORCHESTRATOR, "show", bad, "--url", url, ";",
                  ORCHESTRATOR, "show", good, "--url", url], width=width, height=150)
    try:
        t.until(lambda s: "EXIT=" in s, "the command's exit")
        screen = t.screen(joined=True)
    finally:
        t.close()
    assert "EXIT=0" in screen, screen
    lines = [line.rstrip() for line in screen.splitlines()]
    wide = [line for line in lines if cell_len(line) > width]
    assert not wide, f"wider than {width} (the terminal wrapped them):\n" + "\n".join(wide)
    text = whole(screen)
    for run_id in (bad, good):
        view = h.rt.runs.view(run_id)
        cost = view["cost"]
        pieces = [f"monthly-report ✖ failed {bad}" if run_id == bad
                  else f"monthly-report ✔ success {good}", "elapsed",
                  f"cost: {cost['total_requests']} AWS requests",
                  f"at the prices of {cost['prices_date']}"]
        pieces += [f"{op} {n}" for op, n in list(cost["requests"].items())[:3]]
        pieces += [s["step"] for s in view["steps"]]
        for piece in pieces:
            assert whole(piece) in text, f"{piece!r} lost:\n{screen}"
    assert whole(f"trigger rerun rerun of {bad}") in text
    assert whole("✔ success   ✖ failed   ◐ running   ○ blocked   ⊘ skipped") in text
    assert whole("extract-orders: {") in text and whole("input.ok must be true") in text
    if width < 60:  # the dependency list names each step's other dependencies
        assert whole("✔ transform done (after extract-users)") in text
