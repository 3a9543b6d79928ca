"""What every `orchestrator` command shares: exit codes, the error → exit code mapping,
the common options and the JSON helpers. The exit codes are documented in cli.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from orchestrator.cli.client import (
    KEY_VARIABLE,
    URL_VARIABLE,
    ApiClient,
    default_api_key,
    default_url,
)
from orchestrator.errors import (
    Conflict,
    ManifestError,
    NotFound,
    OrchestratorError,
    Unauthorized,
    Unprocessable,
    UsageError,
)
from orchestrator.settings import ClientDefaults

__all__ = [
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "EXIT_UNAUTHORIZED",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "api_options",
    "client",
    "emit",
    "exit_for",
    "fail",
    "json_option",
    "load",
    "manifest_option",
    "parse_json",
    "reported",
]

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_NOT_FOUND = 4
EXIT_UNAUTHORIZED = 5

F = TypeVar("F", bound=Callable[..., Any])

manifest_option = click.option(
    "--manifest",
    "manifest_path",
    default=lambda: ClientDefaults.from_env().manifest,
    show_default="orchestrator.yml (or $ORCH_MANIFEST)",
    type=click.Path(dir_okay=False),
    help="The manifest file.",
)
url_option = click.option(
    "--url",
    default=lambda: default_url(),
    show_default=f"${URL_VARIABLE} or http://127.0.0.1:8080",
    help="The orchestrator API.",
)
api_key_option = click.option(
    "--api-key",
    default=lambda: default_api_key(),
    # Never show the key itself in --help.
    show_default=f"${KEY_VARIABLE}",
    help="Bearer key for the API (`orchestrator keys create`).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def api_options(f: F) -> F:
    """--url and --api-key, for every command that talks to the API."""
    return url_option(api_key_option(f))


def client(url: str, api_key: str | None) -> ApiClient:
    return ApiClient(url, api_key=api_key or None)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def exit_for(exc: OrchestratorError) -> NoReturn:
    if isinstance(exc, Unauthorized):
        fail(f"authentication failed: set {KEY_VARIABLE} or --api-key ({exc.message})",
             EXIT_UNAUTHORIZED)
    if isinstance(exc, NotFound):
        fail(exc.message, EXIT_NOT_FOUND)
    if isinstance(exc, ManifestError | UsageError | Conflict | Unprocessable):
        fail(exc.message, EXIT_USAGE)
    fail(exc.message, EXIT_UNAVAILABLE)


@contextmanager
def reported() -> Iterator[None]:
    """Turn an orchestrator error raised in the block into its message and exit code."""
    try:
        yield
    except OrchestratorError as exc:
        exit_for(exc)


def load(manifest_path: str, environ: dict[str, str] | None = None) -> Any:
    from orchestrator.manifest.loader import load_manifest

    if not Path(manifest_path).is_file():
        fail(f"{manifest_path}: manifest not found (use --manifest PATH)", EXIT_USAGE)
    try:
        return load_manifest(manifest_path, environ)
    except ManifestError as exc:
        fail(f"invalid manifest:\n{exc.message}", EXIT_USAGE)


def parse_json(raw: str | None, hint: str = "--input") -> Any:
    """A JSON option's value, given inline or as @file; a bad one is a usage error (2)."""
    if raw is None:
        return None
    if raw.startswith("@"):
        try:
            raw = Path(raw[1:]).read_text()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {raw[1:]}: {exc}", param_hint=hint) from exc
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=hint) from exc


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))
