"""`orchestrator workflows list`: every declared workflow with what starts it (its
schedule and next fire, its events, its webhooks) and its last run's status, from the
API (`/workflows`, `/schedules`, and one `/runs` page of one run a workflow)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from orchestrator.cli.client import ApiClient
from orchestrator.cli.common import api_options, client, emit, json_option, reported
from orchestrator.cli.render import relative_time, status_icon
from orchestrator.presentation.flow import flow_lines

__all__ = ["COMMANDS", "render_workflows"]


@click.group()
def workflows() -> None:
    """The manifest's workflows, as the API serves them."""


def gather(api: ApiClient) -> list[dict[str, Any]]:
    """Each workflow with `next_fire` (its schedule's, if any) and `last_run` (its
    newest run: id, status and when it was created; None if it never ran)."""
    declared = api.request("GET", "/workflows")["workflows"]
    fires = {s["workflow"]: s for s in api.schedules()["schedules"]}
    out = []
    for wf in declared:
        newest = api.runs(wf["name"], 1)["runs"]
        schedule = fires.get(wf["name"])
        out.append({
            **wf,
            "next_fire": schedule.get("next_fire") if schedule else None,
            "schedule_paused": bool(schedule and schedule.get("paused")),
            "last_run": ({k: newest[0].get(k) for k in ("run_id", "status", "created_at")}
                         if newest else None),
        })
    return out


def _duration(seconds: Any) -> str:
    """`every`'s seconds as the manifest would say them: 90s, 15m, 1h, 2d."""
    try:
        secs = float(seconds)
    except (TypeError, ValueError):
        return str(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size and secs % size == 0:
            return f"{int(secs // size)}{unit}"
    return f"{secs:g}s"


def _triggers(wf: dict[str, Any], now: float) -> list[str]:
    """What starts the workflow, a line a kind (any workflow starts from the API)."""
    out = []
    schedule = wf.get("schedule") or {}
    if schedule:
        cadence = (f"cron {schedule['cron']}" if schedule.get("cron")
                   else f"every {_duration(schedule.get('every'))}")
        state = ("paused" if wf.get("schedule_paused")
                 else f"next {relative_time(wf.get('next_fire'), now)}")
        out.append(f"schedule {cadence}, {state}")
    if wf.get("events"):
        out.append(f"events {', '.join(wf['events'])}")
    if wf.get("webhooks"):
        out.append(f"webhooks {', '.join(wf['webhooks'])}")
    return out or ["API only"]


def render_workflows(rows: list[dict[str, Any]], *, ascii_only: bool = False,
                     now: float | None = None) -> str:
    if not rows:
        return "no workflows declared"
    now = time.time() if now is None else now
    width = max(len(r["name"]) for r in rows)
    lines = []
    for r in rows:
        last = r.get("last_run")
        shown = ("never run" if last is None else
                 f"{status_icon(last['status'], ascii_only).rstrip()} {last['status']}"
                 f"  {last['run_id']}  {relative_time(last.get('created_at'), now)}")
        lines.append(f"{r['name']:<{width}}  {r.get('kind', 'dag'):<7}  last: {shown}")
        for trigger in _triggers(r, now) + flow_lines(r.get("flow") or {}):
            lines.append(f"{'':<{width}}  {'':<7}  {trigger}")
    return "\n".join(lines)


@workflows.command("list")
@json_option
@click.option("--ascii", "ascii_only", is_flag=True, default=None, help="Plain ASCII output.")
@api_options
def list_workflows(as_json: bool, ascii_only: bool | None, url: str,
                   api_key: str | None) -> None:
    """Every declared workflow: its kind, what starts it (schedule and next fire, events,
    webhooks) and its last run's status."""
    with reported():
        rows = gather(client(url, api_key))
    if as_json:
        emit({"workflows": rows})
    else:
        click.echo(render_workflows(rows, ascii_only=bool(ascii_only) or not sys.stdout.isatty()))


COMMANDS = [workflows]
