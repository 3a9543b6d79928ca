"""A production run on a laptop: `runs pull RUN --from URL` copies a run from a deployed
stack's API into the local one (GET /runs/{id}/export there, POST /runs/import here:
inert, nothing here advances it), and `runs replay RUN --functions-url LOCAL` replays a
local durable run's journal against the code LOCAL serves, running nothing, stopping in
the functions app's debugger before `--break OP` or at the first mismatch (mode
`replay`, functions/sdk/durable/debugging.py). commands.py mounts both on `runs`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import click
import httpx

from functions.sdk.durable.golden import check_body, read_report
from functions.sdk.protocol import DURABLE_PREFIX
from functions.sdk.signing import signed_headers
from orchestrator.cli.client import ApiClient
from orchestrator.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    api_options,
    client,
    emit,
    fail,
    json_option,
    reported,
)
from orchestrator.errors import NotFound, OrchestratorError
from orchestrator.settings import FROM_KEY_VARIABLE

__all__ = ["RUNS_COMMANDS"]
# The `format` of an export this CLI can import (orchestrator/api/models.py).
EXPORT_FORMAT = "orchestrator.run-export/1"


@contextmanager
def _at(where: str) -> Iterator[None]:
    """An API error raised in the block, its message prefixed with the API it came from."""
    try:
        yield
    except OrchestratorError as exc:
        exc.message = f"{where}: {exc.message}"
        raise


@click.command("pull")
@click.argument("run_id", metavar="RUN")
@click.option("--from", "source", required=True, metavar="URL",
              help="The deployed stack's orchestrator API, to copy the run from.")
@click.option("--from-api-key", envvar=FROM_KEY_VARIABLE,
              help=f"Bearer key for the --from API (${FROM_KEY_VARIABLE}).")
@json_option
@api_options
def pull(run_id: str, source: str, from_api_key: str | None, as_json: bool, url: str,
         api_key: str | None) -> None:
    """Copy run RUN from the stack at --from into this one (--url): its row, its steps,
    its journal and the values they reference. Here it keeps its status but nothing
    advances it; show it, or replay it with `runs replay`. Exit 4 if --from has no such
    run, 2 if this stack has a run of that id already (nothing is written)."""
    remote = client(source, from_api_key)
    with reported():
        with _at(source):
            try:
                doc = remote.request("GET", f"/runs/{quote(run_id, safe='')}/export",
                                     timeout=120)
            except NotFound:
                _exports(remote, source)
                raise
        if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
            fail(f"{source}: GET /runs/{run_id}/export did not answer a run export"
                 f" (format {EXPORT_FORMAT}): is it an orchestrator API?", EXIT_UNAVAILABLE)
        with _at(url):
            done = client(url, api_key).request("POST", "/runs/import",
                                                json={**doc, "source": source}, timeout=120)
    if as_json:
        emit(done)
        return
    click.echo(f"{run_id}: imported from {source} ({done['items']} items, {done['blobs']}"
               f" blobs), status {done['status']} (read-only here)")
    click.echo(f"  orchestrator show {run_id}")


def _exports(api: ApiClient, source: str) -> None:
    """Exit 3 unless `api` is an orchestrator API that exports runs (its OpenAPI
    document has the path): a 404 from anything else is not an unknown run."""
    try:
        paths = api.request("GET", "/openapi.json").get("paths") or {}
    except (OrchestratorError, AttributeError):
        paths = {}
    if "/runs/{run_id}/export" not in paths:
        fail(f"{source} is not an orchestrator API that exports runs (no"
             " /runs/{run_id}/export in its /openapi.json): --from takes the deployed"
             " stack's orchestrator API", EXIT_UNAVAILABLE)


def _journal(url: str, api_key: str | None, run_id: str) -> dict[str, Any]:
    """The local run's journal (GET /runs/{id}/journal): exit 4 for an unknown run (with
    how to pull one), 2 for a DAG run."""
    with reported(), _at(url):
        try:
            doc: dict[str, Any] = client(url, api_key).request(
                "GET", f"/runs/{quote(run_id, safe='')}/journal")
        except NotFound as exc:
            fail(f"{exc.message}: pull a deployed stack's run first"
                 f" (orchestrator runs pull {run_id} --from URL)", EXIT_NOT_FOUND)
    return doc


def _post(endpoint: str, name: str, body: bytes, secret: str | None) -> Any:
    """POST the replay call; exit 3 with why unless a functions app answered it."""
    target = endpoint.rstrip("/") + DURABLE_PREFIX + quote(name, safe="")
    headers = {"Content-Type": "application/json"}
    if secret:
        headers.update(signed_headers(secret, body, time.time()))
    try:
        # No read timeout: the call waits while someone is in the debugger.
        resp = httpx.post(target, content=body, headers=headers,
                          timeout=httpx.Timeout(10.0, read=None))
    except httpx.HTTPError as exc:
        fail(f"{endpoint}: {type(exc).__name__}: {exc}", EXIT_UNAVAILABLE)
    hint = ""
    if resp.status_code == 404:
        hint = (f": it serves no durable workflow {name!r} (is --functions-url the"
                " functions app's base URL? --workflow names the workflow there)")
    elif resp.status_code == 400 and "mode" in resp.text:
        hint = ": its SDK predates replay mode (upgrade it)"
    elif resp.status_code == 401:
        hint = ": the call must be signed (--secret, $FUNCTIONS_SECRET)"
    if resp.status_code != 200:
        fail(f"{endpoint}: POST {DURABLE_PREFIX}{name} answered {resp.status_code}{hint}:"
             f" {resp.text[:300]}", EXIT_UNAVAILABLE)
    try:
        answer = resp.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("ops"), list):
        fail(f"{endpoint}: POST {DURABLE_PREFIX}{name} did not answer durable operations:"
             " is it a functions app?", EXIT_UNAVAILABLE)
    return answer


@click.command("replay")
@click.argument("run_id", metavar="RUN")
@click.option("--functions-url", "endpoint", required=True, metavar="LOCAL",
              help="The functions app's base URL (serving the workflow's code).")
@click.option("--workflow", help="The workflow's name there (default: the run's).")
@click.option("--secret", envvar="FUNCTIONS_SECRET",
              help="The backend's signing secret ($FUNCTIONS_SECRET), if it verifies.")
@click.option("--break", "break_at", metavar="OP",
              help="Stop in the functions app's debugger right before the operation of"
                   " this name (or id) is issued.")
@json_option
@api_options
def replay(run_id: str, endpoint: str, workflow: str | None, secret: str | None,
           break_at: str | None, as_json: bool, url: str, api_key: str | None) -> None:
    """Replay durable run RUN's journal (from --url) against the code at --functions-url,
    running no step and writing nothing. The functions app's process stops in its
    debugger (breakpoint(): PYTHONBREAKPOINT) before --break OP, or at the first
    mismatch. Exit 0 if the journal replays (the workflow may fail as its run did), 1 on
    a mismatch (both operations printed), 2 for a DAG run, 3 if LOCAL is not a functions
    app, 4 for an unknown run."""
    doc = _journal(url, api_key, run_id)
    name = workflow or str(doc.get("workflow") or "")
    body = {**check_body({**doc, "workflow": name}), "mode": "replay"}
    if break_at:
        body["break_at"] = break_at
    answer = _post(endpoint, name, json.dumps(body).encode(), secret)
    report = {**read_report(answer, doc), "run_id": run_id, "workflow": name,
              "stops": list(answer.get("stops") or ())}
    # A workflow that fails on replay as its run did is not a divergence: only a
    # mismatch is.
    report["ok"] = report["mismatch"] is None
    if as_json:
        emit(report)
    else:
        for stop in report["stops"]:
            click.echo(f"stopped ({stop.get('reason')}) before {stop.get('kind')}"
                       f" {stop.get('name')!r} at position {stop.get('pos')}")
        if report["mismatch"] is not None:
            click.echo(f"mismatch: {report['mismatch'].get('message')}")
        elif report["failure"] is not None:
            click.echo(f"ok: the journal replays, and the workflow fails:"
                       f" {report['failure']}")
        else:
            click.echo(f"ok: {report['entries']} recorded operations replay on the code at"
                       f" {endpoint} (to the {report['reached']})")
    if break_at and not any(s.get("reason") == "break" for s in report["stops"]):
        click.echo(f"note: no operation named {break_at!r} was issued before the replay"
                   " stopped", err=True)
    if not report["ok"]:
        raise SystemExit(EXIT_RUN_FAILED)


RUNS_COMMANDS = [pull, replay]
