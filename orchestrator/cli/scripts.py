"""Durable shell scripts from the terminal: `run FILE` (to its end, printing its log),
`submit FILE`, `handler set NAME FILE --on EVENT`, `schedule create ... --name NAME
FILE`. The commands a script calls while it runs (`step`, `sleep`, `wait`, `state`,
`lock`, `activity`, `call`, `spawn`) are answered by its script host: see
functions/sdk/scripts/."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    api_options,
    client,
    emit,
    fail,
    json_option,
    parse_json,
    reported,
)
from orchestrator.presentation.script_log import script_log

__all__ = ["COMMANDS", "read_script", "run_script", "script_name"]

# How long one long poll of a run asks the API to hold it.
POLL = 20.0
_NAME = re.compile(r"[^A-Za-z0-9._~-]+")


def read_script(path: str) -> str:
    """The text of script file `path`, or a usage error naming it."""
    p = Path(path)
    if not p.exists():
        fail(f"{path}: no such script", EXIT_USAGE)
    if not p.is_file():
        fail(f"{path}: not a script file", EXIT_USAGE)
    data = p.read_bytes()
    if b"\x00" in data:
        fail(f"{path}: not a script: it holds a NUL byte (a binary file?)", EXIT_USAGE)
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        fail(f"{path}: not a script: not UTF-8 text (byte {exc.start})", EXIT_USAGE)
    if not text.strip():
        fail(f"{path}: the script is empty", EXIT_USAGE)
    return text


def script_name(path: str) -> str:
    """A workflow name for script file `path`: its file name less `.sh`."""
    stem = Path(path).name.removesuffix(".sh")
    return _NAME.sub("-", stem).strip("-")[:128] or "script"


def _throttle(spec: str | None, key: str | None) -> dict[str, Any] | None:
    if spec is None:
        if key is not None:
            fail("--throttle-key needs --throttle LIMIT/PERIOD", EXIT_USAGE)
        return None
    limit, sep, period = spec.partition("/")
    if not sep or not limit.isdigit() or int(limit) < 1 or not period:
        fail(f"--throttle {spec!r}: give LIMIT/PERIOD, e.g. 6/1m", EXIT_USAGE)
    return {"limit": int(limit), "period": period, "key": key or ""}


def _submit(api: Any, path: str, payload: Any, idempotency_key: str | None,
            throttle: dict[str, Any] | None) -> Any:
    body: dict[str, Any] = {"name": script_name(path), "text": read_script(path),
                            "input": payload}
    if throttle is not None:
        body["throttle"] = throttle
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with reported():
        return api.request("POST", "/scripts/runs", json=body, headers=headers)


def ending(view: dict[str, Any]) -> str:
    """How a run ended, in words: `succeeded`, or `failed: <message>`."""
    status = view.get("status")
    if status == "success":
        return "succeeded"
    err = view.get("error") or {}
    message = err.get("message") if isinstance(err, dict) else None
    return f"{status}: {message}" if message else str(status)


def run_script(path: str, payload: Any, url: str, api_key: str | None, timeout: float,
               as_json: bool) -> None:
    """Start script `path` and follow it to its end: its id, its log, how it ended."""
    api = client(url, api_key)
    started = _submit(api, path, payload, None, None)
    run_id = started["run_id"]
    if not as_json:
        click.echo(f"  run: {run_id}")
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        with reported():
            view = api.run(run_id, steps=False, wait=max(0.1, min(POLL, left)))
        if view["status"] not in ("queued", "running") or left <= 0:
            break
    with reported():  # with its steps: a durable run's result comes with them
        view = api.run(run_id)
    if as_json:
        emit(view)
    else:
        log = script_log(view) or ""
        if log:
            sys.stdout.write(log if log.endswith("\n") else log + "\n")
        click.echo(f"  {run_id} {ending(view)}")
    if view["status"] in ("queued", "running"):
        fail(f"run {run_id} still {view['status']} after {timeout:g}s", EXIT_UNAVAILABLE)
    sys.exit(EXIT_OK if view["status"] == "success" else EXIT_RUN_FAILED)


@click.command()
@click.argument("file")
@click.option("--input", "input_json", help="The run's input as JSON (or @file.json): the"
              " script reads {\"payload\": input} at $ORCHESTRATOR_INPUT_FILE.")
@click.option("--idempotency-key", help="A repeat submit with this key answers the first run.")
@click.option("--throttle", "throttle", metavar="LIMIT/PERIOD",
              help="Start no faster than LIMIT runs per PERIOD (6/1m); over it, wait queued.")
@click.option("--throttle-key", help="The throttle's budget key (one budget per key).")
@json_option
@api_options
def submit(file: str, input_json: str | None, idempotency_key: str | None,
           throttle: str | None, throttle_key: str | None, as_json: bool, url: str,
           api_key: str | None) -> None:
    """Start durable script FILE on the stack; print its run id."""
    payload = parse_json(input_json)
    started = _submit(client(url, api_key), file, payload, idempotency_key,
                      _throttle(throttle, throttle_key))
    if as_json:
        emit(started)
    else:
        click.echo(started["run_id"])


@click.group()
def handler() -> None:
    """Scripts that events start: one run per event (`handler set NAME FILE --on EVENT`)."""


@handler.command("set")
@click.argument("name")
@click.argument("file")
@click.option("--on", "on", multiple=True, required=True,
              help="The event name whose events each start a run (repeatable).")
@json_option
@api_options
def handler_set(name: str, file: str, on: tuple[str, ...], as_json: bool, url: str,
                api_key: str | None) -> None:
    """Store script FILE as workflow NAME, started by every event named --on (the run
    takes the event's key as its subject and its data as its input)."""
    text = read_script(file)
    with reported():
        entry = client(url, api_key).request("PUT", f"/scripts/{name}",
                                             json={"text": text, "on": list(on)})
    if as_json:
        emit(entry)
    else:
        click.echo(f"handler {name}: {file} on {', '.join(on)}")


@click.group()
def schedule() -> None:
    """Scripts that fire by themselves (`schedule create --every D --name NAME FILE`)."""


@schedule.command("create")
@click.argument("file")
@click.option("--name", required=True, help="The schedule's (and workflow's) name.")
@click.option("--every", help="Fire every DURATION (5m, 1h), aligned to the epoch.")
@click.option("--cron", help="Fire on a cron expression (in --timezone).")
@click.option("--timezone", help="The cron's timezone (IANA name; UTC by default).")
@json_option
@api_options
def schedule_create(file: str, name: str, every: str | None, cron: str | None,
                    timezone: str | None, as_json: bool, url: str,
                    api_key: str | None) -> None:
    """Store script FILE as workflow NAME, fired by its schedule; a tick that finds the
    previous run still going is skipped."""
    if (every is None) == (cron is None):
        fail("give one of --every and --cron", EXIT_USAGE)
    when: dict[str, Any] = {"every": every} if every is not None else {"cron": cron}
    if timezone is not None:
        when["timezone"] = timezone
    text = read_script(file)
    with reported():
        entry = client(url, api_key).request("PUT", f"/scripts/{name}",
                                             json={"text": text, "schedule": when})
    if as_json:
        emit(entry)
    else:
        how = f"every {every}" if every is not None else f"cron {cron!r}"
        click.echo(f"schedule {name}: {file} {how}")


def _in_script(name: str) -> click.Command:
    """`orchestrator NAME ...` run as a program: inside a script the host's shell
    function answers it, so reaching here means no script host is listening (run at a
    terminal, or from a shell the script started without BASH_ENV)."""

    def refuse(args: tuple[str, ...]) -> None:
        fail(f"orchestrator {name}: an in-script command: not inside a script run (or in"
             " a shell the script started, where its host's `orchestrator` function is not"
             " defined); start the script with `orchestrator run FILE` or `orchestrator"
             " submit FILE`", EXIT_USAGE)

    return click.Command(
        name, callback=refuse, add_help_option=False,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help=f"In a durable script: `{name}` (answered by its script host).",
    )


IN_SCRIPT = ("step", "sleep", "wait", "lock", "activity", "call", "spawn")
COMMANDS = [submit, handler, schedule, *(_in_script(n) for n in IN_SCRIPT)]
