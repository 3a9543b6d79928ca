"""Throttling loses nothing and does nothing twice (issue 39): a wide fan-out in one run,
on an emulator whose AWS model gives a partition a few write units a second, so that the
run's own partition is throttled past botocore's retries. Every step's function is called
exactly once (an attempt's record is sent again while its lease lasts:
services/execution/recording.py) and the run succeeds. Real moto, real uvicorn."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from infra.emulator.modelled import AwsTiming
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.adapters.metering import install
from orchestrator.services.execution import recording
from tests.support.aws_model import model_data, validated
from tests.support.harness import Harness, fresh_settings

pytestmark = pytest.mark.slow

WIDTH = 24


class Calls:
    """Counts the calls a step's function gets, by run and step."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()

    def app(self) -> Starlette:
        async def noop(request: Request) -> JSONResponse:
            run = json.loads(await request.body())["run"]
            with self.lock:
                self.seen[(run["run_id"], run["step"])] += 1
            return JSONResponse({"ok": True})
        return Starlette(routes=[Route("/noop", noop, methods=["POST"])])


@pytest.fixture
def throttling() -> Iterator[Emulator]:
    data = model_data(fast=True, write_units_per_second=6, read_units_per_second=200)
    with Emulator(model=AwsTiming(validated(data), seed=5)) as emulator:
        yield emulator


def _one_retry(clients: Clients) -> Clients:
    """The orchestrator's clients, but DynamoDB's retries a throttled request once (four
    sends in `make_clients`): a throttled record then reaches the orchestrator's own
    resend at once, not only when botocore's backoff happens to fall short."""
    config = clients.dynamodb.meta.config.merge(
        Config(retries={"mode": "standard", "max_attempts": 2}))
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name=clients.dynamodb.meta.region_name)
    dynamodb = session.client("dynamodb", endpoint_url=clients.dynamodb.meta.endpoint_url,
                              config=config)
    return replace(clients, dynamodb=install(dynamodb))


def test_a_throttled_fan_out_calls_every_step_once(throttling: Emulator, tmp_path: Path) -> None:
    calls = Calls()
    steps = ["      start: { backend: fn, route: /noop }"]
    steps += [f"      f{i}: {{ backend: fn, route: /noop, dependsOn: [start] }}"
              for i in range(WIDTH)]
    steps.append("      join: { backend: fn, route: /noop, dependsOn: ["
                 + ", ".join(f"f{i}" for i in range(WIDTH)) + "] }")
    text = ("backends:\n  fn: { url: \"${FN}\" }\nworkflows:\n  fan:\n    steps:\n"
            + "\n".join(steps))
    sent_again = recording.resends()
    with BackgroundServer(calls.app()) as fn:
        settings = fresh_settings(throttling.url)
        h = Harness.build(settings, text + "\n", tmp_path, {"FN": fn.url},
                          clients=throttling.attach(_one_retry(make_clients(settings))))
        try:
            h.start_workers(threads=8)
            h.start_sweeper()
            run_id = h.rt.runs.start("fan", {})[0].run_id
            deadline = time.monotonic() + 240
            while h.rt.runs.get(run_id).status.value in ("queued", "running"):
                assert time.monotonic() < deadline, "the throttled run did not end"
                time.sleep(0.2)
            assert h.rt.runs.get(run_id).status.value == "success"
        finally:
            h.close()
    assert throttling.timing is not None
    assert throttling.timing.stats.snapshot()["throttled_total"] > 0  # it was throttled
    assert recording.resends() > sent_again  # and records were sent again, past botocore's
    assert len(calls.seen) == WIDTH + 2
    assert set(calls.seen.values()) == {1}, [k for k, n in calls.seen.items() if n > 1]
