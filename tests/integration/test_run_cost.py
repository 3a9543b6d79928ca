"""What a run cost (issue 23, section 4): each run's AWS requests, counted where they are
made (adapters/metering.py) and stored by the run's own writes, equal an independent
count of the requests made for it; the API shows them priced, `show` prints them and
`runs WORKFLOW --cost` sums them."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.aws import make_clients
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.api.app import create_app
from orchestrator.prices import PRICES, PRICES_DATE
from orchestrator.services.reads.cost import estimate
from tests.support.cli import cli, out_json
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
      three: { backend: fn, route: /echo, dependsOn: [two] }
  diamond:
    steps:
      top: { backend: fn, route: /echo }
      left: { backend: fn, route: /echo, dependsOn: [top] }
      right: { backend: fn, route: /echo, dependsOn: [top] }
      join: { backend: fn, route: /echo, dependsOn: [left, right] }
      side: { backend: fn, route: /echo }
"""


class Tap:
    """A second, test-side count of every request the runtime's clients make (botocore's
    own event, one handler of the test's on each client), while `on`."""

    def __init__(self, clients: Any) -> None:
        self.counts: Counter[str] = Counter()
        self.on = False
        self.lock = threading.Lock()
        for client in (clients.dynamodb, clients.sqs, clients.s3):
            client.meta.events.register("request-created", self._seen,
                                        unique_id="test-tap")

    def _seen(self, event_name: str = "", **_: Any) -> None:
        if self.on:
            with self.lock:
                self.counts[event_name.split(".", 1)[1]] += 1


def drive(h: Harness, run_id: str, deadline: float = 30.0) -> None:
    """Run `run_id` to its end as a Lambda event source mapping would: its messages
    received and deleted, and its status looked at, by clients of the test's own (not
    the runtime's, whose requests are counted), each message handed to the worker
    inside a folding scope."""
    own = make_clients(h.rt.settings)
    queues = Queues(own.sqs, h.rt.settings.names)
    store = Store(own.dynamodb, h.rt.settings.names)
    worker = h.rt.worker()
    end = time.monotonic() + deadline
    while store.runs.get_run(run_id, time.time()).status.value == "running":
        assert time.monotonic() < end, f"run {run_id} did not end"
        for url in (queues.dispatch_url, queues.timer_url):
            got = queues.receive(url, wait=0)
            with worker.folding():
                for item in got:
                    assert item.message is not None
                    worker.handle(item.message)
            if got:
                queues.delete(url, [g.receipt for g in got])


@pytest.mark.parametrize("workflow", ["chain", "diamond"])
def test_a_runs_counts_equal_an_independent_count(harness_factory: Any, workflow: str) -> None:
    h = harness_factory(MANIFEST)
    tap = Tap(h.rt.clients)
    tap.on = True
    run, _ = h.rt.runs.start(workflow, {"n": 1})
    # A read outside any run's work (a follower's) is no run's: the tap is off for it.
    tap.on = False
    running = h.rt.runs.get(run.run_id)
    assert running.requests, "the start's requests ride on the run's row"
    tap.on = True
    drive(h, run.run_id)
    tap.on = False
    view = h.rt.runs.view(run.run_id)
    assert view["status"] == "success"
    assert view["cost"]["requests"] == dict(tap.counts), (view["cost"], tap.counts)
    assert view["cost"]["total_requests"] == sum(tap.counts.values())
    # Priced with the benchmark's table.
    assert view["cost"] == estimate(tap.counts)
    assert view["cost"]["prices_date"] == PRICES_DATE
    writes = sum(n for op, n in tap.counts.items()
                 if op.split(".")[1] in ("PutItem", "UpdateItem", "BatchWriteItem"))
    assert view["cost"]["dollars"] >= writes * PRICES["dynamodb_write_unit"]


DURABLE = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  chain: { backend: app }
  fanout: { backend: app }
"""


@pytest.mark.parametrize(("workflow", "payload"), [
    ("chain", {"steps": 5}), ("fanout", {"n": 4, "hold": 0.01})])
def test_a_durable_runs_counts_equal_an_independent_count(
        build_harness: Any, app_url: str, tmp_path: Any, workflow: str,
        payload: dict[str, Any]) -> None:
    h = build_harness(DURABLE, tmp_path, {"APP": app_url})
    try:
        tap = Tap(h.rt.clients)
        tap.on = True
        run, _ = h.rt.runs.start(workflow, payload)
        drive(h, run.run_id)
        tap.on = False
        view = h.rt.runs.view(run.run_id)
        assert view["status"] == "success", view
        assert view["cost"]["requests"] == dict(tap.counts), (view["cost"], tap.counts)
        assert view["cost"]["total_requests"] >= 4
    finally:
        h.close()


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=4)
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def test_api_show_and_runs_cost(api: tuple[Harness, str]) -> None:
    _, url = api
    ids = []
    for n in (1, 2):
        res = cli("run", "chain", "--input", json.dumps({"n": n}), "--wait", "--json",
                  "--url", url)
        assert res.exit_code == 0, res.output
        ids.append(json.loads(res.output)["run_id"])
    with httpx.Client(base_url=url, timeout=30) as c:
        views = [c.get(f"/runs/{i}").json() for i in ids]
        alone = c.get(f"/runs/{ids[0]}", params={"steps": "false"}).json()
    assert "cost" not in alone  # the run's row alone does not hold its cost
    for view in views:
        cost = view["cost"]
        assert set(cost) == {"requests", "total_requests", "dollars", "prices_date"}
        assert cost["prices_date"] == PRICES_DATE
        # At least each step's claim (or promotion) and record, and the start's row.
        assert cost["requests"]["dynamodb.PutItem"] >= 1
        assert cost["total_requests"] == sum(cost["requests"].values()) >= 7
        assert list(cost["requests"].values()) == sorted(cost["requests"].values(),
                                                         reverse=True)
        assert 0 < cost["dollars"] < 0.001

    res = cli("show", ids[0], "--url", url, "--ascii")
    assert res.exit_code == 0, res.output
    # The last line, wrapped to the width (100 when piped): its lines joined again.
    line = " ".join(x.strip() for x in res.output.split("\ncost: ", 1)[1].splitlines())
    line = f"cost: {line}"
    assert all(len(x) <= 100 for x in res.output.splitlines())
    top = next(iter(views[0]["cost"]["requests"]))
    assert line.startswith(f"cost: {views[0]['cost']['total_requests']} AWS requests, ~$0.0")
    assert top in line and PRICES_DATE in line
    # --json is as it was.
    assert set(out_json(cli("show", ids[0], "--json", "--url", url))) == {
        "run_id", "workflow", "status", "steps"}

    # Summed over the workflow's runs, both spellings.
    total = out_json(cli("runs", "chain", "--cost", "--json", "--url", url))
    again = out_json(cli("runs", "list", "chain", "--cost", "--json", "--url", url))
    assert total == again
    assert total["runs"] == 2 and total["uncounted"] == 0
    want = Counter(views[0]["cost"]["requests"]) + Counter(views[1]["cost"]["requests"])
    assert total["cost"]["requests"] == dict(want)
    assert total["cost"]["total_requests"] == sum(want.values())
    assert total["cost"]["dollars"] == pytest.approx(
        views[0]["cost"]["dollars"] + views[1]["cost"]["dollars"])
    # The newest one only.
    newest = out_json(cli("runs", "chain", "--cost", "--limit", "1", "--json", "--url", url))
    assert newest["runs"] == 1
    assert newest["cost"]["total_requests"] == views[1]["cost"]["total_requests"]
    res = cli("runs", "chain", "--cost", "--url", url)
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"chain: 2 runs, {sum(want.values())} AWS requests, ~$")
    # The listing is as it was.
    assert len(out_json(cli("runs", "chain", "--json", "--url", url))["runs"]) == 2
    assert cli("runs", "chain", "--limit", "101", "--url", url).exit_code == 2
