"""The durable-run commands: `signal RUN NAME`, `hooks create|execute`, and `runs
children|parent|resume|reset RUN` (commands.py mounts those on the `runs` group). Each is
one call to the HTTP API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator.cli.bulk import bulk_action, selection_options
from orchestrator.cli.common import (
    api_options,
    client,
    emit,
    json_option,
    parse_json,
    reported,
)
from orchestrator.cli.render import render_runs

__all__ = ["COMMANDS", "RUNS_COMMANDS"]

F = TypeVar("F", bound=Callable[..., Any])

JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
              int: "a number", float: "a number", type(None): "null"}

run_argument = click.argument("run_id", metavar="RUN")


def json_object(raw: str | None, hint: str) -> dict[str, Any] | None:
    """A JSON-object option's value (inline or @file), None when not given; any other
    JSON is a usage error (2) naming the option."""
    if raw is None:
        return None
    value = parse_json(raw, hint)
    if not isinstance(value, dict):
        kind = JSON_KINDS.get(type(value), type(value).__name__)
        raise click.BadParameter(f"must be a JSON object ({{...}}), not {kind}",
                                 param_hint=hint)
    return value


def payload_option(what: str) -> Callable[[F], F]:
    return click.option("--payload", "payload_json",
                        help=f"{what}: a JSON object (or @file.json); default {{}}.")


# ---- signals -----------------------------------------------------------------------------


@click.command("signal")
@run_argument
@click.argument("name")
@payload_option("The signal's payload")
@click.option("--idempotency-key",
              help="Sent as the Idempotency-Key header: sending the signal again with the "
              "same key queues nothing.")
@json_option
@api_options
def send_signal(run_id: str, name: str, payload_json: str | None,
                idempotency_key: str | None, as_json: bool, url: str,
                api_key: str | None) -> None:
    """Send signal NAME to durable run RUN: what its `ctx.wait_for_signal(NAME)` returns.
    A signal sent before the run waits for it is kept for it; a finished run exits 2."""
    payload = json_object(payload_json, "--payload") or {}
    with reported():
        result = client(url, api_key).signal(run_id, name, payload,
                                              idempotency_key=idempotency_key)
    if as_json:
        emit(result)
    elif result["duplicate"]:
        click.echo(f"{run_id}: signal {name} was sent already (id {result['id']}): "
                   "nothing new queued")
    else:
        click.echo(f"{run_id}: signal {name} sent (id {result['id']})")


# ---- hooks -------------------------------------------------------------------------------


@click.group()
def hooks() -> None:
    """Hooks: single-use URLs that send a signal to a durable run (`ctx.create_hook` in a
    workflow, or `hooks create`). Executing one takes its token, no API key."""


@hooks.command("create")
@run_argument
@click.argument("signal_name", metavar="SIGNAL")
@click.option("--metadata", "metadata_json",
              help="A JSON object (or @file.json) merged over the payload the hook is "
              "executed with: its fields win.")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True),
              help="Seconds until the hook expires (default 7 days).")
@click.option("--token", help="A token of your own (at least 32 characters); by default "
              "one of 256 random bits is made.")
@json_option
@api_options
def create_hook(run_id: str, signal_name: str, metadata_json: str | None, ttl: float | None,
                token: str | None, as_json: bool, url: str, api_key: str | None) -> None:
    """Create a hook for running durable run RUN: executing it sends SIGNAL to RUN. Prints
    the token (on stdout; only its hash is stored) and how to execute it."""
    metadata = json_object(metadata_json, "--metadata")
    with reported():
        made = client(url, api_key).create_hook(run_id, signal_name, metadata=metadata,
                                                ttl=ttl, token=token)
    if as_json:
        emit(made)
        return
    expires = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(made["expires_at"]))
    click.echo(made["token"])
    click.echo(f"hook for run {run_id}: signal {made['signal']}, single-use, expires "
               f"{expires}\nexecute it with\n"
               f"  orchestrator hooks execute {made['token']} --payload '{{...}}'\n"
               f"or POST a JSON object to {made['url']}", err=True)


@hooks.command("execute")
@click.argument("token")
@payload_option("The payload")
@json_option
@api_options
def execute_hook(token: str, payload_json: str | None, as_json: bool, url: str,
                 api_key: str | None) -> None:
    """Execute the hook of TOKEN (or of its URL): its signal goes to its run with the
    payload, the hook's metadata merged over it. Single-use: the same payload again is a
    duplicate (exit 0); another payload, or an expired hook, exits 2; an unknown token 4."""
    payload = json_object(payload_json, "--payload") or {}
    with reported():
        result = client(url, api_key).execute_hook(token, payload)
    if as_json:
        emit(result)
    elif result["duplicate"]:
        click.echo(f"{result['run_id']}: hook executed already with this payload "
                   f"(signal {result['signal']}): nothing new sent")
    else:
        click.echo(f"{result['run_id']}: signal {result['signal']} sent")


# ---- runs children | parent | resume | reset ---------------------------------------------


@click.command("children")
@run_argument
@json_option
@api_options
def children(run_id: str, as_json: bool, url: str, api_key: str | None) -> None:
    """The runs started as children of RUN (`ctx.call`, `ctx.spawn`, or with a parent
    run id), oldest first."""
    with reported():
        data = client(url, api_key).children(run_id)
    if as_json:
        emit(data)
    elif not data["children"]:
        click.echo(f"{run_id}: no children")
    else:
        click.echo(render_runs(data["children"]))


@click.command("parent")
@run_argument
@json_option
@api_options
def parent(run_id: str, as_json: bool, url: str, api_key: str | None) -> None:
    """The run RUN is a child of."""
    with reported():
        data = client(url, api_key).parent(run_id)
    if as_json:
        emit(data)
    elif data["parent"]:
        click.echo(render_runs([data["parent"]]))
    elif data["parent_run_id"]:
        click.echo(f"{run_id}: parent {data['parent_run_id']} (expired)")
    else:
        click.echo(f"{run_id}: no parent run")


@click.command("resume")
@click.argument("run_id", metavar="[RUN]", required=False)
@selection_options
@json_option
@api_options
def resume(run_id: str | None, as_json: bool, url: str, api_key: str | None,
           **selection: Any) -> None:
    """Call paused durable run RUN's workflow again, once the code whose replay mismatch
    paused it is fixed. A run not paused is only woken. A finished run, or one being
    advanced right now (try again), exits 2. Without RUN, every run a selection names
    (--where, --workflow, --status paused, --run-id), as one job (`runs cancel`)."""
    if run_id is None:
        bulk_action("resume", as_json=as_json, url=url, api_key=api_key, **selection)
        return
    if any(selection[k] for k in ("where", "workflow", "status", "run_ids")):
        raise click.UsageError("RUN or a selection (--where, ...), not both")
    with reported():
        result = client(url, api_key).resume(run_id)
    if as_json:
        emit(result)
    else:
        was = "it was paused" if result["was_paused"] else "it was not paused: woken"
        click.echo(f"{run_id}: resumed ({was})")


@click.command("reset")
@run_argument
@click.option("--to", "to", required=True, type=click.IntRange(min=0),
              help="The position in the workflow's top scope from which the journal is "
              "forgotten: the operations there and after run again (0: all).")
@json_option
@api_options
def reset(run_id: str, to: int, as_json: bool, url: str, api_key: str | None) -> None:
    """Reset durable run RUN to position N of its journal and call its workflow again: the
    operations from N on run again. A finished run, or one being advanced right now,
    exits 2."""
    with reported():
        result = client(url, api_key).reset(run_id, to)
    if as_json:
        emit(result)
    else:
        n = result["forgotten"]
        click.echo(f"{run_id}: reset to {to}: {n} operation{'s' if n != 1 else ''} "
                   "forgotten, running again")


COMMANDS = [send_signal, hooks]
RUNS_COMMANDS = [children, parent, resume, reset]
