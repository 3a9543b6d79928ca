"""Versions of the backends' code from the command line (api/versions.py):
`versions [BACKEND]` lists them with their open pinned runs; `versions register URL`,
`versions promote V`, `versions retire V`; and the `runs check` and `runs migrate`
subcommands, which check every open durable run against code and move the compatible
ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import (
    EXIT_RUN_FAILED,
    api_options,
    client,
    emit,
    json_option,
    reported,
)

__all__ = ["COMMANDS", "RUNS_COMMANDS"]

# A check of many runs takes a while: the API answers once every run is checked.
LONG = 600.0

backend_option = click.option("--backend", help="The backend (default: the one with"
                              " versions registered).")


class _Versions(click.Group):
    """`versions` alone, or with a backend's name, lists; a subcommand's name acts."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_Versions)
def versions() -> None:
    """The live versions of each backend's code, and the open runs pinned to each."""


@versions.command("list")
@click.argument("backend", required=False)
@api_options
@json_option
def list_(backend: str | None, url: str, api_key: str | None, as_json: bool) -> None:
    """List each live version (or BACKEND's) with its open pinned runs."""
    path = "/versions" + (f"/{backend}" if backend else "")
    with reported():
        doc = client(url, api_key).request("GET", path)
    if as_json:
        emit(doc)
        return
    if not doc["backends"]:
        click.echo("no backend has versions registered")
    for b in doc["backends"]:
        click.echo(f"{b['backend']}  (current: {b['current'] or '-'})")
        for v in b["versions"]:
            mark = "*" if v["current"] else " "
            state = "  retiring" if v["retiring"] else ""
            click.echo(f"  {mark} {v['version']:<16} {v['open_runs']:>6} open runs  "
                       f"{v['url']}{state}")
        if b["unversioned_runs"]:
            click.echo(f"    (no version)     {b['unversioned_runs']:>6} open runs")


@versions.command("register")
@click.argument("functions_url", metavar="URL")
@click.option("--version", "label", help="Its label (default: a hash of what it publishes).")
@backend_option
@api_options
@json_option
def register(functions_url: str, label: str | None, backend: str | None, url: str,
             api_key: str | None, as_json: bool) -> None:
    """Register the code served at URL as a version (not current: promote it)."""
    body: dict[str, Any] = {"url": functions_url}
    if label:
        body["version"] = label
    with reported():
        doc = client(url, api_key).request("POST", f"/versions/{_backend(url, api_key, backend)}",
                                           json=body)
    if as_json:
        emit(doc)
    else:
        click.echo(f"{doc['backend']}: version {doc['version']} at {doc['url']}"
                   + ("" if doc["new"] else " (registered already)"))


@versions.command("promote")
@click.argument("label", metavar="V")
@click.option("--pin-incompatible", is_flag=True, help="Make it current even if some runs"
              " diverge: they stay pinned to their version.")
@backend_option
@api_options
@json_option
def promote(label: str, pin_incompatible: bool, backend: str | None, url: str,
            api_key: str | None, as_json: bool) -> None:
    """Check every open run against V; make V current if all are compatible (exit 1,
    nothing changed, if any diverges, unless --pin-incompatible)."""
    with reported():
        doc = client(url, api_key).request(
            "POST", f"/versions/{_backend(url, api_key, backend)}/{label}/promote",
            json={"pin_incompatible": pin_incompatible}, timeout=LONG)
    if as_json:
        emit(doc)
    else:
        click.echo(f"checked {doc['checked']} open runs against {label}:"
                   f" {doc['compatible']} compatible")
        for v in doc["diverging"] + doc["unchecked"]:
            click.echo(_verdict_line(v))
        if doc["promoted"]:
            click.echo(f"{label} is current; moved {len(doc['moved'])} runs"
                       + (f", {len(doc['pinned'])} stay pinned" if doc["pinned"] else "")
                       + (f", {len(doc['busy'])} busy stay" if doc["busy"] else ""))
        else:
            click.echo(f"not promoted: {doc['current']} stays current")
    if not doc["promoted"]:
        raise SystemExit(EXIT_RUN_FAILED)


@versions.command("retire")
@click.argument("label", metavar="V")
@click.option("--migrate", is_flag=True, help="First move its compatible runs to the"
              " current version.")
@click.option("--cancel", is_flag=True, help="First cancel the runs pinned to it.")
@backend_option
@api_options
@json_option
def retire(label: str, migrate: bool, cancel: bool, backend: str | None, url: str,
           api_key: str | None, as_json: bool) -> None:
    """Retire V: refused (exit 2, naming how many) while open runs are pinned to it."""
    with reported():
        doc = client(url, api_key).request(
            "POST", f"/versions/{_backend(url, api_key, backend)}/{label}/retire",
            json={"migrate": migrate, "cancel": cancel}, timeout=LONG)
    if as_json:
        emit(doc)
    else:
        click.echo(f"{doc['backend']}: version {label} retired")


@click.command("check")
@click.option("--version", "label", help="A live version to check against.")
@click.option("--functions-url", help="Or code not deployed yet: a functions app's URL.")
@click.option("--script", "script_path", type=click.Path(exists=True, dir_okay=False),
              help="Or a script workflow's new text (a file): its runs (--workflow) are"
              " checked against it.")
@click.option("--workflow", help="Only the runs of this workflow.")
@backend_option
@api_options
@json_option
def check(label: str | None, functions_url: str | None, script_path: str | None,
          workflow: str | None, backend: str | None, url: str, api_key: str | None,
          as_json: bool) -> None:
    """Replay every open durable run's journal against code, running nothing: each
    compatible, or diverging at its first position (exit 1 if any diverges)."""
    if sum(x is not None for x in (label, functions_url, script_path)) != 1:
        raise click.UsageError("give one of --version, --functions-url and --script")
    if script_path is not None and workflow is None:
        raise click.UsageError("--script: name the script workflow with --workflow")
    script = None
    if script_path is not None:
        try:
            script = Path(script_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.UsageError(f"{script_path}: cannot read it as text ({exc})") from None
    body = {k: v for k, v in (("version", label), ("functions_url", functions_url),
                              ("script", script), ("workflow", workflow),
                              ("backend", backend)) if v}
    with reported():
        doc = client(url, api_key).request("POST", "/runs/check", json=body, timeout=LONG)
    if as_json:
        emit(doc)
    else:
        for v in doc["runs"]:
            click.echo(_verdict_line(v))
        click.echo(f"{doc['checked']} open runs checked against"
                   f" {label or functions_url or script_path}:"
                   f" {doc['compatible']} compatible, {doc['diverging']} diverging"
                   + (f", {doc['unchecked']} not checked" if doc["unchecked"] else ""))
    if doc["diverging"] or doc["unchecked"]:
        raise SystemExit(EXIT_RUN_FAILED)


@click.command("migrate")
@click.option("--to", "to", required=True, help="The live version to move to.")
@click.option("--workflow", help="Only the runs of this workflow.")
@backend_option
@api_options
@json_option
def migrate(to: str, workflow: str | None, backend: str | None, url: str,
            api_key: str | None, as_json: bool) -> None:
    """Move the open durable runs the check finds compatible to version --to."""
    body = {k: v for k, v in (("to", to), ("workflow", workflow), ("backend", backend)) if v}
    with reported():
        doc = client(url, api_key).request("POST", "/runs/migrate", json=body, timeout=LONG)
    if as_json:
        emit(doc)
        return
    click.echo(f"moved {len(doc['moved'])} runs to {to}"
               f" ({len(doc['already'])} there already)")
    for v in doc["diverging"] + doc["unchecked"]:
        click.echo(_verdict_line(v))
    if doc["busy"]:
        click.echo(f"{len(doc['busy'])} runs kept advancing: they stay on their version")


def _backend(url: str, api_key: str | None, backend: str | None) -> str:
    """The backend named, or the one with versions (the API says which)."""
    if backend:
        return backend
    with reported():
        doc = client(url, api_key).request("GET", "/versions")
    names = [b["backend"] for b in doc["backends"]]
    if len(names) != 1:
        raise click.UsageError("name the backend with --backend: "
                               + (", ".join(names) + " have versions" if names
                                  else "no backend has versions registered"))
    return str(names[0])


def _verdict_line(v: dict[str, Any]) -> str:
    head = f"{v['run_id']}  {v['status']}"
    if v["status"] == "compatible":
        return f"{head}  ({v['entries']} operations)"
    if v.get("recorded") is not None or v.get("issued") is not None:
        rec, iss = v.get("recorded") or {}, v.get("issued") or {}
        pos = (v.get("position") or {}).get("pos")
        return (f"{head} at position {pos}: recorded {rec.get('kind')} {rec.get('name')!r},"
                f" issued {iss.get('kind')} {iss.get('name')!r}")
    return f"{head}: {v.get('message')}"


COMMANDS = [versions]
RUNS_COMMANDS = [check, migrate]
