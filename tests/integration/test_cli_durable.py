"""`orchestrator signal`, `hooks create|execute` and `runs children|parent|resume|reset`
against a real API over HTTP, the durable workflows of tests/support/durable_fns.py served
by a real FunctionApp, the engine on the emulator; with their exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.runtime import Runtime
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.cli import cli, out_json
from tests.support.durable_fns import HOOK_URLS, LEDGER
from tests.support.harness import Harness

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
  fn: { url: "${FN}" }
workflows:
  chain: { backend: app }
  approval: { backend: app }
  versioned: { backend: app, workflow: versioned, timeout: 30s }
  docapproval: { backend: app }
  parent: { backend: app }
  dag:
    steps:
      one: { backend: fn, route: /echo }
"""


@pytest.fixture
def api(build_harness: Any, app_url: str, testfns: str, tmp_path: Any
        ) -> Iterator[tuple[Harness, str]]:
    h = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns})
    h.start_workers(1, threads=4)
    h.start_sweeper()
    try:
        with BackgroundServer(create_api(h.rt)) as server:
            yield h, server.url
    finally:
        h.close()


def until(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def waiting_for_signal(h: Harness, run_id: str, name: str) -> None:
    """Until the run's workflow waits for signal `name`, its driver held by nobody."""
    def check() -> bool:
        row = h.rt.store.drivers.get_driver(run_id)
        w = None if row is None or row.lease_owner else row.waiting
        return bool(w and w["kind"] == "signal" and w["name"] == name)
    until(check)


def trigger(url: str, workflow: str, payload: dict[str, Any]) -> str:
    res = cli("trigger", workflow, "--input", json.dumps(payload), "--url", url)
    assert res.exit_code == 0, res.output
    return str(res.stdout.strip())


def test_help_lists_the_durable_commands() -> None:
    top = cli("--help").stdout
    assert "  signal " in top and "  hooks " in top
    runs = cli("runs", "--help")
    assert runs.exit_code == 0
    for name in ("list", "children", "parent", "resume", "reset"):
        assert f"  {name} " in runs.stdout, name
    assert "  execute " in cli("hooks", "--help").stdout


def test_signal_wakes_a_waiting_run_and_its_key_makes_a_resend_a_duplicate(
        api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "approval", {})
    waiting_for_signal(h, run_id, "approve")
    res = cli("signal", run_id, "approve", "--payload", '{"approved": true}',
              "--idempotency-key", "k1", "--url", url)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"{run_id}: signal approve sent (id ")
    again = out_json(cli("signal", run_id, "approve", "--payload", '{"approved": true}',
                         "--idempotency-key", "k1", "--json", "--url", url))
    assert again["duplicate"] is True and again["run_id"] == run_id
    assert again["signal"] == "approve" and again["id"] in res.stdout
    view = h.wait(run_id)
    assert view["status"] == "success" and view["output"] == {"decision": {"approved": True}}
    # after the end, the same key is still a duplicate (exit 0), a new signal is refused
    text = cli("signal", run_id, "approve", "--payload", '{"approved": true}',
               "--idempotency-key", "k1", "--url", url).stdout
    assert "sent already" in text and "nothing new queued" in text
    late = cli("signal", run_id, "approve", "--url", url)
    assert late.exit_code == 2 and "already finished" in late.stderr


def test_signal_payload_from_a_file_and_empty_by_default(api: tuple[Harness, str],
                                                         tmp_path: Any) -> None:
    h, url = api
    body = tmp_path / "decision.json"
    body.write_text('{"approved": false, "by": "file"}')
    first = trigger(url, "approval", {"twice": True})
    assert cli("signal", first, "approve", "--payload", f"@{body}", "--url",
               url).exit_code == 0
    assert cli("signal", first, "approve", "--url", url).exit_code == 0
    view = h.wait(first)
    assert view["output"] == {"first": {"approved": False, "by": "file"}, "second": {}}


def test_signal_refusals_name_what_was_wrong(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "approval", {})
    for payload, why in (("[1, 2]", "not an array"), ('"yes"', "not a string"),
                         ("null", "not null"), ("{nope", "not valid JSON")):
        res = cli("signal", run_id, "approve", "--payload", payload, "--url", url)
        assert res.exit_code == 2, (payload, res.output)
        assert "--payload" in res.stderr and why in res.stderr, res.stderr
    missing = cli("signal", run_id, "approve", "--payload", "@/nonexistent.json", "--url", url)
    assert missing.exit_code == 2 and "cannot read /nonexistent.json" in missing.stderr
    unknown = cli("signal", "no-such-run", "approve", "--url", url)
    assert unknown.exit_code == 4 and "no-such-run" in unknown.stderr
    bad_name = cli("signal", run_id, "not a name!", "--url", url)
    assert bad_name.exit_code == 2 and "signal name" in bad_name.stderr
    dag = trigger(url, "dag", {})
    res = cli("signal", dag, "approve", "--url", url)
    assert res.exit_code == 2 and "only durable workflows take signals" in res.stderr
    # nothing reached the run
    assert h.rt.store.signals.signal_ids(run_id, "approve") == set()
    unreachable = cli("signal", run_id, "approve", "--url", "http://127.0.0.1:9")
    assert unreachable.exit_code == 3 and "cannot reach the orchestrator" in unreachable.stderr


def test_hooks_create_then_execute_once(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "approval", {})
    res = cli("hooks", "create", run_id, "approve", "--metadata", '{"via": "cli"}',
              "--ttl", "600", "--url", url)
    assert res.exit_code == 0, res.output
    token = res.stdout.strip()
    assert len(token) >= 43 and "\n" not in token
    assert f"orchestrator hooks execute {token}" in res.stderr
    assert f"{url}/hooks/{token}" in res.stderr  # the API has no public URL: ours
    # executing needs no key; the same payload again is a duplicate, another is refused
    done = cli("hooks", "execute", token, "--payload", '{"ok": 1, "via": "forged"}',
               "--url", url)
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"{run_id}: signal approve sent"
    again = out_json(cli("hooks", "execute", token, "--payload", '{"ok": 1, "via": "forged"}',
                         "--json", "--url", url))
    assert again["duplicate"] is True and again["run_id"] == run_id
    other = cli("hooks", "execute", token, "--payload", '{"ok": 2}', "--url", url)
    assert other.exit_code == 2 and "single-use" in other.stderr
    unknown = cli("hooks", "execute", "x" * 43, "--url", url)
    assert unknown.exit_code == 4 and "unknown token" in unknown.stderr
    # the hook's metadata wins over what the caller sent
    assert h.wait(run_id)["output"] == {"decision": {"ok": 1, "via": "cli"}}


def test_hooks_create_json_and_its_refusals(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "approval", {"timeout": "2s"})
    mine = "t" * 40
    made = out_json(cli("hooks", "create", run_id, "approve", "--token", mine, "--json",
                        "--url", url))
    assert made["token"] == mine and made["run_id"] == run_id and made["signal"] == "approve"
    assert made["url"] == f"{url}/hooks/{mine}" and made["metadata"] is None
    assert made["expires_at"] > time.time() + 6 * 24 * 3600  # 7 days by default
    res = cli("hooks", "create", run_id, "approve", "--metadata", "[1]", "--url", url)
    assert res.exit_code == 2 and "--metadata" in res.stderr and "JSON object" in res.stderr
    res = cli("hooks", "create", run_id, "approve", "--ttl", "0", "--url", url)
    assert res.exit_code == 2 and "--ttl" in res.stderr
    res = cli("hooks", "create", run_id, "approve", "--token", "short", "--url", url)
    assert res.exit_code == 2 and "token" in res.stderr
    res = cli("hooks", "create", "no-such-run", "approve", "--url", url)
    assert res.exit_code == 4 and "no-such-run" in res.stderr
    h.wait(run_id)  # the wait timed out: the run ended
    res = cli("hooks", "create", run_id, "approve", "--url", url)
    assert res.exit_code == 2 and "already finished" in res.stderr
    # a hook whose run ended: executing it reaches a finished run
    res = cli("hooks", "execute", mine, "--payload", "{}", "--url", url)
    assert res.exit_code == 2 and "already finished" in res.stderr


def test_hooks_execute_takes_the_url_a_workflow_made(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "docapproval", {"doc": "d-9"})
    waiting_for_signal(h, run_id, "doc-approval")
    path = HOOK_URLS[run_id][0]  # "/hooks/<token>": the API has no public URL
    res = cli("hooks", "execute", url + path, "--payload", '{"approved": true}', "--url", url)
    assert res.exit_code == 0, res.output
    assert h.wait(run_id)["output"] == {"published": True, "documentId": "d-9"}


def test_runs_children_and_parent(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "parent", {})
    assert h.wait(run_id)["status"] == "success"
    listed = out_json(cli("runs", "children", run_id, "--json", "--url", url))
    assert listed["run_id"] == run_id
    kids = listed["children"]
    assert [k["workflow"] for k in kids] == ["chain", "approval"]
    text = cli("runs", "children", run_id, "--url", url).stdout
    assert all(k["run_id"] in text for k in kids) and "approval" in text
    up = out_json(cli("runs", "parent", kids[1]["run_id"], "--json", "--url", url))
    assert up["parent_run_id"] == run_id and up["parent"]["run_id"] == run_id
    assert up["parent"]["workflow"] == "parent"
    text = cli("runs", "parent", kids[0]["run_id"], "--url", url).stdout
    assert run_id in text and "parent" in text
    assert cli("runs", "parent", run_id, "--url", url).stdout.strip() == (
        f"{run_id}: no parent run")
    assert cli("runs", "children", kids[0]["run_id"], "--url", url).stdout.strip() == (
        f"{kids[0]['run_id']}: no children")
    for sub in ("children", "parent"):
        res = cli("runs", sub, "no-such-run", "--url", url)
        assert res.exit_code == 4 and "no-such-run" in res.stderr, res.output


def test_runs_resume_a_paused_run_after_the_fix(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "versioned", {})
    waiting_for_signal(h, run_id, "finish")
    LEDGER.version[run_id] = 2  # a deploy renames the second step: a replay mismatch
    assert cli("signal", run_id, "finish", "--url", url).exit_code == 0
    until(lambda: [r["run_id"] for r in out_json(cli(
        "runs", "versioned", "--status", "paused", "--json", "--url", url))["runs"]] == [run_id])
    LEDGER.version[run_id] = 1  # the fix
    res = cli("runs", "resume", run_id, "--url", url)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"{run_id}: resumed (it was paused)"
    done = h.wait(run_id)
    assert done["status"] == "success" and done["output"] == {"done": "two"}
    finished = cli("runs", "resume", run_id, "--url", url)
    assert finished.exit_code == 2 and "already finished" in finished.stderr
    unknown = cli("runs", "resume", "no-such-run", "--url", url)
    assert unknown.exit_code == 4


def test_runs_resume_of_a_run_not_paused_only_wakes_it(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "approval", {})
    waiting_for_signal(h, run_id, "approve")
    out = out_json(cli("runs", "resume", run_id, "--json", "--url", url))
    assert out == {"run_id": run_id, "resumed": True, "was_paused": False}
    waiting_for_signal(h, run_id, "approve")
    dag = trigger(url, "dag", {})
    res = cli("runs", "resume", dag, "--url", url)
    assert res.exit_code == 2 and "only durable runs resume or reset" in res.stderr
    cli("signal", run_id, "approve", "--url", url)
    assert h.wait(run_id)["status"] == "success"


def test_runs_reset_runs_the_forgotten_operations_again(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "versioned", {})
    waiting_for_signal(h, run_id, "finish")
    res = cli("runs", "reset", run_id, "--to", "1", "--url", url)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == f"{run_id}: reset to 1: 1 operation forgotten, running again"
    until(lambda: LEDGER.bodies(run_id) == ["one", "two", "two"])
    waiting_for_signal(h, run_id, "finish")
    out = out_json(cli("runs", "reset", run_id, "--to", "0", "--json", "--url", url))
    assert out["reset_to"] == 0 and out["forgotten"] == 2 and out["was_paused"] is False
    until(lambda: LEDGER.bodies(run_id) == ["one", "two", "two", "one", "two"])
    waiting_for_signal(h, run_id, "finish")
    cli("signal", run_id, "finish", "--url", url)
    assert h.wait(run_id)["status"] == "success"
    for args, why in ((("--to", "-1"), "--to"), ((), "--to"), (("--to", "x"), "--to")):
        res = cli("runs", "reset", run_id, *args, "--url", url)
        assert res.exit_code == 2 and why in res.stderr, (args, res.output)
    assert cli("runs", "reset", run_id, "--to", "0", "--url", url).exit_code == 2  # finished
    assert cli("runs", "reset", "no-such-run", "--to", "0", "--url", url).exit_code == 4


def test_runs_lists_as_before_beside_its_subcommands(api: tuple[Harness, str]) -> None:
    h, url = api
    run_id = trigger(url, "chain", {"steps": 1})
    h.wait(run_id)
    by_default = out_json(cli("runs", "chain", "--json", "--url", url))
    assert by_default == out_json(cli("runs", "list", "chain", "--json", "--url", url))
    assert [r["run_id"] for r in by_default["runs"]] == [run_id]
    assert out_json(cli("runs", "--status", "success", "--json", "--url", url))["runs"]
    assert run_id in cli("runs", "--url", url).stdout


def test_the_durable_commands_send_the_api_key(api: tuple[Harness, str]) -> None:
    h, _ = api
    rt = Runtime.build(h.rt.settings.with_(api_auth=True), h.rt.manifest, clients=h.rt.clients)
    key = ApiKeys(rt.control).create("cli", time.time())
    with BackgroundServer(create_api(rt)) as server:
        url = server.url
        run_id = out_json(cli("trigger", "approval", "--input", "{}", "--json", "--url", url,
                              "--api-key", key))["run_id"]
        waiting_for_signal(h, run_id, "approve")
        calls = [("signal", run_id, "approve"), ("hooks", "create", run_id, "approve"),
                 ("runs", "children", run_id), ("runs", "parent", run_id),
                 ("runs", "resume", run_id), ("runs", "reset", run_id, "--to", "0")]
        for args in calls:
            refused = cli(*args, "--url", url, "--api-key", key[:-1])
            assert refused.exit_code == 5, (args, refused.output)
            assert "authentication failed" in refused.stderr
        assert h.rt.store.signals.signal_ids(run_id, "approve") == set()
        for args in calls[2:4]:
            assert cli(*args, "--url", url, "--api-key", key).exit_code == 0, args
        token = cli("hooks", "create", run_id, "approve", "--url", url,
                    "--api-key", key).stdout.strip()
        # executing a hook takes its token, no key
        res = cli("hooks", "execute", token, "--payload", '{"by": "hook"}', "--url", url)
        assert res.exit_code == 0, res.output
        assert h.wait(run_id)["output"] == {"decision": {"by": "hook"}}
