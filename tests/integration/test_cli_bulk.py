"""`orchestrator runs --where`, `runs cancel --where … --reason …`, `runs rerun --where …
--input …` and `runs resume --where …` against a real API over HTTP, with real workers:
the count and the confirmation, the job followed to its end, the per-run report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.cli.commands import main
from tests.support.cli import cli, out_json
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  gated:
    steps:
      check: { backend: fn, route: /gate, retry: { max: 0 } }
  solo:
    concurrency: { limit: 1 }
    steps:
      hold: { backend: fn, route: /slow, payload: { seconds: 30 } }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def _run(url: str, workflow: str, input: Any) -> str:
    res = cli("trigger", workflow, "--input", json.dumps(input), "--url", url, "--json")
    return str(out_json(res)["run_id"])


def test_runs_where_finds_and_cancel_where_asks_then_cancels(api: tuple[Harness, str]) -> None:
    h, url = api
    runs = [_run(url, "solo", {"tenant": "acme", "i": i}) for i in range(4)]
    other = _run(url, "solo", {"tenant": "globex"})
    found = out_json(cli("runs", "--where", 'input.tenant = "acme"', "--json", "--url", url))
    assert [r["run_id"] for r in found["runs"]] == runs[::-1]
    listed = cli("runs", "--where", "acme", "--url", url)
    assert listed.exit_code == 0 and all(r in listed.output for r in runs)
    bad = cli("runs", "--where", "tenant = acme", "--url", url)
    assert bad.exit_code != 0 and "a path starts with one of input" in bad.output

    # No terminal to ask on and no --yes: nothing is done, exit 1.
    refused = cli("runs", "cancel", "--where", "input.tenant = acme", "--url", url)
    assert refused.exit_code == 1 and "4 runs to cancel" in refused.output
    assert "confirm with --yes" in refused.output
    # Answering no at the prompt: nothing either.
    declined = CliRunner().invoke(main, ["runs", "cancel", "--where", "input.tenant = acme",
                                         "--url", url], input="n\n")
    assert declined.exit_code == 1
    assert {h.rt.store.runs.get_run(r, h.rt.clock()).status.value  # type: ignore[union-attr]
            for r in runs} <= {"queued", "running"}

    res = cli("runs", "cancel", "--where", "input.tenant = acme", "--reason", "tenant left",
              "--yes", "--url", url)
    assert res.exit_code == 0, res.output
    assert "4 cancel done, 0 skipped, 0 failed" in res.output
    for r in runs:
        view = h.wait(r)
        assert view["status"] == "killed" and view["kill_reason"] == "tenant left"
    assert h.rt.store.runs.get_run(other, h.rt.clock()).status.value in (  # type: ignore[union-attr]
        "queued", "running")
    # Nothing left to cancel: said so, exit 0.
    again = cli("runs", "cancel", "--where", "input.tenant = acme status = running", "--yes",
                "--url", url)
    assert again.exit_code == 0 and "0 runs to cancel" in again.output
    none = cli("runs", "cancel", "--url", url)
    assert none.exit_code == 2 and "name the runs" in none.output


def test_rerun_where_with_a_new_input_and_resume_reports(api: tuple[Harness, str]) -> None:
    h, url = api
    failed = [_run(url, "gated", {"ok": False, "batch": "b9", "i": i}) for i in range(3)]
    for r in failed:
        h.wait(r)
    res = cli("runs", "rerun", "--where", "input.batch = b9 status = failed", "--input",
              '{"ok": true}', "--yes", "--json", "--url", url)
    job = out_json(res)
    assert job["status"] == "done" and job["counts"]["done"] == 3
    for o in job["runs"]:
        assert h.wait(o["new_run_id"])["status"] == "success"
    # A resume of runs that are not durable: each skipped, with why.
    res = cli("runs", "resume", "--run-id", failed[0], "--yes", "--url", url)
    assert res.exit_code == 0 and "0 resume done, 1 skipped" in res.output
    assert f"{failed[0]}: skipped:" in res.output
    both = cli("runs", "resume", failed[0], "--where", "xy", "--url", url)
    assert both.exit_code == 2 and "not both" in both.output
