"""A functions app (written with `functions.sdk`) as an AWS Lambda function behind a
Function URL or an API Gateway HTTP API, through mangum, the same adapter the
orchestrator's API uses.

    Handler: functions.sdk.lambda_adapter.handler   # this module
    FUNCTIONS_APP=functions.examples.monthly_report:create_app   # module:factory
    FUNCTIONS_SECRET=...   # passed to the factory as `secret` when it takes one
    FUNCTIONS_WORK_DIR=/tmp/work   # as `work_dir`, likewise (Lambda writes only /tmp)

The app is built once per container, on its first event. Every call the orchestrator
makes is signed with the shared secret and the SDK verifies it, so the URL itself can be
public (AuthType NONE): an unsigned request is refused with 401 before any step runs."""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from typing import Any

__all__ = ["build", "forget", "handler", "serve_event"]

_built: dict[str, Any] = {}
_lock = threading.Lock()


def build(spec: str, secret: str | None, work_dir: str | None = None) -> Any:
    """The ASGI app of `spec` (module:factory), signed with `secret` and writing under
    `work_dir` if the factory takes them, behind mangum."""
    from mangum import Mangum

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"FUNCTIONS_APP {spec!r}: expected module:factory")
    factory = getattr(importlib.import_module(module_name), attr)
    kwargs: dict[str, Any] = {}
    takes = inspect.signature(factory).parameters
    if secret and "secret" in takes:
        kwargs["secret"] = secret
    if work_dir and "work_dir" in takes:
        from pathlib import Path

        kwargs["work_dir"] = Path(work_dir)
    return Mangum(factory(**kwargs), lifespan="off")


def forget() -> None:
    """Drop the built app: the next event builds it again (a new container)."""
    with _lock:
        _built.clear()


def serve_event(key: str, make: Any, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Answer one Lambda event with the app cached under `key`, made by `make()` on the
    container's first event (the script host's handler uses it too)."""
    app = _built.get(key)
    if app is None:
        with _lock:
            if key not in _built:
                _built[key] = make()
            app = _built[key]
    answer: dict[str, Any] = app(event, context)
    return answer


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return serve_event("app", lambda: build(os.environ["FUNCTIONS_APP"],
                                            os.environ.get("FUNCTIONS_SECRET") or None,
                                            os.environ.get("FUNCTIONS_WORK_DIR") or None),
                       event, context)
