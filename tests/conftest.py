from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from tests.support.harness import BuildHarness, Harness, fresh_settings
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


@pytest.fixture(scope="session")
def app_url() -> Iterator[str]:
    """tests/support/durable_fns.py's durable workflows, served by a real FunctionApp."""
    from tests.support.durable_fns import create_app as durable_app

    with BackgroundServer(durable_app()) as server:
        yield server.url


@pytest.fixture(scope="session")
def app_url_v1() -> Iterator[str]:
    """The same workflows served in version 1 of the durable protocol only (an SDK that
    predates checkpoint streams)."""
    from tests.support.durable_fns import create_app as durable_app

    with BackgroundServer(durable_app((1,))) as server:
        yield server.url


@pytest.fixture
def build_harness(emulator: Emulator) -> BuildHarness:
    """`build(manifest_text, tmp, env, **settings)`: a Harness on fresh resources. Here every
    service is the shared moto emulator and the resources come from CloudFormation; a test
    module may override this fixture to run the same tests on another endpoint
    (tests/integration/test_dynalite.py: DynamoDB on dynalite)."""

    def build(manifest_text: str, tmp: Path, env: dict[str, str],
              **settings: object) -> Harness:
        # The harness's own parts call the emulator in-process, as `orchestrator dev`'s
        # do; subprocesses a test starts reach it over HTTP.
        s = fresh_settings(emulator.url, **settings)
        return Harness.build(s, manifest_text, tmp, env, clients=emulator.attach(make_clients(s)))

    return build


@pytest.fixture
def harness_factory(build_harness: BuildHarness, testfns: str,
                    tmp_path: Path) -> Iterator[object]:
    made: list[Harness] = []

    def make(manifest_text: str, **settings: object) -> Harness:
        h = build_harness(manifest_text, tmp_path, {"FN": testfns}, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
