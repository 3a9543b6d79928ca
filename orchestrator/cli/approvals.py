"""The approval commands: `approve RUN STEP`, `reject RUN STEP` and `approvals` (the
inbox). Each is one call to the HTTP API, answered as the API key's name."""

from __future__ import annotations

import time

import click

from orchestrator.cli.common import api_options, client, emit, json_option, reported

__all__ = ["COMMANDS"]


def _answer(run_id: str, step: str, approved: bool, comment: str | None, as_json: bool,
            url: str, api_key: str | None) -> None:
    with reported():
        gate = client(url, api_key).answer_approval(run_id, step, approved, comment)
    if as_json:
        emit(gate)
        return
    verb = "approved" if approved else "rejected (the run is being cancelled)"
    click.echo(f"{run_id}: {step} {verb} by {gate['by']}")


comment_option = click.option("--comment", help="Kept with the answer (and, for a "
                              "rejection, in the run's kill reason).")


@click.command("approve")
@click.argument("run_id", metavar="RUN")
@click.argument("step", metavar="STEP")
@comment_option
@json_option
@api_options
def approve(run_id: str, step: str, comment: str | None, as_json: bool, url: str,
            api_key: str | None) -> None:
    """Approve the open approval gate STEP of run RUN (a YAML approval step, or a
    ctx.approval name). A gate answered already, or past its deadline, exits 2 and
    nothing changes."""
    _answer(run_id, step, True, comment, as_json, url, api_key)


@click.command("reject")
@click.argument("run_id", metavar="RUN")
@click.argument("step", metavar="STEP")
@comment_option
@json_option
@api_options
def reject(run_id: str, step: str, comment: str | None, as_json: bool, url: str,
           api_key: str | None) -> None:
    """Reject the open approval gate STEP of run RUN: the run is cancelled, with who
    rejected it and the comment as the reason."""
    _answer(run_id, step, False, comment, as_json, url, api_key)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


@click.command("approvals")
@click.option("--approver", help="Only the gates this API key name may answer.")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@json_option
@api_options
def approvals(approver: str | None, limit: int, as_json: bool, url: str,
              api_key: str | None) -> None:
    """The inbox: every open approval gate across runs, oldest first, with its prompt,
    run, age and deadline."""
    with reported():
        found = client(url, api_key).approvals(approver, limit)
    gates = found["approvals"]
    if as_json:
        emit(found)
        return
    if not gates:
        click.echo("no approvals waiting" + (f" for {approver}" if approver else ""))
        return
    now = time.time()
    for g in gates:
        deadline = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(g["deadline"]))
        who = f"  for {', '.join(g['approvers'])}" if g["approvers"] else ""
        left = _age(max(0.0, g["deadline"] - now))
        click.echo(f"{g['run_id']}  {g['step']}  age {_age(g['age'])}  due {deadline}"
                   f" (in {left}){who}")
        click.echo(f"    {g['prompt']}")
        if g.get("link"):
            click.echo(f"    link: {g['link']}")


COMMANDS = [approve, reject, approvals]
