"""`orchestrator state get|set|delete|list`: inspect and repair durable state cells (what
`ctx.state` keeps, scoped by entity). Each is one call to the HTTP API."""

from __future__ import annotations

import json

import click

from orchestrator.cli.common import api_options, client, emit, json_option, reported

__all__ = ["COMMANDS"]


@click.group("state")
def state() -> None:
    """Durable state cells: values scoped by an entity that outlive runs."""


@state.command("get")
@click.argument("entity")
@click.argument("key")
@json_option
@api_options
def get(entity: str, key: str, as_json: bool, url: str, api_key: str | None) -> None:
    """Print the value of cell KEY of ENTITY (exit 4 if there is none)."""
    with reported():
        cell = client(url, api_key).state("get", entity, key)
    emit(cell if as_json else cell["value"])


@state.command("set")
@click.argument("entity")
@click.argument("key")
@click.argument("value")
@click.option("--ttl", type=click.FloatRange(min=0, min_open=True),
              help="Seconds until the cell expires.")
@json_option
@api_options
def set_(entity: str, key: str, value: str, ttl: float | None, as_json: bool, url: str,
         api_key: str | None) -> None:
    """Set cell KEY of ENTITY to VALUE: JSON (10, "a", {"a": 1}), or else the text as a
    string."""
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    with reported():
        cell = client(url, api_key).state("set", entity, key, parsed, ttl)
    if as_json:
        emit(cell)
    else:
        click.echo(f"{entity}/{key} = {json.dumps(cell['value'])} (version {cell['version']})")


@state.command("delete")
@click.argument("entity")
@click.argument("key")
@api_options
def delete(entity: str, key: str, url: str, api_key: str | None) -> None:
    """Delete cell KEY of ENTITY (exit 4 if there is none)."""
    with reported():
        client(url, api_key).state("delete", entity, key)
    click.echo(f"{entity}/{key} deleted")


@state.command("list")
@click.argument("entity")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@json_option
@api_options
def list_(entity: str, limit: int, as_json: bool, url: str, api_key: str | None) -> None:
    """The cells of ENTITY, in key order."""
    with reported():
        found = client(url, api_key).state("list", entity, None, limit)
    if as_json:
        emit(found)
        return
    if not found["cells"]:
        click.echo(f"no cells in {entity}")
    for cell in found["cells"]:
        click.echo(f"{cell['key']}\t{json.dumps(cell['value'])}")


COMMANDS = [state]
