"""`orchestrator event emit`, `schedules`, `webhook sign` and `keys create` against a real
API over HTTP (and, for keys, the emulator's tables), with their exit codes."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.runtime import Runtime
from tests.support.cli import cli, out_json
from tests.support.harness import Harness

STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

MANIFEST = f"""
backends:
  fn: {{ url: "${{FN}}" }}
workflows:
  on-order:
    on: {{ event: order.paid, if: "event.data.total > 100" }}
    steps:
      record: {{ backend: fn, route: /echo }}
  hourly:
    schedule: {{ every: 1h }}
    steps:
      tick: {{ backend: fn, route: /echo }}
  hooked:
    steps:
      take: {{ backend: fn, route: /echo }}
webhooks:
  gh:
    workflow: hooked
    verify: {{ scheme: github, secrets: ["gh-secret", "gh-old"] }}
  std:
    workflow: hooked
    verify: {{ scheme: standard, secrets: ["{STANDARD_SECRET}"] }}
  pay:
    workflow: hooked
    verify: {{ scheme: stripe, secrets: ["whsec_stripe"] }}
  open:
    workflow: hooked
    verify: {{ scheme: none }}
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


# ---- events ------------------------------------------------------------------------------


def test_event_emit_starts_the_listening_workflow_once(api: tuple[Harness, str]) -> None:
    h, url = api
    data = '{"total": 150, "currency": "EUR"}'
    first = out_json(cli("event", "emit", "order.paid", "--id", "evt-1", "--key", "acme",
                         "--data", data, "--json", "--url", url))
    assert set(first) == {"id", "name", "duplicate", "runs", "cancelled"}
    assert first["cancelled"] == []  # no workflow cancels on it
    assert (first["id"], first["name"], first["duplicate"]) == ("evt-1", "order.paid", False)
    [run] = first["runs"]
    assert run["workflow"] == "on-order" and run["created"] is True
    view = h.wait(run["run_id"])
    assert view["status"] == "success"
    assert view["input"]["data"] == {"total": 150, "currency": "EUR"}
    assert view["input"]["key"] == "acme"
    assert view["trigger"] == {"source": "event", "event": "order.paid", "id": "evt-1",
                               "key": "acme"}
    # the same id again: nothing new
    again = out_json(cli("event", "emit", "order.paid", "--id", "evt-1", "--data", data,
                         "--json", "--url", url))
    assert again["duplicate"] is True
    assert again["runs"] == [{"workflow": "on-order", "run_id": run["run_id"], "created": False,
                              "duplicate": True, "debounced": False, "outcome": "duplicate"}]
    listed = out_json(cli("runs", "on-order", "--json", "--url", url))["runs"]
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    assert listed[0]["trigger"]["source"] == "event"
    text = cli("runs", "on-order", "--url", url).stdout
    assert re.search(rf"{run['run_id']}\s+event order\.paid$", text, re.M), text


def test_event_emit_text_output_and_errors(api: tuple[Harness, str], tmp_path: Path) -> None:
    h, url = api
    payload = tmp_path / "order.json"
    payload.write_text('{"total": 500}')
    res = cli("event", "emit", "order.paid", "--data", f"@{payload}", "--url", url)
    assert res.exit_code == 0, res.output
    header, started = res.stdout.splitlines()
    assert re.fullmatch(r"event [0-9a-f]{32}  order\.paid", header), header
    workflow, run_id = started.split()
    assert workflow == "on-order" and h.wait(run_id)["input"]["data"] == {"total": 500}
    # the `if` is false: recorded, but no run
    res = cli("event", "emit", "order.paid", "--data", '{"total": 5}', "--url", url)
    assert res.exit_code == 0 and "no workflow listens to it" in res.stdout
    res = cli("event", "emit", "order.paid", "--data", "{nope", "--url", url)
    assert res.exit_code == 2 and "--data" in res.output
    res = cli("event", "emit", "bad name!", "--url", url)
    assert res.exit_code == 2 and "name" in res.stderr


# ---- schedules ---------------------------------------------------------------------------


def test_schedules_list_pause_resume_trigger(api: tuple[Harness, str]) -> None:
    h, url = api
    listed = out_json(cli("schedules", "list", "--json", "--url", url))
    [hourly] = listed["schedules"]
    assert set(hourly) == {"workflow", "schedule", "paused", "next_fire", "last_fire",
                           "last_runs", "last_run_count", "missed", "last_error",
                           "concurrency", "for_each"}
    assert (hourly["workflow"], hourly["schedule"], hourly["paused"]) == (
        "hourly", "every 1h", False)
    assert hourly["next_fire"] % 3600 == 0
    text = cli("schedules", "list", "--url", url).stdout
    assert text.startswith("hourly  every 1h  active") and "next  " in text

    res = cli("schedules", "pause", "hourly", "--url", url)
    assert res.exit_code == 0 and res.stdout.strip() == "hourly: paused"
    [paused] = out_json(cli("schedules", "list", "--json", "--url", url))["schedules"]
    assert paused["paused"] is True and paused["next_fire"] is None
    assert "hourly  every 1h  paused" in cli("schedules", "list", "--url", url).stdout

    resumed = out_json(cli("schedules", "resume", "hourly", "--json", "--url", url))
    assert resumed["paused"] is False and resumed["next_fire"] == hourly["next_fire"]
    res = cli("schedules", "resume", "hourly", "--url", url)
    assert res.stdout.startswith("hourly: active, next fire ")

    fired = out_json(cli("schedules", "trigger", "hourly", "--json", "--url", url))
    assert fired["workflow"] == "hourly"
    [run_id] = fired["runs"]
    view = h.wait(run_id)
    assert view["status"] == "success" and view["trigger"]["source"] == "manual"
    # the text form prints the run ids (the same instant fires the same run again, or a
    # new one a millisecond later: either way, an id of a run that exists)
    again = cli("schedules", "trigger", "hourly", "--url", url)
    assert again.exit_code == 0
    assert h.wait(again.stdout.strip())["workflow"] == "hourly"

    for action in ("pause", "resume", "trigger"):
        res = cli("schedules", action, "on-order", "--url", url)
        assert res.exit_code == 4 and "hourly" in res.stderr, res.output


# ---- webhooks ----------------------------------------------------------------------------


def manifest_file(tmp_path: Path, testfns: str) -> Path:
    path = tmp_path / "orchestrator.yml"
    path.write_text(MANIFEST.replace("${FN}", testfns))
    return path


def headers_of(text: str) -> dict[str, str]:
    """The `Name: value` lines before the blank line."""
    head = text.split("\n\n", 1)[0]
    return dict(line.split(": ", 1) for line in head.splitlines())


@pytest.mark.parametrize("hook", ["gh", "std", "pay", "open"])
def test_webhook_sign_output_is_accepted_by_the_api(
    api: tuple[Harness, str], tmp_path: Path, testfns: str, hook: str
) -> None:
    h, url = api
    manifest = manifest_file(tmp_path, testfns)
    body = tmp_path / "body.json"
    body.write_bytes(b'{"id": "evt_123", "amount": 42}\n')
    res = cli("webhook", "sign", hook, "--body", str(body), "--manifest", str(manifest),
              "--url", url)
    assert res.exit_code == 0, res.output
    headers = headers_of(res.stdout)
    assert headers["Content-Type"] == "application/json"
    curl = res.stdout.rstrip().splitlines()[-1]
    assert curl.startswith(f"curl -sS -X POST {url}/webhooks/{hook} ")
    assert curl.endswith(f"--data-binary @{body}")
    for name, value in headers.items():
        assert shlex.quote(f"{name}: {value}") in curl

    resp = httpx.post(f"{url}/webhooks/{hook}", content=body.read_bytes(), headers=headers)
    assert resp.status_code == 202, resp.text
    view = h.wait(resp.json()["run_id"])
    assert view["status"] == "success" and view["workflow"] == "hooked"
    assert view["input"]["body"] == {"id": "evt_123", "amount": 42}
    # a delivery is taken once: the same signed request again is a duplicate
    resp = httpx.post(f"{url}/webhooks/{hook}", content=body.read_bytes(), headers=headers)
    assert resp.status_code == 200 and resp.json()["duplicate"] is True
    # and the signature covers the body
    if hook != "open":
        resp = httpx.post(f"{url}/webhooks/{hook}", content=b'{"id": "evt_123"}',
                          headers=headers)
        assert resp.status_code == 401, resp.text


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary")
def test_webhook_sign_json_curl_line_runs_as_printed(
    api: tuple[Harness, str], tmp_path: Path, testfns: str
) -> None:
    h, url = api
    manifest = manifest_file(tmp_path, testfns)
    body = tmp_path / "push event.json"  # a space, to prove the quoting
    body.write_text('{"ref": "refs/heads/main"}')
    signed = out_json(cli("webhook", "sign", "std", "--body", str(body),
                          "--manifest", str(manifest), "--url", url, "--json"))
    assert set(signed) == {"url", "headers", "curl"}
    assert signed["url"] == f"{url}/webhooks/std"
    assert set(signed["headers"]) == {"Content-Type", "webhook-id", "webhook-timestamp",
                                      "webhook-signature"}
    proc = subprocess.run(["sh", "-c", signed["curl"]], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["duplicate"] is False and answer["delivery_id"] == signed["headers"][
        "webhook-id"]
    assert h.wait(answer["run_id"])["input"]["body"] == {"ref": "refs/heads/main"}


def test_webhook_sign_errors(tmp_path: Path, testfns: str) -> None:
    manifest = manifest_file(tmp_path, testfns)
    body = tmp_path / "body.json"
    body.write_text("{}")
    res = cli("webhook", "sign", "nosuch", "--body", str(body), "--manifest", str(manifest))
    assert res.exit_code == 4
    assert "known: gh, open, pay, std" in res.stderr
    res = cli("webhook", "sign", "gh", "--body", str(tmp_path / "missing.json"),
              "--manifest", str(manifest))
    assert res.exit_code == 2
    res = cli("webhook", "sign", "gh", "--body", str(body),
              "--manifest", str(tmp_path / "missing.yml"))
    assert res.exit_code == 2 and "manifest not found" in res.stderr


# ---- keys and authentication -------------------------------------------------------------


@pytest.fixture
def authed(api: tuple[Harness, str]) -> Iterator[tuple[Harness, str]]:
    """A second API over the same tables, with bearer keys required."""
    h, _ = api
    rt = Runtime.build(h.rt.settings.with_(api_auth=True), h.rt.manifest, clients=h.rt.clients)
    with BackgroundServer(create_app(rt)) as server:
        yield h, server.url


def test_keys_create_then_the_api_takes_it(
    authed: tuple[Harness, str], emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, url = authed
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator.url)
    monkeypatch.setenv("ORCH_PREFIX", h.rt.settings.prefix)
    monkeypatch.delenv("ORCHESTRATOR_API_KEY", raising=False)
    res = cli("keys", "create", "--name", "ci")
    assert res.exit_code == 0, res.output
    key = res.stdout.strip()
    assert re.fullmatch(r"ok_[A-Za-z0-9_-]{43}", key), res.stdout
    assert "shown only this once" in res.stderr
    assert f"export ORCHESTRATOR_API_KEY={key}" in res.stderr

    # the key, by flag or by environment, on every kind of call
    assert cli("runs", "--url", url, "--api-key", key).exit_code == 0
    monkeypatch.setenv("ORCHESTRATOR_API_KEY", key)
    view = out_json(cli("trigger", "hooked", "--wait", "--json", "--url", url))
    assert view["status"] == "success"
    assert out_json(cli("history", view["run_id"], "--json", "--url", url))["events"]
    assert out_json(cli("schedules", "list", "--json", "--url", url))["schedules"]
    res = cli("event", "emit", "order.paid", "--data", '{"total": 1}', "--url", url)
    assert res.exit_code == 0, res.output

    # no key, or a wrong one: exit 5, whatever the command
    monkeypatch.delenv("ORCHESTRATOR_API_KEY")
    calls = [
        ("runs",),
        ("trigger", "hooked"),
        ("show", view["run_id"]),
        ("history", view["run_id"]),
        ("cancel", view["run_id"]),
        ("rerun", view["run_id"]),
        ("event", "emit", "order.paid"),
        ("schedules", "list"),
        ("schedules", "pause", "hourly"),
        ("schedules", "trigger", "hourly"),
    ]
    for args in calls:
        for extra in ((), ("--api-key", "ok_" + "x" * 43), ("--api-key", key[:-1])):
            res = cli(*args, *extra, "--url", url)
            assert res.exit_code == 5, (args, extra, res.output)
            assert "authentication failed: set ORCHESTRATOR_API_KEY or --api-key" in res.stderr
    # nothing was changed by the refused calls
    [hourly] = out_json(cli("schedules", "list", "--json", "--url", url, "--api-key", key))[
        "schedules"]
    assert hourly["paused"] is False


def test_keys_create_without_tables_exits_3(
    emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulator.url)
    monkeypatch.setenv("ORCH_PREFIX", "nosuchstack")
    res = cli("keys", "create")
    assert res.exit_code == 3
    assert "nosuchstack-control" in res.stderr and "ORCH_PREFIX" in res.stderr
    monkeypatch.setenv("ORCH_API_AUTH", "maybe")
    assert cli("keys", "create").exit_code == 2


# ---- workflows ---------------------------------------------------------------------------


def test_workflows_list_shows_each_workflows_triggers_next_fire_and_last_run(
    api: tuple[Harness, str],
) -> None:
    _, url = api
    never = out_json(cli("workflows", "list", "--json", "--url", url))["workflows"]
    assert {w["name"]: w["last_run"] for w in never} == dict.fromkeys(
        ("on-order", "hourly", "hooked"))
    run = out_json(cli("run", "hooked", "--wait", "--json", "--url", url))
    assert run["status"] == "success"
    rows = {w["name"]: w for w in out_json(cli("workflows", "list", "--json", "--url", url))[
        "workflows"]}
    assert rows["hooked"]["last_run"]["run_id"] == run["run_id"]
    assert rows["hooked"]["last_run"]["status"] == "success"
    assert sorted(rows["hooked"]["webhooks"]) == ["gh", "open", "pay", "std"]
    assert rows["on-order"]["events"] == ["order.paid"]
    assert rows["hourly"]["next_fire"] is not None and rows["on-order"]["next_fire"] is None
    text = cli("workflows", "list", "--ascii", "--url", url)
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    hooked = next(i for i, line in enumerate(lines) if line.startswith("hooked "))
    assert f"last: ok success  {run['run_id']}" in lines[hooked]
    assert lines[hooked + 1].split() == ["webhooks", "gh,", "std,", "pay,", "open"]
    assert any(line.startswith("hourly ") and "never run" in line for line in lines)
    assert any("schedule every 1h, next " in line for line in lines)
    assert any(line.split() == ["events", "order.paid"] for line in lines)
