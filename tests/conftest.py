from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from tests.support.harness import Harness, fresh_settings
from tests.support.testfns import Recorder, create_app


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    with Emulator() as emu:
        yield emu


@pytest.fixture(scope="session")
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="session")
def testfns(recorder: Recorder) -> Iterator[str]:
    with BackgroundServer(create_app(recorder)) as server:
        yield server.url


@pytest.fixture
def harness_factory(emulator: Emulator, testfns: str, tmp_path: Path) -> Iterator[object]:
    made: list[Harness] = []

    def make(manifest_text: str, **settings: object) -> Harness:
        # The harness's own parts call the emulator in-process, as `orchestrator dev`'s
        # do; subprocesses a test starts reach it over HTTP.
        s = fresh_settings(emulator.url, **settings)
        h = Harness.build(s, manifest_text, tmp_path, {"FN": testfns},
                          clients=emulator.attach(make_clients(s)))
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
