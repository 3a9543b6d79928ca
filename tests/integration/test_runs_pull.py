"""`orchestrator runs pull RUN --from URL` and `runs replay RUN --functions-url LOCAL`
between two stacks (two sets of tables and queues in the emulator, each with its own
workers and API over real HTTP): a durable run of the "deployed" stack is copied into
the "local" one, shown there, never advanced by its workers or sweeper, and replayed
against the code a real functions app serves, stopping where asked; and the refusals,
which change nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.engine.reconcile import SweepPolicy, reconcile
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.sweeper import SweepReport
from tests.integration.test_cli_durable import MANIFEST, until
from tests.support.cli import cli, out_json
from tests.support.durable_fns import LEDGER
from tests.support.harness import Harness
from tests.support.terminal import Terminal

SECRET = "durable-secret"


@dataclass
class Stacks:
    there: Harness
    there_url: str
    here: Harness
    here_url: str


@pytest.fixture
def stacks(build_harness: Any, app_url: str, testfns: str, tmp_path: Path
           ) -> Iterator[Stacks]:
    env = {"APP": app_url, "FN": testfns}
    # The deployed stack keeps every journal entry in its blob store (none is under 64
    # bytes): an export inlines them, an import puts them in the local one.
    there = build_harness(MANIFEST, tmp_path, env, inline_output_limit=64)
    here = build_harness(MANIFEST, tmp_path, env)
    there.start_workers(1, threads=2)
    # The local stack runs as `orchestrator dev` would: workers and a sweeper, which
    # must leave an imported run alone.
    here.start_workers(1, threads=2)
    here.start_sweeper()
    try:
        with BackgroundServer(create_api(there.rt)) as a, \
                BackgroundServer(create_api(here.rt)) as b:
            yield Stacks(there, a.url, here, b.url)
    finally:
        there.close()
        here.close()


def waiting_run(s: Stacks) -> str:
    """A run of `versioned` on the deployed stack, waiting for its signal after two
    steps."""
    run_id = s.there.start("versioned", {"order": 1042})
    until(lambda: (s.there.rt.store.drivers.get_driver(run_id) or _Nothing()).waiting)
    assert len(s.there.rt.store.journal.read_journal(run_id)) == 2
    return run_id


def pull(s: Stacks, run_id: str, *more: str) -> Any:
    return cli("runs", "pull", run_id, "--from", s.there_url, "--url", s.here_url, *more)


def replay(s: Stacks, app_url: str, run_id: str, *more: str) -> Any:
    return cli("runs", "replay", run_id, "--functions-url", app_url, "--secret", SECRET,
               "--url", s.here_url, *more)


def rows(h: Harness, run_id: str) -> Any:
    found = h.rt.store.copies.export_run(run_id)
    assert found is not None
    return found


def test_a_deployed_run_is_pulled_shown_and_replayed_without_running_a_step(
        stacks: Stacks, app_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s = stacks
    run_id = waiting_run(s)
    bodies = LEDGER.bodies(run_id)
    assert len(rows(s.there, run_id)[2]) == 2  # both entries' values are blobs there
    res = pull(s, run_id)
    assert res.exit_code == 0, res.output
    assert f"imported from {s.there_url}" in res.stdout and "2 blobs" in res.stdout
    view = s.here.rt.runs.view(run_id)
    assert view["status"] == "running" and view["imported"] == s.there_url
    assert [op["step"] for op in view["steps"]][:2] == ["one", "two"]
    shown = cli("show", run_id, "--url", s.here_url, "--ascii")
    assert shown.exit_code == 0, shown.output
    assert "ok step one" in shown.stdout.splitlines()
    assert f"imported from {s.there_url} (read-only here)" in shown.stdout
    # Found here by what it carried, as the runs started here are.
    found = out_json(cli("runs", "--where", "input.order = 1042", "--json", "--url",
                         s.here_url))
    assert [r["run_id"] for r in found["runs"]] == [run_id]
    # Its journal, as the deployed stack has it.
    assert (s.here.rt.store.journal.read_journal(run_id)
            == s.there.rt.store.journal.read_journal(run_id))

    # PYTHONBREAKPOINT=0: the stops are reported, no debugger runs (the functions app
    # serves in this process; test_runs_replay_terminal.py has pdb in a real terminal).
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    ok = replay(s, app_url, run_id, "--json")
    report = out_json(ok)
    assert report["ok"] is True and report["mismatch"] is None and report["stops"] == []
    stopped = out_json(replay(s, app_url, run_id, "--break", "two", "--json"))
    assert [(x["reason"], x["kind"], x["name"], x["pos"]) for x in stopped["stops"]] == [
        ("break", "step", "two", 1)]
    text = replay(s, app_url, run_id, "--break", "nowhere")
    assert text.exit_code == 0 and "no operation named 'nowhere'" in text.stderr

    # New code that renamed the second step: the replay diverges there.
    LEDGER.version[run_id] = 2
    try:
        bad = replay(s, app_url, run_id)
        assert bad.exit_code == 1, bad.output
        assert "mismatch" in bad.stdout and "two-renamed" in bad.stdout
        assert "stopped (mismatch) before step 'two-renamed' at position 1" in bad.stdout
        # Stopping before the first step, the mismatch after it stops nothing more.
        first = replay(s, app_url, run_id, "--break", "one", "--json")
        assert first.exit_code == 1
        assert [x["reason"] for x in json.loads(first.stdout)["stops"]] == ["break"]
    finally:
        LEDGER.version.pop(run_id, None)
    assert LEDGER.bodies(run_id) == bodies  # no replay ran a step body

    again = pull(s, run_id)
    assert again.exit_code == 2 and "exists here already" in again.stderr


def test_an_imported_run_is_inert_its_workers_and_sweeper_never_advance_it(
        stacks: Stacks) -> None:
    s = stacks
    run_id = waiting_run(s)
    assert pull(s, run_id).exit_code == 0
    _, items, _ = rows(s.here, run_id)
    run_item, _, _ = rows(s.here, run_id)
    for item in [run_item, *items]:  # nothing a sweep, a worker or a listing acts on
        assert not {"wake_at", "wake_shard", "lease_owner", "lease_until", "active"} & set(item)
    assert run_id not in s.here.rt.store.runs.active_run_ids()
    before = rows(s.here, run_id)
    run = s.here.rt.store.runs.get_run(run_id, time.time())
    assert run is not None and run.imported == s.there_url
    steps = s.here.rt.store.steps.query_steps(run_id, states_only=True)
    policy = SweepPolicy(redispatch_after=0.0, settle=0.0)
    assert reconcile(run, steps, [], time.time() + 3600, policy) == []
    # The sweeper, made to look at it (a full pass from the start of time, and the run
    # itself named, as a wake of its row would): it leaves it alone.
    sweeper = s.here.rt.sweeper()
    sweeper.sweep(since=0.0)
    report = SweepReport()
    sweeper.sweep_runs([run_id], {run_id}, time.time() + 3600, report)
    assert report.imported == 1 and report.runs == 0
    # What would advance it is refused, naming where it came from.
    signal = httpx.post(f"{s.here_url}/runs/{run_id}/signals/finish", json={})
    assert signal.status_code == 409 and "imported from" in signal.json()["error"]["message"]
    cancel = httpx.post(f"{s.here_url}/runs/{run_id}/cancel", json={})
    assert cancel.status_code == 409
    resume = cli("runs", "resume", run_id, "--url", s.here_url)
    assert resume.exit_code == 2 and "read-only copy" in resume.stderr
    # Meanwhile the deployed run goes on, and the copy stays as it was.
    s.there.rt.signals.send(run_id, "finish", {})
    assert s.there.wait(run_id)["status"] == "success"
    assert rows(s.here, run_id) == before
    assert s.here.rt.runs.view(run_id)["status"] == "running"


def test_a_pull_from_a_stack_with_keys_sends_the_from_key(
        stacks: Stacks, build_harness: Any, app_url: str, testfns: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--from-api-key (or $ORCHESTRATOR_FROM_API_KEY) goes to --from, --api-key to
    --url: a deployed stack wants its own key."""
    s = stacks
    locked = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns},
                           api_auth=True)
    try:
        key = ApiKeys(locked.rt.control).create("puller", time.time())
        run_id = locked.start("dag", {})
        with BackgroundServer(create_api(locked.rt)) as there:
            args = ("runs", "pull", run_id, "--from", there.url, "--url", s.here_url)
            refused = cli(*args)
            assert refused.exit_code == 5 and there.url in refused.stderr
            assert httpx.get(f"{s.here_url}/runs/{run_id}").status_code == 404
            monkeypatch.setenv("ORCHESTRATOR_FROM_API_KEY", key)
            res = cli(*args, "--json")
            assert out_json(res)["run_id"] == run_id
    finally:
        locked.close()
    view = s.here.rt.runs.view(run_id)  # a DAG run, queued or running there, inert here
    assert view["imported"] == there.url and view["workflow"] == "dag"


def test_bad_pulls_and_imports_change_nothing(stacks: Stacks, app_url: str) -> None:
    s = stacks
    unknown = pull(s, "no-such-run")
    assert unknown.exit_code == 4 and s.there_url in unknown.stderr
    not_an_api = cli("runs", "pull", "x", "--from", app_url, "--url", s.here_url)
    assert not_an_api.exit_code == 3 and "not an orchestrator API" in not_an_api.stderr
    imports = f"{s.here_url}/runs/import"
    empty = httpx.post(imports, json={})
    assert empty.status_code == 422 and "format" in empty.json()["error"]["message"]
    run_id = waiting_run(s)
    doc = httpx.get(f"{s.there_url}/runs/{run_id}/export").json()
    assert doc["format"] == "orchestrator.run-export/1" and doc["run_id"] == run_id
    wrong = httpx.post(imports, json={**doc, "format": "orchestrator.run-export/9"})
    assert wrong.status_code == 422 and "format" in wrong.json()["error"]["message"]
    # The run row of another run, with this run's rows.
    other = {**doc, "run_id": "another-run",
             "run": {**doc["run"], "run_id": {"S": "another-run"}}}
    mixed = httpx.post(imports, json=other)
    assert mixed.status_code == 422 and "rows.0.run_id" in mixed.json()["error"]["message"]
    typed = httpx.post(imports, json={**doc, "rows": [{"run_id": {"Q": "x"}}]})
    assert typed.status_code == 422 and "rows.0" in typed.json()["error"]["message"]
    # Its blobs: each one a row references, and no other (an import writes no blob
    # outside the run's own keys).
    assert len(doc["blobs"]) == 2
    lacking = httpx.post(imports, json={**doc, "blobs": dict(list(doc["blobs"].items())[1:])})
    assert lacking.status_code == 422 and "missing" in lacking.json()["error"]["message"]
    extra = httpx.post(imports, json={**doc, "blobs": {**doc["blobs"], "scripts/x": "{}"}})
    assert extra.status_code == 422 and "'scripts/x'" in extra.json()["error"]["message"]
    assert httpx.get(f"{s.here_url}/runs/{run_id}").status_code == 404
    # An import that died half way left a row here, and no run row: the next import
    # writes over it (the run row, written last, is the commit point).
    left = dict(doc["rows"][0])
    s.here.rt.clients.dynamodb.put_item(TableName=s.here.rt.settings.names.steps_table,
                                        Item={**left, "stale": {"S": "left over"}})
    assert httpx.post(imports, json=doc).status_code == 201
    assert all("stale" not in row for row in rows(s.here, run_id)[1])
    before = rows(s.here, run_id)
    clash = httpx.post(imports, json={**doc, "source": "elsewhere"})
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "conflict"
    assert rows(s.here, run_id) == before


def test_bad_replays_are_refused_clearly(stacks: Stacks, app_url: str, testfns: str) -> None:
    s = stacks
    unknown = replay(s, app_url, "no-such-run")
    assert unknown.exit_code == 4 and "runs pull no-such-run --from" in unknown.stderr
    dag = s.here.start("dag", {})
    s.here.wait(dag)
    refused = replay(s, app_url, dag)
    assert refused.exit_code == 2 and "DAG run" in refused.stderr
    run_id = waiting_run(s)
    assert pull(s, run_id).exit_code == 0
    api = replay(s, s.here_url, run_id)  # the orchestrator's API, not a functions app
    assert api.exit_code == 3 and "functions app" in api.stderr
    steps_only = replay(s, testfns, run_id)  # a functions app serving no workflows
    assert steps_only.exit_code == 3 and "serves no durable workflow" in steps_only.stderr
    unsigned = cli("runs", "replay", run_id, "--functions-url", app_url, "--url", s.here_url)
    assert unsigned.exit_code == 3 and "401" in unsigned.stderr
    down = replay(s, "http://127.0.0.1:9", run_id)
    assert down.exit_code == 3


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_functions_app_stops_in_pdb_before_the_operation_asked_for(
        stacks: Stacks) -> None:
    """The functions app in a real terminal (tmux), with pdb as PYTHONBREAKPOINT's
    default; `runs replay --break two` in another process: the app's terminal shows the
    `(Pdb)` prompt while the CLI waits, `c` lets the replay go on, and the CLI reports."""
    s = stacks
    run_id = waiting_run(s)
    assert pull(s, run_id).exit_code == 0
    t = Terminal(["env", "-u", "PYTHONBREAKPOINT", sys.executable, "-m",
                  "tests.support.durable_serve"])
    proc: subprocess.Popen[str] | None = None
    try:
        screen = t.until(lambda text: "SERVING http" in text, "the app serving")
        url = screen.split("SERVING ", 1)[1].split()[0]
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "runs", "replay", run_id,
             "--functions-url", url, "--secret", SECRET, "--url", s.here_url,
             "--break", "two"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        screen = t.until(lambda text: "(Pdb)" in text, "the pdb prompt")
        assert "replay: stopped before step 'two'" in screen
        assert proc.poll() is None  # the CLI waits for the debugger
        t.keys("c", "Enter")
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped (break) before step 'two' at position 1" in out
        assert "ok: 2 recorded operations replay" in out
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        t.close()


class _Nothing:
    waiting = None
