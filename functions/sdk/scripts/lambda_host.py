"""The script host as an AWS Lambda function behind a Function URL (bash is on Lambda's
runtime), through the same adapter as any functions app (functions/sdk/lambda_adapter):

    Handler: functions.sdk.scripts.lambda_host.handler
    SCRIPTS_SECRET=...      # the signing secret the orchestrator's calls carry
    SCRIPTS_DIR=/var/task/scripts   # optional: scripts deployed with the host

The host is built once per container, on its first event. A script runs under /tmp (the
one place Lambda writes), with the host's rights: the function's role."""

from __future__ import annotations

import os
from typing import Any

from functions.sdk import lambda_adapter

__all__ = ["create_app", "forget", "handler"]



def create_app(secret: str | None = None) -> Any:
    """The script host's FunctionApp (SCRIPTS_DIR: a folder of scripts it serves too).
    Behind a public Function URL it must check every call's signature: without a
    secret it refuses to start (every call then fails, and the logs say why)."""
    from functions.sdk.scripts import ScriptHost

    if not secret:
        raise RuntimeError("SCRIPTS_SECRET is empty: the script host runs code sent to a"
                           " public URL and refuses to serve unsigned calls; deploy with"
                           " -p ScriptsSecret=<a long random secret>")

    return ScriptHost(secret, os.environ.get("SCRIPTS_DIR") or None).app


def forget() -> None:
    """Drop the built host: the next event builds it again (a new container)."""
    lambda_adapter.forget()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return lambda_adapter.serve_event(
        "scripts", lambda: lambda_adapter.build(f"{__name__}:create_app",
                                                os.environ.get("SCRIPTS_SECRET") or None),
        event, context)
