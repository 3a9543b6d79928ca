"""The `orchestrator` command.

Commands that talk to the HTTP API take --url ($ORCHESTRATOR_URL) and --api-key
($ORCHESTRATOR_API_KEY, sent as `Authorization: Bearer <key>`); every command that reads
takes --json. The run commands live in runs.py, signals, hooks and durable runs' `runs`
subcommands in durable.py, events, schedules and webhooks in triggers.py; the local and
admin commands (lint, worker, sweeper, api, dev, keys) here, and `doctor` in doctor.py.

Exit codes:
  0  success
  1  the run failed, was killed or skipped (`trigger --wait`, `rerun --wait`), or lint
     found problems
  2  usage error: a bad flag or argument, invalid JSON, an invalid manifest; or the API
     refused the request as given (400, 409, 410, 422), e.g. cancelling a finished run,
     rerunning one that is still running or executing a hook already used: the API's
     message says why
  3  the API or the AWS endpoint could not be reached or failed (5xx), or `--wait` timed
     out with the run still queued or running
  4  no such run, workflow, schedule, webhook or hook
  5  authentication failed (401): set ORCHESTRATOR_API_KEY or --api-key"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from orchestrator.cli import approvals as cli_approvals
from orchestrator.cli import bulk as cli_bulk
from orchestrator.cli import deploy as cli_deploy
from orchestrator.cli import doctor as cli_doctor
from orchestrator.cli import durable_runs as cli_durable
from orchestrator.cli import journal as cli_journal
from orchestrator.cli import run_copies as cli_run_copies
from orchestrator.cli import runs as cli_runs
from orchestrator.cli import scripts as cli_scripts
from orchestrator.cli import state as cli_state
from orchestrator.cli import triggers as cli_triggers
from orchestrator.cli import versions as cli_versions
from orchestrator.cli import watch as cli_watch
from orchestrator.cli import workflows as cli_workflows
from orchestrator.cli.client import KEY_VARIABLE
from orchestrator.cli.common import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    exit_for,
    fail,
    load,
    manifest_option,
)
from orchestrator.errors import ManifestError, OrchestratorError, StoreError
from orchestrator.settings import ClientDefaults

__all__ = ["main"]

# `orchestrator --help` ends with the exit codes of the docstring above ("\b": keep lines).
EPILOG = "\b\nExit codes:" + (__doc__ or "").partition("Exit codes:")[2]


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """click's own version line, then the versions and speed-ups a bug report needs."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    click.echo(f"{ctx.find_root().info_name}, version {version('orchestrator')}")
    for line in cli_doctor.version_lines():
        click.echo(line)
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version, the emulator's dependencies and speed-ups, and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Log what the workers and sweeper do.")
def main(verbose: bool) -> None:
    """Durable workflows over stateless HTTP functions, on DynamoDB and SQS."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )


for _command in (*cli_runs.COMMANDS, *cli_durable.COMMANDS, *cli_triggers.COMMANDS,
                 *cli_deploy.COMMANDS, *cli_journal.COMMANDS, *cli_doctor.COMMANDS,
                 *cli_workflows.COMMANDS, *cli_watch.COMMANDS, *cli_approvals.COMMANDS,
                 *cli_state.COMMANDS, *cli_scripts.COMMANDS, *cli_versions.COMMANDS):
    main.add_command(_command)
for _command in (*cli_durable.RUNS_COMMANDS, *cli_versions.RUNS_COMMANDS,
                 *cli_run_copies.RUNS_COMMANDS, *cli_bulk.RUNS_COMMANDS):
    cli_runs.runs.add_command(_command)


@main.command()
@manifest_option
def lint(manifest_path: str) -> None:
    """Check a manifest: DAG shape, fields, durations, cron, backends, routes."""
    from orchestrator.manifest.loader import lint_manifest

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
        settings = Settings.from_env()
        _observe(settings)
        rt = Runtime.build(settings, manifest)
        # The versions the manifest declares are registered (idempotent); a `current:`
        # other than the stack's becomes current only by a promotion, which checks
        # every open run first.
        try:
            moves = rt.versions.seed(rt.manifest.backends)
        except StoreError as exc:  # an endpoint without transactions (dynalite)
            click.echo(f"versions: none registered ({exc.message})", err=True)
            moves = {}
        for backend, label in sorted(moves.items()):
            click.echo(f"{backend}: the manifest's current version {label} is not the"
                       f" stack's ({rt.versions.current(backend)}): make it current with"
                       f" `orchestrator versions promote {label} --backend {backend}`",
                       err=True)
        return rt
    except OrchestratorError as exc:
        exit_for(exc)


def _observe(settings: Any) -> None:
    """This process's logs in the configured format, and its traces if they are on."""
    from orchestrator import logs, telemetry

    logs.configure(settings.log_format)
    telemetry.setup(settings)


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
@click.option("--all", "every", is_flag=True,
              help="With --once: look at every run whose wake has passed, not only those"
              " since the last sweep (after restoring tables, or a clock that ran ahead).")
def sweeper(manifest_path: str, once: bool, every: bool) -> None:
    """Run the sweeper: re-dispatch lost work, expire leases, finish stuck runs."""
    rt = _runtime(manifest_path)
    if every and not once:
        fail("--all goes with --once", EXIT_USAGE)
    if once:
        s = rt.sweeper()
        click.echo(json.dumps(s.sweep(since=0.0 if every else None).__dict__))
        s.heartbeat.stopped()  # what its pass counted (runs it finished), for /metrics
        return
    rt.sweeper().run(_stop_event())


@main.command()
@manifest_option
@click.option("--port", default=8080, show_default=True, help="Port to serve the API on.")
@click.option("--host", default="127.0.0.1", show_default=True)
def api(manifest_path: str, port: int, host: str) -> None:
    """Serve the HTTP API alone against the configured endpoint (AWS_ENDPOINT_URL,
    ORCH_PREFIX): no workers, no sweeper. Ctrl-C stops it."""
    import uvicorn

    from orchestrator.api.app import create_app
    from orchestrator.services.health.heartbeat import Heartbeat, process_id

    rt = _runtime(manifest_path)
    click.echo(f"api on http://{host}:{port}", err=True)
    # Its heartbeat: listed with the stack's processes, and what it counted (the runs
    # it started) added for /metrics.
    beat = Heartbeat(rt.store, "api", process_id(), every=rt.settings.heartbeat_interval)
    stop = threading.Event()
    beating = beat.start(stop)
    try:
        uvicorn.run(create_app(rt), host=host, port=port, log_level="warning")
    finally:
        stop.set()
        beating.join(timeout=5.0)
        beat.stopped()


@main.group()
def keys() -> None:
    """API keys (stored hashed in the control table)."""


@keys.command("create")
@click.option("--name", default="cli", show_default=True,
              help="What the key is for (kept with its hash).")
def create_key(name: str) -> None:
    """Create an API key, writing directly to the tables (AWS_ENDPOINT_URL, ORCH_PREFIX).
    The key is printed once, on stdout; only its hash is stored."""
    from orchestrator.adapters.aws import make_clients
    from orchestrator.adapters.store.control import Control
    from orchestrator.services.access.apikeys import ApiKeys
    from orchestrator.settings import Settings

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    control = Control(make_clients(settings).dynamodb, settings.names.control_table)
    try:
        key = ApiKeys(control).create(name, time.time())
    except OrchestratorError as exc:
        where = settings.endpoint_for("dynamodb") or f"AWS ({settings.region})"
        fail(f"cannot store the key in {settings.names.control_table} at {where}: "
             f"{exc.message} (deployed? check AWS_ENDPOINT_URL[_DYNAMODB] and ORCH_PREFIX)",
             EXIT_UNAVAILABLE)
    click.echo(key)
    click.echo(
        f"API key {name!r} created. It is shown only this once; use it with\n"
        f"  export {KEY_VARIABLE}={key}\n"
        "or pass --api-key to each command, or send 'Authorization: Bearer <key>'.",
        err=True,
    )


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
@click.option("--scripts-port", default=8002, show_default=True,
              help="Port of the script host (durable shell scripts, run: steps).")
@click.option("--no-scripts", is_flag=True, help="Serve no script host.")
@click.option("--emulator-port", default=4566, show_default=True)
@click.option(
    "--no-emulator",
    is_flag=True,
    help="Use the configured endpoints or real AWS instead of the embedded emulator"
    " (implied when AWS_ENDPOINT_URL or a service's own AWS_ENDPOINT_URL_DYNAMODB, _SQS,"
    " _S3 is set).",
)
@click.option("--workers", default=1, show_default=True, help="Worker loops to run.")
@click.option("--sweep-interval", default=5.0, show_default=True)
@click.option(
    "--all-cores",
    is_flag=True,
    help="Let this process run on every core (with the embedded emulator it keeps to one:"
    " its threads share one interpreter lock, and moving between cores cost 1.4-2x).",
)
@click.option(
    "--emulator-in-process",
    is_flag=True,
    help="Run the embedded emulator in this process, not a process of its own (moto's work"
    " then shares this process's interpreter lock and core with the API and the workers).",
)
@click.option("--aws-model", "aws_model", is_flag=False, flag_value="aws", default=None,
              metavar="[FILE]",
              help="Make the embedded emulator answer in AWS's time: per-operation delays and"
              " DynamoDB's per-partition throughput, with AWS's throttling error"
              " (infra/aws_model.yaml, or FILE; ORCH_EMULATOR_MODEL likewise: aws, on or 1"
              " the shipped file, off, 0 or none no model). Needs the embedded emulator:"
              " refused with --no-emulator or an AWS_ENDPOINT_URL*.")
@click.option("--provision", type=click.Choice(["cloudformation", "direct"]),
              default="cloudformation", show_default=True,
              help="Make the tables, queues and bucket through CloudFormation, or straight"
              " through the services' APIs (an endpoint without CloudFormation: DynamoDB"
              " Local, dynalite, ElasticMQ...).")
@click.option("--lambda", "lambda_mode", is_flag=True,
              help="Serve through the Lambda handlers, invoked as AWS invokes them (HTTP API"
              " and Function URL events, SQS batches, the sweeper's schedule), not the"
              " long-lived worker and sweeper.")
@click.option("--reload", "reload_", is_flag=True,
              help="Watch the functions app's code: on a change, serve the new code beside"
              " the old as a new version, check every open durable run against it (printed),"
              " make it current for new runs and keep the old one while runs are pinned to"
              " it.")
@click.option("--demo", is_flag=True, help="Trigger the demo workflow and print its outcome.")
@click.option("--exit-after-demo", is_flag=True, help="Stop once the demo run finished.")
def dev(
    manifest_path: str,
    port: int,
    host: str,
    functions_app: str,
    functions_port: int,
    scripts_port: int,
    no_scripts: bool,
    emulator_port: int,
    no_emulator: bool,
    workers: int,
    sweep_interval: float,
    all_cores: bool,
    emulator_in_process: bool,
    aws_model: str | None,
    provision: str,
    lambda_mode: bool,
    reload_: bool,
    demo: bool,
    exit_after_demo: bool,
) -> None:
    """Start the whole stack locally: emulator, tables and queues, functions, the script
    host, API, workers and sweeper. Ctrl-C stops everything."""
    from orchestrator.cli.dev import LocalStack, StackOptions

    opts = StackOptions(
        manifest=Path(manifest_path),
        host=host,
        api_port=port,
        functions_app=None if functions_app == "none" else functions_app,
        functions_port=functions_port,
        scripts_port=None if no_scripts else scripts_port,
        emulator_port=emulator_port,
        embedded_emulator=not no_emulator and ClientDefaults.from_env().endpoint is None,
        workers=workers,
        sweep_interval=sweep_interval,
        one_core=not all_cores,
        emulator_process=not emulator_in_process,
        aws_model=aws_model,
        lambda_mode=lambda_mode,
        provision=provision,
        reload=reload_,
    )
    from orchestrator.settings import Settings

    try:
        _observe(Settings.from_env())
    except OrchestratorError as exc:
        exit_for(exc)
    stop = _stop_event()
    stack = LocalStack(opts, echo=click.echo)
    try:
        stack.start()
    except ManifestError as exc:
        fail(f"invalid manifest:\n{exc.message}", EXIT_USAGE)
    except OrchestratorError as exc:  # what it started is stopped by now
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
