"""Debounce (`debounce: {key, period, maxWait}`): reference 002's "one reindex for five
events" as the demo declares it (`reindex-customer`), on the fake clock: a burst of five
events for acme starts one run, on the fifth event's input; globex has its own; maxWait
cuts a burst that never pauses; and duplicates (the admission timer twice, an event
delivered twice, two triggers racing) still start one run per burst."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.examples import monthly_report
from functions.examples.flow import Flow
from infra.emulator import Emulator
from orchestrator.adapters.messages import AdmitRun
from orchestrator.engine.search import parse_query
from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.testing import WorkflowEnv

ROOT = Path(__file__).resolve().parents[2]


def demo_reindex() -> dict[str, Any]:
    wf: dict[str, Any] = yaml.safe_load(
        (ROOT / "orchestrator.yml").read_text())["workflows"]["reindex-customer"]
    wf["steps"]["reindex"]["backend"] = "app"
    wf["on"] = wf.pop(True)  # PyYAML reads the key `on` as a boolean
    return wf


@pytest.fixture
def env(emulator: Emulator, tmp_path: Path) -> Iterator[WorkflowEnv]:
    app = monthly_report.create_app(work_dir=tmp_path)
    with WorkflowEnv(app, emulator=emulator, dags={"reindex-customer": demo_reindex()}) as e:
        yield e


def reindexed(tmp_path: Path) -> list[tuple[str, Any]]:
    return [(e["customer"], e["data"]) for e in Flow(tmp_path / "flow").reindexes.entries()]


def test_five_events_in_a_burst_cause_one_reindex_on_the_last(
        env: WorkflowEnv, tmp_path: Path) -> None:
    ids = []
    for i in range(1, 6):
        ids += env.emit("customer.changed", {"n": i}, key="acme")
        env.advance("500ms")
    other = env.emit("customer.changed", {"n": 1}, key="globex")
    assert len(set(ids)) == 1  # every trigger of the burst answers with its run
    assert env.status(ids[0]) == "queued"
    env.run_until_idle()
    assert env.status(ids[0]) == "success" and env.status(other[0]) == "success"
    assert sorted(reindexed(tmp_path)) == [("acme", {"n": 5}), ("globex", {"n": 1})]
    # Found by a search by the last event's input, the one it ran with (each trigger's
    # input is indexed before the write that takes it), not by the inputs it replaced.
    for n in (1, 5):
        found, _ = env.rt.store.runs.find_runs(parse_query(f"input.data.n = {n}"),
                                               env.now, workflow="reindex-customer")
        assert [r.run_id for r in found] == ([other[0]] if n == 1 else [ids[0]])
    # The run started 2 s after the last event of its burst.
    run = env.rt.runs.get(ids[0])
    assert run.started_at == pytest.approx(run.created_at + 4 * 0.5 + 2.0, abs=0.01)
    # A later event begins a new burst: a second run.
    again = env.emit("customer.changed", {"n": 6}, key="acme")
    env.run_until_idle()
    assert again[0] != ids[0] and env.status(again[0]) == "success"
    assert reindexed(tmp_path)[-1] == ("acme", {"n": 6})


def test_a_trigger_after_its_burst_closed_is_found_on_its_own_run_only(
        env: WorkflowEnv) -> None:
    """A trigger that comes once its burst's run has started indexes its input under
    that run before the write that finds the burst closed, then starts a run of its
    own: a search by its input finds the new run only (the old row does not carry it),
    and the old run is still found by its own input."""
    first = env.emit("customer.changed", {"n": 1}, key="acme")
    env.advance("5s")
    env.run_until_idle()
    assert env.status(first[0]) == "success"
    again = env.emit("customer.changed", {"n": 2}, key="acme")
    assert again[0] != first[0]
    for n, runs in ((1, first), (2, again)):
        found, _ = env.rt.store.runs.find_runs(parse_query(f"input.data.n = {n}"), env.now)
        assert [r.run_id for r in found] == runs
        found, _ = env.rt.store.runs.find_runs(parse_query(f"data.n:{n}"), env.now)
        assert [r.run_id for r in found] == runs


def test_max_wait_cuts_a_burst_that_never_pauses(env: WorkflowEnv, tmp_path: Path) -> None:
    first = env.emit("customer.changed", {"n": 0}, key="acme")[0]
    n = 0
    while env.status(first) == "queued":  # an event every second: never 2 s of quiet
        n += 1
        env.emit("customer.changed", {"n": n}, key="acme")
        env.advance("1s")
    run = env.rt.runs.get(first)
    assert run.started_at == pytest.approx(run.created_at + 30.0, abs=0.01)
    env.run_until_idle()
    assert reindexed(tmp_path)[0][1]["n"] >= 29


def test_duplicates_start_one_run_per_burst(env: WorkflowEnv, tmp_path: Path) -> None:
    ids = env.emit("customer.changed", {"n": 1}, key="acme", event_id="e1")
    assert env.emit("customer.changed", {"n": 1}, key="acme", event_id="e1") == ids
    # Two triggers racing (each on its own thread, released together): one burst.
    barrier = threading.Barrier(2)
    got: list[str] = []

    def trigger(n: int) -> None:
        barrier.wait()
        got.extend(env.emit("customer.changed", {"n": n}, key="zed"))

    threads = [threading.Thread(target=trigger, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1, got
    env.advance("2s")
    # The admission timer delivered twice (and the sweeper's look): the run starts once.
    for run_id in (ids[0], got[0]):
        env.rt.queues.dispatch([AdmitRun(run_id=run_id)])
        env.rt.queues.dispatch([AdmitRun(run_id=run_id)])
    env.run_until_idle()
    assert sorted(c for c, _ in reindexed(tmp_path)) == ["acme", "zed"]


def test_lint_refuses_a_bad_debounce() -> None:
    base = """
backends:
  fn: { url: "http://127.0.0.1:1" }
workflows:
  w:
    debounce: %s
    steps:
      a: { backend: fn, route: /a }
"""
    with pytest.raises(ManifestError, match=r"maxWait .* is shorter than period"):
        manifest_from_text(base % "{ period: 10s, maxWait: 5s }", "orchestrator.yml", environ={})
    with pytest.raises(ManifestError, match="unknown name 'event'"):
        manifest_from_text(base % '{ period: 1s, key: "${{ event.key }}" }',
                           "orchestrator.yml", environ={})
    with pytest.raises(ManifestError, match="debounce and throttle exclude each other"):
        manifest_from_text(base % "{ period: 1s }\n    throttle: { limit: 1, period: 1s }",
                           "orchestrator.yml", environ={})
