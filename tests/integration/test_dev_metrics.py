"""`orchestrator dev` prints the address of the stack's metrics among its addresses, and
what is scraped there (with the stack's bearer key) is the whole stack's: its worker and
sweeper and API alive by their heartbeats, and a run started through its API counted once it
finished."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.cli.dev import LocalStack, StackOptions
from tests.support.polling import until

MANIFEST = """
backends:
  fn: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
"""

pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[LocalStack, list[str]]]:
    (tmp_path / "orchestrator.yml").write_text(MANIFEST)
    echoed: list[str] = []
    s = LocalStack(StackOptions(
        manifest=tmp_path / "orchestrator.yml", api_port=0, functions_port=0,
        scripts_port=None, emulator_port=0, one_core=False,
        functions_app="tests.support.lambda_fns:create_app",
        prefix=f"dm{uuid.uuid4().hex[:6]}",
        environ={"ORCH_HEARTBEAT_INTERVAL": "0.5"},
    ), echo=echoed.append)
    try:
        s.start()
        yield s, echoed
    finally:
        s.stop()


def test_dev_prints_the_metrics_address_and_it_serves_the_stacks_metrics(
        stack: tuple[LocalStack, list[str]]) -> None:
    s, echoed = stack
    line = next(line for line in echoed if line.startswith("metrics "))
    url = line.split()[1]
    assert url == f"{s.api_url}/metrics", echoed
    assert "Prometheus" in line and "bearer key" in line
    auth = {"Authorization": f"Bearer {s.api_key}"}
    with httpx.Client(timeout=10) as c:
        assert c.get(url).status_code == 401
        run = c.post(f"{s.api_url}/runs", json={"workflow": "hello", "input": {}},
                     headers=auth).json()

        def scraped() -> dict[tuple[str, str], float] | None:
            got = c.get(url, headers=auth)
            assert got.status_code == 200, got.text
            seen = {(x.name, ",".join(f"{k}={v}" for k, v in sorted(x.labels.items()))): x.value
                    for f in text_string_to_metric_families(got.text) for x in f.samples}
            done = seen.get(("orchestrator_runs_finished_total", "status=success,workflow=hello"))
            return seen if done == 1.0 else None

        seen = until(f"run {run['run_id']} counted in {url}", scraped, timeout=60)
    assert seen[("orchestrator_runs_started_total", "workflow=hello")] == 1.0
    assert seen[("orchestrator_processes_alive", "kind=worker")] >= 1.0
    assert seen[("orchestrator_processes_alive", "kind=sweeper")] == 1.0
    assert seen[("orchestrator_processes_alive", "kind=api")] == 1.0  # the API beats too
