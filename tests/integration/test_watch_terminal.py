"""`orchestrator watch` in a real terminal: tmux runs the command as a user would, against a
real API over HTTP; the test reads the screen (capture-pane) and types (send-keys),
polling under deadlines. The screen shows the glyphs as the run advances, j moves the
selection, K then y kills the run, and the command exits by itself when the run ends,
with `trigger --wait`'s exit code. The step the test looks at while it runs holds at its
latch until the test opens it: a sleep could end before a loaded machine has started
the watch and drawn its screen."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.harness import Harness
from tests.support.terminal import ORCHESTRATOR, Terminal
from tests.support.testfns import Recorder

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="tmux is not installed (Debian: apt install tmux)")

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  slow:
    steps:
      first: { backend: fn, route: /echo }
      nap:   { backend: fn, route: /latch, dependsOn: [first] }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  quick:
    steps:
      one: { backend: fn, route: /latch }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for t in made:
        t.close()


def watch(terminals: list[Terminal], run_id: str, url: str) -> Terminal:
    t = Terminal([ORCHESTRATOR, "watch", run_id, "--url", url, "--interval", "0.2"])
    terminals.append(t)
    return t


def test_watch_shows_the_run_advance_and_exits_0_when_it_succeeds(
    api: tuple[Harness, str], terminals: list[Terminal], recorder: Recorder,
) -> None:
    h, url = api
    run_id = h.start("quick")
    t = watch(terminals, run_id, url)
    t.until(lambda s: "◐ one" in s and "○ two" in s, "one running, two blocked")
    t.until(lambda s: "▶ one" in s, "the first step selected, with its details")
    t.keys("j")
    t.until(lambda s: "▶ two" in s, "the selection moved to two")
    recorder.latch(run_id).set()
    screen = t.until(lambda s: "EXIT=" in s, "the command's exit")
    assert "EXIT=0" in screen and "✔ one" in screen and "✔ two" in screen, screen
    assert "─────▸" in screen  # the line from one to two


def test_K_then_y_kills_the_run_and_the_watch_exits_1(
    api: tuple[Harness, str], terminals: list[Terminal], recorder: Recorder,
) -> None:
    h, url = api
    run_id = h.start("slow")
    t = watch(terminals, run_id, url)
    t.until(lambda s: "◐ nap" in s and "✔ first" in s, "nap running")
    t.keys("K")
    t.until(lambda s: f"Kill run {run_id}? y/n" in s, "the confirmation")
    t.keys("n")
    t.until(lambda s: "not killed" in s, "the kill refused")
    assert h.rt.runs.view(run_id)["status"] == "running"
    t.keys("K")
    t.until(lambda s: f"Kill run {run_id}? y/n" in s, "the confirmation again")
    t.keys("y")
    t.until(lambda s: "kill requested" in s, "the kill requested")
    recorder.latch(run_id).set()
    # The call in flight lands (a cancel stops what has not started), then the run ends.
    screen = t.until(lambda s: "EXIT=" in s, "the command's exit", timeout=40.0)
    assert "EXIT=1" in screen and "killed" in screen and "⊘ after" in screen, screen
    assert h.wait(run_id)["status"] == "killed"


def test_the_selected_box_is_drawn_heavy_and_its_pane_shows_what_the_step_was_sent(
    api: tuple[Harness, str], terminals: list[Terminal], recorder: Recorder,
) -> None:
    h, url = api
    run_id = h.start("slow", {"day": "mon"})
    t = watch(terminals, run_id, url)
    t.until(lambda s: "◐ nap" in s and "✔ first" in s, "nap running")
    # The first step selected: its box, and only its, in heavy lines.
    screen = t.until(lambda s: "┃ ✔ first" in s, "first's box drawn heavy")
    assert "│ ◐ nap" in screen and "┏" in screen and screen.count("┏") == 1, screen
    assert '  sent: {"input":{"day":"mon"},"steps":{}}' in screen, screen
    t.keys("j")
    screen = t.until(lambda s: "┃ ◐ nap" in s, "the heavy box moved to nap")
    assert "│ ✔ first" in screen and screen.count("┏") == 1, screen
    # What nap was sent: the run's input and first's output (the echo of its request).
    sent = next(line for line in t.screen(joined=True).splitlines()
                if line.startswith("  sent: "))
    assert sent.startswith('  sent: {"input":{"day":"mon"},"steps":{"first":{'), sent
    recorder.latch(run_id).set()
    t.keys("q")
    t.until(lambda s: "EXIT=" in s, "the command's exit")
