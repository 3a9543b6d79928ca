"""`orchestrator journal export RUN` and `journal check FILE --url ENDPOINT`: a golden
journal saved from a real run, replayed in check mode against the code a real endpoint
serves (signed), before and after a change that renames an operation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from tests.integration.test_cli_durable import MANIFEST, until
from tests.support.cli import cli, out_json
from tests.support.durable_fns import LEDGER
from tests.support.harness import Harness


@pytest.fixture
def api(build_harness: Any, app_url: str, testfns: str, tmp_path: Any
        ) -> Iterator[tuple[Harness, str]]:
    h = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns})
    h.start_workers(1, threads=2)
    try:
        with BackgroundServer(create_api(h.rt)) as server:
            yield h, server.url
    finally:
        h.close()


def test_a_golden_journal_is_exported_and_checked_against_an_endpoint(
        api: tuple[Harness, str], app_url: str, tmp_path: Path) -> None:
    h, url = api
    run_id = h.start("versioned", {})
    until(lambda: len(h.rt.store.journal.read_journal(run_id)) == 2)
    golden = tmp_path / "golden.json"
    res = cli("journal", "export", run_id, "-o", str(golden), "--url", url)
    assert res.exit_code == 0, res.output
    doc = json.loads(golden.read_text())
    assert doc["workflow"] == "versioned" and len(doc["journal"]) == 2
    ok = cli("journal", "check", str(golden), "--url", app_url, "--secret", "durable-secret",
             "--json")
    assert ok.exit_code == 0, ok.output
    assert out_json(ok)["ok"] is True
    # The same journal against code that renamed the second step (as a deploy would).
    LEDGER.version[run_id] = 2
    bad = cli("journal", "check", str(golden), "--url", app_url, "--secret", "durable-secret")
    assert bad.exit_code == 1, bad.output
    assert "mismatch" in bad.stdout and "two-renamed" in bad.stdout
    unsigned = cli("journal", "check", str(golden), "--url", app_url)
    assert unsigned.exit_code == 3 and "401" in unsigned.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    assert cli("journal", "check", str(junk), "--url", app_url).exit_code == 2
    assert cli("journal", "export", "nope", "--url", url).exit_code == 4


def test_show_lists_a_durable_runs_operations_and_what_it_waits_for(
        api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = h.start("versioned", {})
    until(lambda: (h.rt.store.drivers.get_driver(run_id) or _Nothing()).waiting)
    res = cli("show", run_id, "--url", url, "--ascii")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "ok step one" in lines  # its operations in order (cli/durable_diagram.py)
    assert any(line.endswith("step two") for line in lines)
    assert any(line.startswith("waiting for signal finish") for line in lines)
    h.rt.signals.send(run_id, "finish", {})
    h.wait(run_id)
    done = cli("show", run_id, "--url", url, "--ascii")
    assert 'output: {"done":"two"}' in done.stdout
    history = cli("history", run_id, "--url", url)
    assert history.exit_code == 0 and "run.waiting" in history.stdout


class _Nothing:
    waiting = None
