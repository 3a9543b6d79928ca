"""Durable shell scripts: bash scripts served as durable workflows, on the Python SDK.

    from functions.sdk.scripts import ScriptHost

    host = ScriptHost(secret=..., directory="scripts")   # scripts/deploy.sh -> deploy
    app = host.app                                       # a FunctionApp: serve it

A script calls `orchestrator step NAME -- CMD...`, `sleep 5m`, `wait signal approve`,
`state add KEY --entity E`, `lock KEY -- CMD...`, `activity run ...`, `call`, `spawn`; each
is the SDK's own operation, so a run replays its recorded steps (printing their output
again) and waits holding nothing. See `run.py` for one call, `operations.py` for the
commands, `channel.py` and `shim.py` for how a script reaches its host."""

from functions.sdk.scripts.host import ScriptHost

__all__ = ["ScriptHost"]
