"""The trigger commands: `event emit`, `schedules list|pause|resume|trigger` (through the
API) and `webhook sign` (offline: signs a body with the manifest's secret and prints the
request that delivers it)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.client import URL_VARIABLE, default_url
from orchestrator.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    api_options,
    client,
    emit,
    fail,
    json_option,
    load,
    manifest_option,
    parse_json,
    reported,
)
from orchestrator.cli.render import render_schedules

__all__ = ["COMMANDS", "signed_request"]


# ---- events ------------------------------------------------------------------------------


@click.group()
def event() -> None:
    """Events: named facts that start the workflows listening to them (`on: {event}`)."""


@event.command("emit")
@click.argument("name")
@click.option("--key", help="The event's key (for workflows' `if` conditions and grouping).")
@click.option("--id", "event_id",
              help="The event's id: emitting the same id again starts nothing new.")
@click.option("--data", "--payload", "data_json",
              help="The event's data as JSON (or @file.json); --payload is the same.")
@json_option
@api_options
def emit_event(
    name: str,
    key: str | None,
    event_id: str | None,
    data_json: str | None,
    as_json: bool,
    url: str,
    api_key: str | None,
) -> None:
    """Emit event NAME; print its id and the runs it started."""
    data = parse_json(data_json, "--data")
    with reported():
        result = client(url, api_key).emit(name, data, key=key, event_id=event_id)
    if as_json:
        emit(result)
        return
    click.echo(f"event {result['id']}  {result['name']}"
               + ("  (already received: nothing new started)" if result["duplicate"] else ""))
    if not result["runs"]:
        click.echo("it started no run: no workflow listens to it (or every `if` was false);"
                   " durable runs waiting for it were woken")
    for r in result["runs"]:
        joined = "  (joined its batch)" if r.get("outcome") == "batched" else \
            "" if r["created"] else "  (existing)"
        click.echo(f"  {r['workflow']}  {r['run_id']}{joined}")
    for run_id in result.get("cancelled", ()):
        click.echo(f"  cancelled {run_id}")


# ---- schedules ---------------------------------------------------------------------------


@click.group()
def schedules() -> None:
    """Workflows that fire by themselves (`schedule: {cron | every}`)."""


@schedules.command("list")
@json_option
@api_options
def list_schedules(as_json: bool, url: str, api_key: str | None) -> None:
    """Every schedule: cadence, paused or not, next and last fire, missed ticks, errors."""
    with reported():
        data = client(url, api_key).schedules()
    if as_json:
        emit(data)
    else:
        click.echo(render_schedules(data["schedules"]))


def _schedule_state(result: dict[str, Any]) -> str:
    if result["paused"]:
        return "paused"
    when = result.get("next_fire")
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "-"
    return f"active, next fire {at}"


@schedules.command("pause")
@click.argument("name")
@json_option
@api_options
def pause_schedule(name: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Stop NAME's schedule firing (runs already started go on)."""
    with reported():
        result = client(url, api_key).schedule(name, "pause")
    if as_json:
        emit(result)
    else:
        click.echo(f"{name}: {_schedule_state(result)}")


@schedules.command("resume")
@click.argument("name")
@json_option
@api_options
def resume_schedule(name: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Resume NAME's schedule from its next tick after now (paused ticks are not replayed)."""
    with reported():
        result = client(url, api_key).schedule(name, "resume")
    if as_json:
        emit(result)
    else:
        click.echo(f"{name}: {_schedule_state(result)}")


@schedules.command("trigger")
@click.argument("name")
@json_option
@api_options
def trigger_schedule(name: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Fire NAME now, out of schedule (its next tick stays); print the run ids."""
    with reported():
        result = client(url, api_key).schedule(name, "trigger")
    if as_json:
        emit(result)
        return
    for run_id in result["runs"]:
        click.echo(run_id)


# ---- webhooks ----------------------------------------------------------------------------


def signed_request(hook: Any, name: str, body: bytes, body_file: str, url: str,
                   now: float) -> dict[str, Any]:
    """The URL, headers and a copy-paste curl line that deliver `body` to webhook `name`
    signed as its sender would (with its first secret) at `now`."""
    from orchestrator.webhook_signing import sign

    secrets = [s for s in hook.verify.secrets if s]
    signature = sign(hook.verify.scheme, secrets[0] if secrets else "", body, now=now)
    headers = {"Content-Type": "application/json", **signature}
    target = f"{url.rstrip('/')}/webhooks/{name}"
    curl = " ".join(
        ["curl -sS -X POST", shlex.quote(target)]
        + [f"-H {shlex.quote(f'{k}: {v}')}" for k, v in headers.items()]
        + ["--data-binary", shlex.quote("@" + body_file)]
    )
    return {"url": target, "headers": headers, "curl": curl}


@click.group()
def webhook() -> None:
    """Webhooks: signed HTTP deliveries that start a workflow (`webhooks:` in the manifest)."""


@webhook.command("sign")
@click.argument("name")
@click.option("--body", "body_file", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="The file whose bytes are the delivery's body.")
@manifest_option
@click.option("--url", default=lambda: default_url(),
              show_default=f"${URL_VARIABLE} or http://127.0.0.1:8080",
              help="The orchestrator API the curl line posts to.")
@json_option
def sign_webhook(name: str, body_file: str, manifest_path: str, url: str,
                 as_json: bool) -> None:
    """Sign a delivery of FILE to webhook NAME, offline, with the manifest's secret: print
    the headers and a curl line that sends it. Timestamped schemes (standard, stripe)
    accept it for the webhook's tolerance (5 minutes by default)."""
    manifest = load(manifest_path)
    hooks = getattr(manifest, "webhooks", None) or {}
    hook = hooks.get(name)
    if hook is None:
        known = ", ".join(sorted(hooks)) or "none"
        fail(f"webhook {name!r} is not defined in {manifest_path} (known: {known})",
             EXIT_NOT_FOUND)
    body = Path(body_file).read_bytes()
    try:
        request = signed_request(hook, name, body, body_file, url, time.time())
    except ValueError as exc:  # the manifest's secret cannot sign under its scheme
        fail(f"webhook {name!r}: cannot sign: {exc}", EXIT_USAGE)
    if as_json:
        emit(request)
        return
    for header, value in request["headers"].items():
        click.echo(f"{header}: {value}")
    click.echo("")
    click.echo(request["curl"])


COMMANDS = [event, schedules, webhook]
