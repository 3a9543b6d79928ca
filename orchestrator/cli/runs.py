"""The run commands: trigger (alias run), runs (a group: `runs [WORKFLOW]` lists, as `runs
list` does; durable.py adds its subcommands), show, cancel (alias kill), rerun and
history. Each is one or two calls to the HTTP API."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.client import KEEP, ApiClient
from orchestrator.cli.common import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    api_options,
    client,
    emit,
    fail,
    json_option,
    parse_json,
    reported,
)
from orchestrator.cli.diagram import render_diagram
from orchestrator.cli.durable_diagram import render_durable
from orchestrator.cli.durable_timeline import render_durable_timeline
from orchestrator.cli.render import render_history, render_run, render_runs
from orchestrator.cli.timeline import render_timeline
from orchestrator.cli.wrapping import flow
from orchestrator.engine.states import RunStatus
from orchestrator.errors import NotFound

__all__ = ["COMMANDS", "wait_for"]

UNFINISHED = frozenset({RunStatus.QUEUED.value, RunStatus.RUNNING.value})

input_option = click.option("--input", "input_json", help="Run input as JSON (or @file.json).")
wait_option = click.option(
    "--wait", is_flag=True, help="Wait for the run to finish; exit 1 unless it succeeded."
)
timeout_option = click.option("--timeout", default=600.0, show_default=True,
                              help="Seconds to --wait.")


def wait_for(api: ApiClient, run_id: str, timeout: float,
             pause: Callable[[float], Any] | None = None) -> Any:
    """Follow the run until it ends or `timeout` passed, then read it whole. Each request
    is a long poll (`GET /runs/{id}?steps=false&wait=...`): the API answers as soon as the
    run ends, reading only the run's row meanwhile, so following a run neither slows it
    nor learns of its end late. An API without the long poll (older) answers at once:
    then this polls, backing off to 1 s."""
    pause = pause or threading.Event().wait
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        left = deadline - time.monotonic()
        asked = time.monotonic()
        view = api.run(run_id, steps=False, wait=max(0.0, min(20.0, left)))
        if view["status"] not in UNFINISHED or time.monotonic() > deadline:
            return api.run(run_id)
        if time.monotonic() - asked < 1.0:  # answered at once: no long poll there
            pause(delay)
            delay = min(delay * 1.5, 1.0)


def _started(api: ApiClient, started: dict[str, Any], wait: bool, timeout: float,
             as_json: bool) -> None:
    """Print a run just started (or found); with `wait`, its outcome, and exit by it."""
    if not wait:
        if as_json:
            emit(started)
        else:
            click.echo(started["run_id"])
            if started.get("created") is False:
                click.echo("(an existing run: same run id or Idempotency-Key)", err=True)
        return
    with reported():
        view = wait_for(api, started["run_id"], timeout)
    if as_json:
        emit(view)
    else:
        click.echo(render_run(view))
    if view["status"] in UNFINISHED:
        fail(f"run {view['run_id']} still {view['status']} after {timeout:g}s", EXIT_UNAVAILABLE)
    sys.exit(EXIT_OK if view["status"] == RunStatus.SUCCESS.value else EXIT_RUN_FAILED)


@click.command()
@click.argument("workflow")
@input_option
@click.option("--run-id", help="Choose the run id (starting it twice returns the same run).")
@click.option(
    "--idempotency-key",
    help="Sent as the Idempotency-Key header: a retry with the same key and body returns "
    "the first run.",
)
@click.option("--priority", type=click.IntRange(0, 100),
              help="Its place among runs waiting for the same concurrency limit (0-100, "
              "higher first; default: the workflow's priority).")
@wait_option
@timeout_option
@json_option
@api_options
def trigger(
    workflow: str,
    input_json: str | None,
    run_id: str | None,
    idempotency_key: str | None,
    priority: int | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    url: str,
    api_key: str | None,
) -> None:
    """Start a run of WORKFLOW; print its id (or, with --wait, its outcome)."""
    payload = parse_json(input_json)
    api = client(url, api_key)
    with reported():
        started = api.start(workflow, payload, run_id, idempotency_key=idempotency_key,
                            priority=priority)
    _started(api, started, wait, timeout, as_json)


class ListByDefault(click.Group):
    """A group whose first argument, unless it names a subcommand (or asks for help),
    goes to its `list` subcommand: `runs chain --json` is `runs list chain --json`, as it
    was before `runs` had subcommands. (A workflow named like a subcommand: `runs list
    NAME`.)"""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group(cls=ListByDefault)
def runs() -> None:
    """List runs (`runs [WORKFLOW]`, the same as `runs list`); a run's children and
    parent; resume or reset a durable run."""


@runs.command("list")
@click.argument("workflow", required=False)
@click.option("--status", type=click.Choice([*(s.value for s in RunStatus), "paused"]),
              help="Only runs in this status (paused: durable runs a replay mismatch "
              "stopped, see `runs resume`).")
@click.option("--limit", type=click.IntRange(1, None),
              help="Runs a page lists (20 by default, at most 100); with --cost, the "
                   "newest runs summed (every run by default).")
@click.option("--cursor", help="Continue a listing (the cursor a previous page printed).")
@click.option("--where", "where", metavar="QUERY",
              help="Only runs whose input, output, error or trigger match: clauses joined by"
              " spaces, e.g. 'input.customer = \"acme\"', 'error ~ \"timeout\"', 'order:1042',"
              " a bare word; 'status = failed' and 'workflow = x' filter (README, \"Finding"
              " runs\").")
@click.option("--cost", is_flag=True,
              help="Sum the runs' AWS requests and their estimated dollars instead of "
                   "listing them (each run's cost as `show` gives it).")
@json_option
@api_options
def list_runs(
    workflow: str | None,
    status: str | None,
    limit: int | None,
    cursor: str | None,
    where: str | None,
    cost: bool,
    as_json: bool,
    url: str,
    api_key: str | None,
) -> None:
    """List runs, newest first: of WORKFLOW, or of every workflow; with --where, those a
    search finds. With --cost, what they cost together."""
    if cost and where:
        raise click.UsageError("--cost sums a listing; it does not take --where")
    if cost:
        with reported():
            total = summed_cost(client(url, api_key), workflow, status, limit, cursor)
        if as_json:
            emit(total)
        else:
            click.echo(render_total(total))
        return
    if limit is not None and limit > 100:
        raise click.BadParameter("a page lists at most 100 runs (without --cost)",
                                 param_hint="'--limit'")
    with reported():
        data = client(url, api_key).runs(workflow, limit or 20, status=status, cursor=cursor,
                                         q=where)
    if as_json:
        emit(data)
        return
    click.echo(render_runs(data["runs"]))
    if data.get("next_cursor"):
        click.echo(f"more: add --cursor {data['next_cursor']}", err=True)


def summed_cost(api: ApiClient, workflow: str | None, status: str | None,
                limit: int | None, cursor: str | None = None) -> dict[str, Any]:
    """The cost of the newest `limit` runs (every one if None) of `workflow` (of every
    workflow if None), paged through the API: their requests by operation summed, and
    their dollars. Runs whose view has no cost (an older API) are counted apart."""
    requests: dict[str, int] = {}
    dollars, runs, uncounted, dated = 0.0, 0, 0, None
    while limit is None or runs + uncounted < limit:
        page_size = 100 if limit is None else min(100, limit - runs - uncounted)
        page = api.runs(workflow, page_size, status=status, cursor=cursor)
        for summary in page["runs"]:
            cost = api.run(summary["run_id"]).get("cost")
            if cost is None:
                uncounted += 1
                continue
            runs += 1
            dollars += cost["dollars"]
            dated = dated or cost["prices_date"]
            for op, n in cost["requests"].items():
                requests[op] = requests.get(op, 0) + n
        cursor = page.get("next_cursor")
        if not cursor or not page["runs"]:
            break
    ordered = dict(sorted(requests.items(), key=lambda kv: (-kv[1], kv[0])))
    return {"workflow": workflow, "status": status, "runs": runs, "uncounted": uncounted,
            "cost": {"requests": ordered, "total_requests": sum(ordered.values()),
                     "dollars": round(dollars, 10), "prices_date": dated}}


def _dollars(d: float) -> str:
    return f"${d:,.2f}" if d >= 1 else f"${d:.8f}".rstrip("0").rstrip(".") + ("" if d else "0")


def render_cost(cost: dict[str, Any], top: int = 3, width: int | None = None) -> str:
    """A run's cost on one line, wrapped to `width` between its figures (an operation
    stays beside its count): its AWS requests, their estimate and the top operations."""
    ops = [f"{op} {n}" for op, n in list(cost["requests"].items())[:top]]
    more = len(cost["requests"]) - top
    ops += [f"{more} more"] if more > 0 else []
    if ops:
        ops = [f"{x}," for x in ops[:-1]] + [ops[-1]]
        ops[0] = f"({ops[0]}"
        ops[-1] += ")"
    figures = [f"cost: {cost['total_requests']} AWS requests,", f"~{_dollars(cost['dollars'])}",
               f"at the prices of {cost['prices_date']}", *ops]
    return "\n".join(flow(figures, width, " ", indent="  "))


def render_total(total: dict[str, Any]) -> str:
    """`runs --cost`: the runs summed, then each operation."""
    cost = total["cost"]
    what = total["workflow"] or "every workflow"
    lines = [f"{what}: {total['runs']} runs, {cost['total_requests']} AWS requests,"
             f" ~{_dollars(cost['dollars'])}"
             + (f" at the prices of {cost['prices_date']}" if cost["prices_date"] else "")]
    if total["uncounted"]:
        lines.append(f"({total['uncounted']} runs without a cost: an API older than it)")
    width = max((len(op) for op in cost["requests"]), default=0)
    lines += [f"  {op:<{width}}  {n}" for op, n in cost["requests"].items()]
    return "\n".join(lines)


@click.command()
@click.argument("target")
@json_option
@click.option("--ascii", "ascii_only", is_flag=True, default=None, help="Plain ASCII output.")
@click.option("--timeline", is_flag=True,
              help="A run as a waterfall on one scale as wide as the terminal: a YAML "
                   "workflow's attempts (time in the queue, calls, retries' backoff), a "
                   "durable run's operations (steps running, waits).")
@api_options
def show(target: str, as_json: bool, ascii_only: bool | None, timeline: bool, url: str,
         api_key: str | None) -> None:
    """Show a run (by id), or the newest run of a workflow (by name)."""
    api = client(url, api_key)
    with reported():
        try:
            view = api.run(target)
        except NotFound:
            newest = api.runs(target, 1)["runs"]
            if not newest:
                raise NotFound(f"no run or workflow with runs named {target!r}") from None
            view = api.run(newest[0]["run_id"])
    if as_json:
        emit(
            {
                "run_id": view["run_id"],
                "workflow": view["workflow"],
                "status": view["status"],
                "steps": [
                    {k: s.get(k) for k in ("step", "status", "attempts", "output", "error")}
                    for s in view["steps"]
                ],
            }
        )
        return
    # As wide as the terminal (COLUMNS, else 100 when piped), every line: the renderers
    # wrap what does not fit, never cut; plain ASCII when asked or piped.
    plain = bool(ascii_only) or not sys.stdout.isatty()
    width = shutil.get_terminal_size((100, 24)).columns
    if view.get("kind") == "durable":
        if timeline:
            click.echo(render_durable_timeline(view, ascii_only=plain, width=width))
        else:
            click.echo(render_durable(view, ascii_only=plain, width=width))
    else:
        if timeline:
            with reported():
                events = api.history(view["run_id"])["events"]
            click.echo(render_timeline(view, events, width=width, ascii_only=plain))
        else:
            click.echo(render_diagram(view, ascii_only=plain, width=width))
    if view.get("cost"):
        click.echo(render_cost(view["cost"], width=width))


@click.command()
@click.argument("run_id")
@click.option("--reason", default="cancelled from the CLI", show_default=True)
@json_option
@api_options
def cancel(run_id: str, reason: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Cancel a run: a queued one never starts; a running one starts nothing new, its
    in-flight steps land and the rest is skipped. A finished run exits 2."""
    with reported():
        view = client(url, api_key).cancel(run_id, reason)
    if as_json:
        emit(view)
    elif view["status"] in UNFINISHED:
        click.echo(f"{run_id}: cancel requested ({view['status']}; in-flight steps finish)")
    else:
        click.echo(f"{run_id}: cancelled ({view['status']})")


@click.command()
@click.argument("run_id")
@click.option("--input", "input_json",
              help="New input as JSON (or @file.json); default: the old run's input.")
@click.option("--run-id", "new_run_id", help="Choose the new run's id.")
@wait_option
@timeout_option
@json_option
@api_options
def rerun(
    run_id: str,
    input_json: str | None,
    new_run_id: str | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    url: str,
    api_key: str | None,
) -> None:
    """Start a new run from a finished one that did not succeed: its successful steps
    are reused, the failed, skipped or cancelled ones run again. Prints the new run id."""
    payload = KEEP if input_json is None else parse_json(input_json)
    api = client(url, api_key)
    with reported():
        started = api.rerun(run_id, input=payload, new_run_id=new_run_id)
    _started(api, started, wait, timeout, as_json)


@click.command()
@click.argument("run_id")
@json_option
@api_options
def history(run_id: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Every transition of a run and its steps, oldest first (local times)."""
    with reported():
        data = client(url, api_key).history(run_id)
    if as_json:
        emit(data)
    else:
        click.echo(render_history(data["events"]))


def alias(command: click.Command, name: str) -> click.Command:
    """`command` under another name (the old name of a renamed command)."""
    return click.Command(
        name, params=command.params, callback=command.callback,
        help=f"Same as `{command.name}` (its older name).",
    )


@click.command("run", params=trigger.params)
@click.pass_context
def run(ctx: click.Context, /, **kwargs: Any) -> None:
    """Run script FILE on the stack to its end, printing its run id, its log and how
    it ended (exit 0 if it succeeded, 1 if not); or, when no such file exists, the same
    as `trigger WORKFLOW` (its older name)."""
    from orchestrator.cli.scripts import run_script

    target = str(kwargs["workflow"])
    if Path(target).is_file() or target.endswith(".sh"):
        run_script(target, parse_json(kwargs["input_json"]), kwargs["url"],
                   kwargs["api_key"], kwargs["timeout"], kwargs["as_json"])
        return
    ctx.invoke(trigger, **kwargs)


COMMANDS = [trigger, run, runs, show, cancel, alias(cancel, "kill"), rerun, history]
