"""A Python client of the orchestrator's HTTP API, for your own code: `Client` (blocking)
and `AsyncClient` (asyncio), both over httpx, with the same methods.

    from orchestrator.client import Client

    with Client("http://127.0.0.1:8080", api_key="...") as client:
        run = client.trigger("approval", {"amount": 10}, idempotency_key="order-7")
        client.send_signal(run["run_id"], "approve", {"approved": True})
        done = client.wait(run["run_id"])          # the run's view, once it ended

Each method is one request (`wait` excepted) and returns the API's JSON as plain dicts
and lists, keys as the API spells them (`run_id`, `finished_at`, `event_type`). A refusal
raises `ApiError` (or the subclass of its status) with the API's stable `code`, its
`message` and the HTTP `status`.

The names some durable-workflow SDKs use are aliases of the same methods (README, "The
Python client"): `client.workflow` is the client itself, so
`await client.workflow.trigger(name, [payload], {"runId": ..., "idempotencyKey": ...,
"parentRunId": ...})`, `get_child_workflows` (= `children`), `get_parent_workflow`
(= `parent`), `list_runs(params={"workflowName", "status", "limit"})` and
`hooks.create({"runId", "signalName", "metadata", "token"})` read as there. Statuses are
the orchestrator's (queued, running, paused, success, failed, killed, skipped).

The CLI drives the API through `Client.request` too (orchestrator/cli/client.py).

The package: the calls described once (calls.py, methods.py, hooks.py) and the errors
(errors.py), sent here by the blocking and the asyncio client. The errors are imported
from here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from orchestrator import __version__
from orchestrator.client.calls import Call
from orchestrator.client.errors import (
    ApiError,
    ConflictError,
    GoneError,
    NotFoundError,
    UnavailableError,
    answer,
    unreachable,
)
from orchestrator.client.hooks import Hooks
from orchestrator.client.methods import Methods
from orchestrator.engine.states import RunStatus
from orchestrator.settings import ClientDefaults

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConflictError",
    "GoneError",
    "NotFoundError",
    "UnavailableError",
]

UNFINISHED = frozenset({RunStatus.QUEUED.value, RunStatus.RUNNING.value})
# Longest wait asked of the API's long poll per request (it holds up to 25 s).
POLL_WAIT = 20.0


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": f"orchestrator-client/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class Client(Methods[Any]):
    """The API at `url`, with `api_key` sent as `Authorization: Bearer <key>` (none: no
    header; an API with ORCH_API_AUTH=off takes that). Close it, or use it in `with`."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(timeout=timeout, headers=_headers(api_key),
                                 transport=transport)
        self.sleep = sleep
        self.hooks = Hooks(self._send, self.url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Client:
        """The API of ORCHESTRATOR_URL (default http://127.0.0.1:8080), with the key of
        ORCHESTRATOR_API_KEY, as the CLI finds them."""
        found = ClientDefaults.from_env(environ)
        return cls(found.url, found.api_key, **kwargs)

    def _send(self, call: Call) -> Any:
        try:
            resp = self.http.request(call.method, self.url + call.path, **call.httpx_kwargs())
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from exc
        return call.read(answer(resp))

    def wait(self, run_id: str, timeout: float = 600.0) -> Any:
        """Follow a run until it is no longer queued or running (it ended, or a durable
        run paused) or `timeout` seconds passed; returns its view, steps included. Each
        request is a long poll, so the end is seen as it happens."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            asked = time.monotonic()
            view = self.get_run(run_id, steps=False, wait=max(0.0, min(POLL_WAIT, left)))
            if view["status"] not in UNFINISHED or time.monotonic() >= deadline:
                return self.get_run(run_id)
            if time.monotonic() - asked < 0.05:  # answered at once: do not spin
                self.sleep(0.05)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class AsyncClient(Methods[Awaitable[Any]]):
    """`Client` for asyncio: the same methods, each to be awaited (`await
    client.workflow.trigger(...)`). Close it (`await client.aclose()`) or use it in
    `async with`."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.AsyncClient(timeout=timeout, headers=_headers(api_key),
                                      transport=transport)
        self.hooks = Hooks(self._send, self.url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> AsyncClient:
        """As `Client.from_env`."""
        found = ClientDefaults.from_env(environ)
        return cls(found.url, found.api_key, **kwargs)

    def _send(self, call: Call) -> Awaitable[Any]:
        return self._sent(call)

    async def _sent(self, call: Call) -> Any:
        try:
            resp = await self.http.request(call.method, self.url + call.path,
                                           **call.httpx_kwargs())
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc) from exc
        return call.read(answer(resp))

    async def wait(self, run_id: str, timeout: float = 600.0) -> Any:
        """As `Client.wait`."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            asked = time.monotonic()
            view = await self.get_run(run_id, steps=False,
                                      wait=max(0.0, min(POLL_WAIT, left)))
            if view["status"] not in UNFINISHED or time.monotonic() >= deadline:
                return await self.get_run(run_id)
            if time.monotonic() - asked < 0.05:  # answered at once: do not spin
                await asyncio.sleep(0.05)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()
