"""`orchestrator deploy` and `orchestrator destroy`: the stack of template.yaml on AWS (or
any endpoint with CloudFormation, such as the embedded emulator: AWS_ENDPOINT_URL),
through infra/deploy.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import (
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    exit_for,
    fail,
    manifest_option,
)
from orchestrator.errors import ManifestError, OrchestratorError
from orchestrator.settings import Settings

__all__ = ["COMMANDS"]

stack_option = click.option(
    "--stack", default=None,
    help="The stack's name, which is also the prefix of every resource name"
    " (default: $ORCH_PREFIX, else orch).")


def _clients(settings: Settings) -> Any:
    """CloudFormation, S3, STS, DynamoDB and Lambda (as `lambda_`) clients for the
    configured endpoint (or AWS)."""
    from types import SimpleNamespace

    import boto3

    session = boto3.session.Session()
    return SimpleNamespace(**{
        ("lambda_" if name == "lambda" else name): session.client(
            name, region_name=settings.region, endpoint_url=settings.endpoint_for(name))
        for name in ("cloudformation", "s3", "sts", "dynamodb", "lambda")})


def _parameters(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--parameter {pair!r}: expected Name=value", EXIT_USAGE)
        out[key] = value
    return out


@click.command()
@manifest_option
@stack_option
@click.option("--parameter", "-p", "pairs", multiple=True, metavar="NAME=VALUE",
              help="A template parameter (repeatable): FunctionsApp, FunctionsSecret,"
              " WorkerMaxConcurrency, ...")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (resources, parameters, change set, idle cost) and touch"
              " nothing.")
@click.option("--no-deps", is_flag=True,
              help="Package the code without its dependencies (they come from a layer).")
@click.option("--version-label", "label", metavar="L",
              help="The label of the functions code's new version (default: v<N>, N its"
              " Lambda version number).")
@click.option("--pin-incompatible", is_flag=True,
              help="Make the new version current even if open runs diverge from it: they"
              " stay pinned to their version.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the stack's outputs as JSON, with `versions`: what was published"
              " and promoted.")
def deploy(manifest_path: str, stack: str | None, pairs: tuple[str, ...], dry_run: bool,
           no_deps: bool, label: str | None, pin_incompatible: bool, as_json: bool) -> None:
    """Create or update the stack on AWS: lint the manifest, package the code, upload it,
    and apply a CloudFormation change set (boto3; no SAM CLI, no Docker). Then publish
    the functions code as a version and make it current if every open durable run
    replays on it (exit 1, the old version still current, if one diverges)."""
    from infra import deploy as d
    from infra import deploy_versions as dv
    from infra.function_versions import check_label

    if label is not None:
        try:
            check_label(label)
        except OrchestratorError as exc:
            fail(exc.message, EXIT_USAGE)
    settings = Settings.from_env()
    name = stack or settings.prefix
    path = Path(manifest_path)
    if not path.is_file():
        fail(f"{manifest_path}: manifest not found (use --manifest PATH)", EXIT_USAGE)
    try:
        plan = d.plan(path, name, region=settings.region, parameters=_parameters(pairs),
                      no_deps=no_deps)
    except ManifestError as exc:
        fail(f"invalid manifest:\n{exc.message}", EXIT_USAGE)
    except OrchestratorError as exc:
        exit_for(exc)
    if dry_run:
        click.echo(d.render(plan))
        try:
            click.echo(dv.planned(path, plan.parameters, label))
        except OrchestratorError as exc:
            exit_for(exc)
        return
    clients = _clients(settings)
    try:
        dv.precheck(clients, name, path, plan.parameters, label)
        code = d.package(plan)
        click.echo(f"package: {len(code) / 1024:.0f} KB", err=True)
        outputs = d.deploy(clients, plan, code, echo=lambda s: click.echo(s, err=True))
        report = dv.release(clients, name, path, plan.parameters, label=label,
                            pin_incompatible=pin_incompatible)
    except OrchestratorError as exc:
        exit_for(exc)
    if as_json:
        click.echo(json.dumps({**outputs, "versions": report}))
    else:
        for key, value in sorted(outputs.items()):
            click.echo(f"{key:20s} {value}")
        for line in dv.render(report):
            click.echo(line)
    if not report["ok"]:
        raise SystemExit(EXIT_RUN_FAILED)


@click.command()
@stack_option
@click.option("--delete-data", is_flag=True,
              help="Also delete the tables and the blob bucket (kept by default).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def destroy(stack: str | None, delete_data: bool, yes: bool) -> None:
    """Delete the stack. Its tables and blob bucket are kept unless --delete-data."""
    from infra import deploy as d

    settings = Settings.from_env()
    name = stack or settings.prefix
    what = "the stack and its data" if delete_data else "the stack (tables and bucket kept)"
    if not yes and not click.confirm(f"delete {what}: {name}?", default=False):
        fail("not confirmed", EXIT_USAGE)
    try:
        gone = d.destroy(_clients(settings), name, delete_data=delete_data)
    except OrchestratorError as exc:
        exit_for(exc)
    click.echo(f"deleted stack {name}" + (f" and {', '.join(gone)}" if gone else ""))


COMMANDS = (deploy, destroy)
