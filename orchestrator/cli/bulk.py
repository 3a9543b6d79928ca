"""Acting on many runs from the command line: `orchestrator runs cancel --where …`,
`runs rerun --where …`, `runs resume --where …` (services/bulk.py, POST /bulk-actions).

Each counts the runs first and prints how many and the first few, asks for a
confirmation (`--yes` answers it; without a terminal and without --yes, nothing is
done and the exit is 1), starts the job and follows its progress to its end, then
prints what it did (by outcome; every run with --json)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from orchestrator.cli.client import ApiClient
from orchestrator.cli.common import api_options, client, emit, json_option, parse_json, reported
from orchestrator.engine.states import RunStatus

__all__ = ["RUNS_COMMANDS", "bulk_action", "cancel_many", "rerun_many", "selection_options"]

# How often the progress is read while a job runs.
FOLLOW_EVERY = 0.5


def selection_options(f: Any) -> Any:
    """--where, --workflow, --status, --run-id: which runs a bulk action takes."""
    for option in reversed([
        click.option("--where", "where", metavar="QUERY",
                     help="The runs a search finds (as `runs --where` takes it), e.g."
                     " 'input.customer = \"acme\"', 'error ~ \"timeout\"'."),
        click.option("--workflow", help="Only runs of this workflow."),
        click.option("--status", type=click.Choice([*(s.value for s in RunStatus), "paused"]),
                     help="Only runs in this status."),
        click.option("--run-id", "run_ids", multiple=True, metavar="RUN",
                     help="A run by its id (repeat for more; instead of a selection)."),
        click.option("--yes", "-y", is_flag=True, help="Do not ask for a confirmation."),
        click.option("--no-wait", is_flag=True,
                     help="Start the job and print its id; do not follow it."),
    ]):
        f = option(f)
    return f


def _spec(action: str, where: str | None, workflow: str | None, status: str | None,
          run_ids: tuple[str, ...], extra: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, **extra}
    if run_ids:
        spec["run_ids"] = list(run_ids)
    for name, value in (("q", where), ("workflow", workflow), ("status", status)):
        if value:
            spec[name] = value
    if not (run_ids or where or workflow or status):
        raise click.UsageError("name the runs: --where, --workflow, --status or --run-id")
    return spec


def _follow(api: ApiClient, job_id: str, total: int,
            sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """The job once done, its progress on stderr meanwhile (one line, redrawn on a
    terminal), read every FOLLOW_EVERY seconds (by `sleep`)."""
    tty = sys.stderr.isatty()
    while True:
        job: dict[str, Any] = api.bulk_job(job_id, limit=1)
        line = f"{job_id}: {job['processed']}/{total} runs"
        if tty:
            click.echo(f"\r{line}", nl=False, err=True)
        if job["status"] != "running":
            if tty:
                click.echo("", err=True)
            return job
        sleep(FOLLOW_EVERY)


def _report(api: ApiClient, job_id: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = api.bulk_job(job_id, limit=1000, cursor=cursor)
        runs += page["runs"]
        cursor = page.get("next_cursor")
        if not cursor:
            return runs


def bulk_action(action: str, where: str | None, workflow: str | None, status: str | None,
                run_ids: tuple[str, ...], yes: bool, no_wait: bool, as_json: bool,
                url: str, api_key: str | None, **extra: Any) -> None:
    """Count, confirm, start and follow one bulk action (see the module's doc)."""
    spec = _spec(action, where, workflow, status, run_ids, extra)
    api = client(url, api_key)
    with reported():
        counted = api.bulk({**spec, "dry_run": True})
    n = counted["count"]
    more = "+" if counted.get("more") else ""
    sample = ", ".join(counted["sample"])
    click.echo(f"{n}{more} run{'s' if n != 1 else ''} to {action}"
               + (f": {sample}{', …' if n > len(counted['sample']) else ''}" if n else ""),
               err=as_json)
    if n == 0:
        if as_json:
            emit({"count": 0, "job": None})
        return
    if not yes:
        if not sys.stdin.isatty():
            raise click.ClickException(f"{action} {n} runs: confirm with --yes (no terminal"
                                       " to ask on)")
        click.confirm(f"{action.capitalize()} {n}{more} runs?", abort=True, err=True)
    with reported():
        job = api.bulk({**spec, "expected": n})
        if no_wait:
            if as_json:
                emit(job)
            else:
                click.echo(job["job_id"])
            return
        job = _follow(api, job["job_id"], n)
        runs = _report(api, job["job_id"])
    if as_json:
        emit({**job, "runs": runs})
        return
    counts = job["counts"]
    click.echo(f"{job['job_id']}: {counts['done']} {action} done, {counts['skipped']} skipped,"
               f" {counts['failed']} failed")
    for o in runs:
        if o["outcome"] != "done":
            click.echo(f"  {o['run_id']}: {o['outcome']}: {o['detail']}")


@click.command("cancel")
@selection_options
@click.option("--reason", default="cancelled from the CLI", show_default=True)
@json_option
@api_options
def cancel_many(**kwargs: Any) -> None:
    """Cancel every run a selection names (--where, --workflow, --status, --run-id), as
    one job: counts them, asks, then follows the job to its end."""
    bulk_action("cancel", **kwargs)


@click.command("rerun")
@selection_options
@click.option("--input", "input_json",
              help="New input as JSON (or @file.json) for every rerun; default: each run's.")
@json_option
@api_options
def rerun_many(input_json: str | None, **kwargs: Any) -> None:
    """Rerun every finished, unsuccessful run a selection names, as one job (each rerun
    reuses its run's successful steps)."""
    extra = {} if input_json is None else {"input": parse_json(input_json)}
    bulk_action("rerun", **kwargs, **extra)


RUNS_COMMANDS = [cancel_many, rerun_many]
