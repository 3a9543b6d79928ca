"""Schedules, forEach, webhooks, concurrency groups and throttles apply to durable
workflows as to DAGs: each only decides when a run starts (and with which input)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.webhook_signing import sign
from tests.support.harness import Harness

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  grouped:
    backend: app
    workflow: approval
    concurrency: { group: "tenant-${{ input.tenant }}" }
  nightly:
    backend: app
    workflow: chain
    schedule: { every: 1h }
    forEach: { items: [{ steps: 1 }, { steps: 2 }], key: steps }
  limited:
    backend: app
    workflow: chain
    throttle: { limit: 1, period: 1h, policy: drop }
webhooks:
  kickoff:
    workflow: limited
    verify: { scheme: github, secrets: ["hook-secret"] }
    input: { steps: body.steps }
"""


@pytest.fixture
def h(build_harness: Any, app_url: str, tmp_path: Any) -> Iterator[Harness]:
    harness = build_harness(MANIFEST, tmp_path, {"APP": app_url})
    harness.start_workers(1, threads=4)
    harness.start_sweeper()
    yield harness
    harness.close()


def test_a_concurrency_group_queues_a_durable_run_behind_another(h: Harness) -> None:
    first = h.start("grouped", {"tenant": "t1"})
    second = h.start("grouped", {"tenant": "t1"})
    other = h.start("grouped", {"tenant": "t2"})
    assert h.rt.runs.get(second).status.value == "queued"
    assert h.rt.runs.get(other).status.value == "running"
    h.rt.signals.send(first, "approve", {"n": 1})
    assert h.wait(first)["output"] == {"decision": {"n": 1}}
    deadline = time.monotonic() + 15
    while h.rt.runs.get(second).status.value == "queued":
        assert time.monotonic() < deadline, "the queued run was never admitted"
        time.sleep(0.05)
    h.rt.signals.send(second, "approve", {"n": 2})
    assert h.wait(second)["output"] == {"decision": {"n": 2}}


def test_a_schedule_with_for_each_starts_one_durable_run_per_row(h: Harness) -> None:
    wf = h.rt.manifest.workflows["nightly"]
    started = h.rt.scheduler.fire("nightly", wf, time.time())
    assert len(started) == 2
    outputs = sorted(h.wait(r)["output"]["total"] for r in started)
    assert outputs == [0, 1]  # chains of 1 and 2 steps


def test_a_webhook_starts_a_durable_run_and_its_throttle_drops_the_next(h: Harness) -> None:
    with BackgroundServer(create_api(h.rt)) as api:
        runs = []
        for i in range(2):
            body = f'{{"steps": 3, "i": {i}}}'.encode()
            resp = httpx.post(f"{api.url}/webhooks/kickoff", content=body,
                              headers={**sign("github", "hook-secret", body, now=time.time()),
                                       "X-GitHub-Delivery": f"d-{i}"})
            assert resp.status_code == 202, resp.text
            runs.append(resp.json()["run_id"])
    assert h.wait(runs[0])["output"] == {"total": 3}
    assert h.wait(runs[1])["status"] == "skipped"  # over the throttle's rate: dropped
