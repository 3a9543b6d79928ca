"""Reference 002's flow-control recipes, as the demo manifest declares them (README,
"Recipes"): one deploy at a time (`deploy-prod`, a concurrency group with `queue`) and
a rate limit per tenant (`enrich`, a throttle of six a minute keyed by tenant), run on
the demo app over real HTTP."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.examples import monthly_report
from functions.examples.flow import Flow
from functions.sdk.serving import BackgroundServer
from tests.support.harness import BuildHarness, Harness

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo(build_harness: BuildHarness, tmp_path: Path) -> Iterator[tuple[Harness, Flow]]:
    work = tmp_path / "work"
    with BackgroundServer(monthly_report.create_app(work_dir=work)) as server:
        text = (ROOT / "orchestrator.yml").read_text()
        h = build_harness(text, ROOT, {"FUNCTIONS_URL": server.url})  # its specs
        try:
            yield h, Flow(work / "flow")
        finally:
            h.close()


def poll(what: str, check: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout}s")
        time.sleep(0.02)


def test_a_second_deploy_waits_queued_until_the_first_is_done(
        demo: tuple[Harness, Flow]) -> None:
    h, flow = demo
    h.start_workers(threads=4)
    first = h.start("deploy-prod", {"seconds": 0.6})
    second = h.start("deploy-prod", {"seconds": 0.1})
    # While the first deploys, the second shows as queued, its group named.
    poll("deploying", lambda: flow.deploys.entries(event="start", run=first))
    view = h.rt.runs.view(second)
    assert view["status"] == "queued", view
    views = [h.wait(first), h.wait(second)]
    assert [v["status"] for v in views] == ["success", "success"]
    # The deploys never overlapped: the second started after the first ended.
    log = flow.deploys.entries()
    assert [(e["event"], e["run"]) for e in log] == [
        ("start", first), ("end", first), ("start", second), ("end", second)]
    assert log[2]["at"] >= log[1]["at"]


def test_the_crm_is_called_evenly_per_tenant_six_a_minute(demo: tuple[Harness, Flow]) -> None:
    h, flow = demo
    h.start_workers(threads=4)
    acme = [h.start("enrich", {"tenant": "acme"}) for _ in range(3)]
    globex = h.start("enrich", {"tenant": "globex"})
    # acme's first call and globex's go at once: each tenant has its own budget.
    assert h.wait(acme[0])["status"] == "success"
    assert h.wait(globex)["status"] == "success"
    assert sorted(e["tenant"] for e in flow.crm.entries()) == ["acme", "globex"]
    # The other two acme runs wait, queued, for their slots: one every ten seconds
    # (six a minute), not a burst; the recipe's 21:41:55, :42:05, :42:15.
    views = [h.rt.runs.view(r) for r in acme[1:]]
    assert [v["status"] for v in views] == ["queued", "queued"]
    first = h.rt.runs.get(acme[0])
    assert first is not None
    slots = [first.created_at] + [v["admission"]["admit_at"] for v in views]
    gaps = [round(b - a) for a, b in itertools.pairwise(slots)]
    assert gaps == [10, 10], slots
    assert {v["admission"]["throttle_key"] for v in views} == {"crm-acme"}
    for r in acme[1:]:
        h.rt.runs.kill(r, "the test has seen the slots")
