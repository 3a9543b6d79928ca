"""The `orchestrator` command.

Exit codes: 0 success; 1 the run failed or was killed (`run --wait`), or lint found
problems; 2 usage error (bad flag or argument, invalid --input JSON); 3 the API or AWS
endpoint could not be reached or failed; 4 no such run or workflow."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from orchestrator.client import ApiClient, default_url
from orchestrator.errors import ManifestError, NotFound, OrchestratorError, UsageError
from orchestrator.render import render_run, render_runs

__all__ = ["main"]

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_NOT_FOUND = 0, 1, 2, 3, 4

manifest_option = click.option(
    "--manifest",
    "manifest_path",
    default=lambda: os.environ.get("ORCH_MANIFEST", "orchestrator.yml"),
    show_default="orchestrator.yml (or $ORCH_MANIFEST)",
    type=click.Path(dir_okay=False),
    help="The manifest file.",
)
url_option = click.option(
    "--url",
    default=lambda: default_url(),
    show_default="$ORCHESTRATOR_URL or http://127.0.0.1:8080",
    help="The orchestrator API.",
)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def exit_for(exc: OrchestratorError) -> NoReturn:
    if isinstance(exc, NotFound):
        fail(exc.message, EXIT_NOT_FOUND)
    if isinstance(exc, ManifestError):
        fail(exc.message, EXIT_USAGE)
    if isinstance(exc, UsageError):
        fail(exc.message, EXIT_USAGE)
    fail(exc.message, EXIT_UNAVAILABLE)


def load(manifest_path: str, environ: dict[str, str] | None = None) -> Any:
    from orchestrator.manifest import load_manifest

    if not Path(manifest_path).is_file():
        fail(f"{manifest_path}: manifest not found (use --manifest PATH)", EXIT_USAGE)
    try:
        return load_manifest(manifest_path, environ)
    except ManifestError as exc:
        fail(f"invalid manifest:\n{exc.message}", EXIT_USAGE)


def parse_input(raw: str | None) -> Any:
    if raw is None:
        return None
    if raw.startswith("@"):
        try:
            raw = Path(raw[1:]).read_text()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {raw[1:]}: {exc}", param_hint="--input") from exc
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--input") from exc


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="orchestrator")
@click.option("-v", "--verbose", is_flag=True, help="Log what the workers and sweeper do.")
def main(verbose: bool) -> None:
    """Durable workflows over stateless HTTP functions, on DynamoDB and SQS."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


@main.command()
@manifest_option
def lint(manifest_path: str) -> None:
    """Check a manifest: DAG shape, fields, durations, cron, backends, routes."""
    from orchestrator.manifest import lint_manifest

    if not Path(manifest_path).is_file():
        fail(f"{manifest_path}: manifest not found (use --manifest PATH)", EXIT_USAGE)
    try:
        report = lint_manifest(manifest_path)
    except ManifestError as exc:
        click.echo(exc.message, err=True)
        click.echo(f"{len(exc.problems)} problem(s) found", err=True)
        sys.exit(EXIT_RUN_FAILED)
    for w in report.warnings:
        click.echo(f"warning: {w}", err=True)
    n = len(report.manifest.workflows)
    click.echo(f"{manifest_path}: ok ({n} workflow{'s' if n != 1 else ''})")


@main.command()
@click.argument("workflow")
@click.option("--input", "input_json", help="Run input as JSON (or @file.json).")
@click.option("--run-id", help="Choose the run id (starting it twice returns the same run).")
@click.option(
    "--wait", is_flag=True, help="Wait for the run to finish; exit 1 unless it succeeded."
)
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to --wait.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@url_option
def run(
    workflow: str,
    input_json: str | None,
    run_id: str | None,
    wait: bool,
    timeout: float,
    as_json: bool,
    url: str,
) -> None:
    """Start a run of WORKFLOW."""
    payload = parse_input(input_json)
    api = ApiClient(url)
    try:
        started = api.start(workflow, payload, run_id)
        if not wait:
            if as_json:
                emit(started)
            else:
                click.echo(started["run_id"])
            return
        view = wait_for(api, started["run_id"], timeout)
    except OrchestratorError as exc:
        exit_for(exc)
    if as_json:
        emit(view)
    else:
        click.echo(render_run(view))
    if view["status"] == "running":
        fail(f"run {view['run_id']} still running after {timeout:g}s", EXIT_UNAVAILABLE)
    sys.exit(EXIT_OK if view["status"] == "success" else EXIT_RUN_FAILED)


def wait_for(api: ApiClient, run_id: str, timeout: float,
             pause: Callable[[float], Any] | None = None) -> Any:
    """Poll the API until the run finished or `timeout` passed (backing off to 1 s)."""
    pause = pause or threading.Event().wait
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        view = api.run(run_id)
        if view["status"] != "running" or time.monotonic() > deadline:
            return view
        pause(delay)
        delay = min(delay * 1.5, 1.0)


@main.command()
@click.argument("workflow")
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@url_option
def runs(workflow: str, limit: int, as_json: bool, url: str) -> None:
    """List runs of WORKFLOW, newest first."""
    try:
        data = ApiClient(url).runs(workflow, limit)
    except OrchestratorError as exc:
        exit_for(exc)
    if as_json:
        emit(data)
    else:
        click.echo(render_runs(data["runs"]))


@main.command()
@click.argument("target")
@click.option("--json", "as_json", is_flag=True)
@click.option("--ascii", "ascii_only", is_flag=True, default=None, help="Plain ASCII output.")
@url_option
def show(target: str, as_json: bool, ascii_only: bool | None, url: str) -> None:
    """Show a run (by id), or the newest run of a workflow (by name)."""
    api = ApiClient(url)
    try:
        try:
            view = api.run(target)
        except NotFound:
            newest = api.runs(target, 1)["runs"]
            if not newest:
                raise NotFound(f"no run or workflow with runs named {target!r}") from None
            view = api.run(newest[0]["run_id"])
    except OrchestratorError as exc:
        exit_for(exc)
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
    else:
        click.echo(render_run(view, ascii_only=ascii_only or None))


@main.command()
@click.argument("run_id")
@click.option("--reason", default="killed from the CLI", show_default=True)
@url_option
def kill(run_id: str, reason: str, url: str) -> None:
    """Kill a run: nothing new starts, in-flight steps land, the rest is skipped."""
    try:
        view = ApiClient(url).cancel(run_id, reason)
    except OrchestratorError as exc:
        exit_for(exc)
    click.echo(f"{run_id}: kill requested ({view['status']})")


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _runtime(manifest_path: str) -> Any:
    from orchestrator.runtime import Runtime
    from orchestrator.settings import Settings

    manifest = load(manifest_path)
    try:
        return Runtime.build(Settings.from_env(), manifest)
    except OrchestratorError as exc:
        exit_for(exc)


@main.command()
@manifest_option
@click.option("--threads", type=int, default=None, help="Concurrent steps (default 8).")
def worker(manifest_path: str, threads: int | None) -> None:
    """Run a worker against the configured endpoint (AWS_ENDPOINT_URL, ORCH_PREFIX)."""
    rt = _runtime(manifest_path)
    stop = _stop_event()
    click.echo(f"worker polling {rt.queues.dispatch_url}", err=True)
    rt.worker().run(stop, threads=threads)


@main.command()
@manifest_option
@click.option("--once", is_flag=True, help="Sweep once and print what was repaired.")
def sweeper(manifest_path: str, once: bool) -> None:
    """Run the sweeper: re-dispatch lost work, expire leases, finish stuck runs."""
    rt = _runtime(manifest_path)
    if once:
        click.echo(json.dumps(rt.sweeper().sweep().__dict__))
        return
    rt.sweeper().run(_stop_event())


@main.command()
@manifest_option
@click.option("--port", default=8080, show_default=True, help="Port of the orchestrator API.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--functions",
    "functions_app",
    default="functions.examples.monthly_report:create_app",
    show_default=True,
    help="module:factory of the functions app to serve ('none' to serve none).",
)
@click.option("--functions-port", default=8001, show_default=True)
@click.option("--emulator-port", default=4566, show_default=True)
@click.option(
    "--no-emulator",
    is_flag=True,
    help="Use AWS_ENDPOINT_URL or real AWS instead of the embedded emulator.",
)
@click.option("--workers", default=1, show_default=True, help="Worker loops to run.")
@click.option("--sweep-interval", default=5.0, show_default=True)
@click.option("--demo", is_flag=True, help="Trigger the demo workflow and print its outcome.")
@click.option("--exit-after-demo", is_flag=True, help="Stop once the demo run finished.")
def dev(
    manifest_path: str,
    port: int,
    host: str,
    functions_app: str,
    functions_port: int,
    emulator_port: int,
    no_emulator: bool,
    workers: int,
    sweep_interval: float,
    demo: bool,
    exit_after_demo: bool,
) -> None:
    """Start the whole stack locally: emulator, tables and queues, functions, API,
    workers and sweeper. Ctrl-C stops everything."""
    from infra.local import LocalStack, StackOptions

    opts = StackOptions(
        manifest=Path(manifest_path),
        host=host,
        api_port=port,
        functions_app=None if functions_app == "none" else functions_app,
        functions_port=functions_port,
        emulator_port=emulator_port,
        embedded_emulator=not no_emulator and not os.environ.get("AWS_ENDPOINT_URL"),
        workers=workers,
        sweep_interval=sweep_interval,
    )
    stop = _stop_event()
    stack = LocalStack(opts, echo=click.echo)
    try:
        stack.start()
    except ManifestError as exc:
        fail(f"invalid manifest:\n{exc.message}", EXIT_USAGE)
    except OrchestratorError as exc:
        stack.stop()
        exit_for(exc)
    code = EXIT_OK
    try:
        if demo or exit_after_demo:
            status = stack.run_demo()
            code = EXIT_OK if status == "success" else EXIT_RUN_FAILED
            if exit_after_demo:
                return
        click.echo("Ready. Ctrl-C to stop.")
        stop.wait()
    finally:
        click.echo("stopping…")
        stack.stop()
        if exit_after_demo:
            sys.exit(code)
