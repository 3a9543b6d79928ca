"""Real uvicorn servers for tests, and a client that signs like the orchestrator does.

with running(create_app(secret="s")) as server:
    response = post_step(server.url + "/noop", input=None, secret="s")
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from functions.sdk import signing
from functions.sdk.protocol import RunInfo, request_body
from functions.sdk.serving import BackgroundServer

__all__ = ["BackgroundServer", "post_step", "running", "step_body"]


@contextmanager
def running(app: Any) -> Iterator[BackgroundServer]:
    """Serve `app` on a free local port for the duration of the block."""
    with BackgroundServer(app) as server:
        yield server


def step_body(
    input: Any = None,
    *,
    steps: Mapping[str, Any] | None = None,
    payload: Mapping[str, Any] | None = None,
    run_id: str = "run-1",
    workflow: str = "test",
    step: str = "step",
    attempt: int = 1,
) -> bytes:
    """A request body as the orchestrator sends it."""
    run = RunInfo(run_id=run_id, workflow=workflow, step=step, attempt=attempt)
    body = request_body(input=input, steps=steps, run=run, payload=payload)
    return json.dumps(body).encode()


def post_step(
    url: str,
    body: bytes,
    *,
    secret: str | None = None,
    now: float | None = None,
    idempotency_key: str | None = None,
    client: httpx.Client | None = None,
) -> httpx.Response:
    """POST `body` to `url`, signed with `secret` at `now` (default: the real clock)."""
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers.update(signing.signed_headers(secret, body, time.time() if now is None else now))
    if idempotency_key is not None:
        headers[signing.IDEMPOTENCY_HEADER] = idempotency_key
    if client is not None:
        return client.post(url, content=body, headers=headers)
    return httpx.post(url, content=body, headers=headers, timeout=10)
