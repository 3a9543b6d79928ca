"""Golden journals: `journal export RUN` saves a durable run's journal; `journal check
FILE --url ENDPOINT` replays it against the code an endpoint serves now (check mode:
nothing runs) and exits 1 if a run like it would pause there (a replay mismatch)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click
import httpx

from functions.sdk.durable.golden import check_body, read_report
from functions.sdk.protocol import DURABLE_PREFIX
from functions.sdk.signing import signed_headers
from orchestrator.cli.common import (
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    api_options,
    client,
    emit,
    fail,
    json_option,
    reported,
)

__all__ = ["COMMANDS"]


@click.group()
def journal() -> None:
    """Golden journals of durable runs: export one, check new code against it."""


@journal.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write it to this file (default: stdout).")
@api_options
def export(run_id: str, output: str | None, url: str, api_key: str | None) -> None:
    """Export durable run RUN's journal (its input and every recorded operation)."""
    with reported():
        doc = client(url, api_key).request("GET", f"/runs/{run_id}/journal")
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if output:
        Path(output).write_text(text + "\n")
        click.echo(f"{run_id}: {len(doc['journal'])} operations written to {output}", err=True)
    else:
        click.echo(text)


@journal.command("check")
@click.argument("path", metavar="FILE", type=click.Path(exists=True, dir_okay=False))
@click.option("--url", "endpoint", required=True,
              help="The functions app's base URL (the backend's url in the manifest).")
@click.option("--workflow", help="The workflow's name there (default: the journal's).")
@click.option("--secret", envvar="FUNCTIONS_SECRET",
              help="The backend's signing secret ($FUNCTIONS_SECRET), if it verifies.")
@json_option
def check(path: str, endpoint: str, workflow: str | None, secret: str | None,
          as_json: bool) -> None:
    """Replay the journal in FILE against the workflow served at --url, running nothing:
    exit 0 if every recorded operation is issued again where it was, 1 on a mismatch
    (both operations printed), 3 if the endpoint cannot be reached."""
    try:
        golden: dict[str, Any] = json.loads(Path(path).read_text())
    except ValueError as exc:
        fail(f"{path}: not JSON ({exc})", EXIT_USAGE)
    if not isinstance(golden, dict) or not isinstance(golden.get("journal"), list):
        fail(f"{path}: not an exported journal (no 'journal' list)", EXIT_USAGE)
    name = workflow or golden.get("workflow")
    if not name:
        fail(f"{path}: names no workflow: give --workflow", EXIT_USAGE)
    body = json.dumps(check_body({**golden, "workflow": name})).encode()
    headers = {"Content-Type": "application/json"}
    if secret:
        headers.update(signed_headers(secret, body, time.time()))
    try:
        resp = httpx.post(endpoint.rstrip("/") + DURABLE_PREFIX + str(name), content=body,
                          headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        fail(f"{endpoint}: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE)
    if resp.status_code != 200:
        fail(f"{endpoint}: POST {DURABLE_PREFIX}{name} answered {resp.status_code}: "
             f"{resp.text[:300]}", EXIT_UNAVAILABLE)
    report = read_report(resp.json(), golden)
    if as_json:
        emit(report)
    elif report["ok"]:
        click.echo(f"ok: {report['entries']} recorded operations replay on the new code "
                   f"(to the {report['reached']})")
    else:
        miss = report["mismatch"]
        if miss is not None:
            click.echo(f"mismatch: {miss.get('message')}")
        else:
            click.echo(f"the replay failed: {report['failure']}")
    if not report["ok"]:
        raise SystemExit(EXIT_RUN_FAILED)


COMMANDS = [journal]
