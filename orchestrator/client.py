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

The CLI drives the API through `Client.request` too (orchestrator/cli/client.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

import httpx

from orchestrator import __version__
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code, OrchestratorError
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

R = TypeVar("R")

UNFINISHED = frozenset({RunStatus.QUEUED.value, RunStatus.RUNNING.value})
# Longest wait asked of the API's long poll per request (it holds up to 25 s).
POLL_WAIT = 20.0
# The reference's option and parameter names, and the API's own.
TRIGGER_OPTIONS = {"runId": "run_id", "idempotencyKey": "idempotency_key",
                   "parentRunId": "parent_run_id", "run_id": "run_id",
                   "idempotency_key": "idempotency_key", "parent_run_id": "parent_run_id"}
LIST_PARAMS = {"workflowName": "workflow", "workflow": "workflow", "status": "status",
               "limit": "limit", "cursor": "cursor"}
HOOK_FIELDS = {"runId": "run_id", "signalName": "signal", "run_id": "run_id",
               "signal": "signal", "metadata": "metadata", "ttl": "ttl", "token": "token"}


# ---- errors ------------------------------------------------------------------------------


class ApiError(OrchestratorError):
    """The API refused a request (`status` 4xx or 5xx), answered something that is not its
    JSON, or could not be reached (`status` None). `code` is the API's stable error code
    (`not_found`, `run_finished`, `invalid_body`...; see the README's table)."""

    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        # Worth retrying: no answer, a 5xx, a 429.
        self.retryable = status is None or status >= 500 or status == 429

    def __str__(self) -> str:
        where = "no answer" if self.status is None else f"HTTP {self.status}"
        return f"{self.message} ({where}, {self.code})"


class NotFoundError(ApiError):
    """404: no such run, workflow or hook (or route)."""


class ConflictError(ApiError):
    """409: the request does not fit the run's state (`run_finished`, `conflict`...)."""


class GoneError(ApiError):
    """410: a hook already executed (with another payload), or expired."""


class UnavailableError(ApiError):
    """The API could not be reached, failed (5xx) or answered something not JSON."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError,
                                         410: GoneError}
_NOT_JSON = object()


def _answer(resp: httpx.Response) -> Any:
    """The JSON of an answer, or the error it stands for."""
    try:
        body = resp.json()
    except ValueError:
        body = _NOT_JSON
    status = resp.status_code
    if status < 400 and body is not _NOT_JSON:
        return body
    if body is _NOT_JSON:
        code, message = Code.BAD_RESPONSE.value, resp.text[:300]
    else:
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        code, message = str(err.get("code") or f"http_{status}"), str(err.get("message") or "")
    kind = _BY_STATUS.get(status) or (UnavailableError if status >= 500 or status < 400
                                      else ApiError)
    raise kind(status, code, message or f"HTTP {status}")


def _unreachable(url: str, exc: httpx.HTTPError) -> UnavailableError:
    return UnavailableError(None, Code.API_UNAVAILABLE.value,
                            f"cannot reach the orchestrator at {url}: {exc}")


# ---- requests, described once for both clients ------------------------------------------


def _same(body: Any) -> Any:
    return body


@dataclass(frozen=True)
class Call:
    """One request, described: the client sends it and `read` turns the answer's JSON into
    the method's result. Both clients send the same calls."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None
    read: Callable[[Any], Any] = field(default=_same)

    def httpx_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.params:
            kwargs["params"] = dict(self.params)
        if self.method != "GET":
            kwargs["json"] = self.json
        if self.headers:
            kwargs["headers"] = dict(self.headers)
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        return kwargs


def _seg(value: str) -> str:
    """A path segment: a run id, a signal name or a token, escaped."""
    return quote(str(value), safe="")


def _renamed(given: Mapping[str, Any], names: Mapping[str, str], what: str) -> dict[str, Any]:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"{what}: unknown {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(sorted(names))})")
    return {names[k]: v for k, v in given.items() if v is not None}


def _input(value: Any) -> Any:
    """The run's input. A list is the positional arguments of the SDKs that take them
    (README, "The Python client"): `[payload]` is `payload` and `[]` is None; a workflow
    takes one payload, so a longer list is refused (pass a list itself wrapped:
    `[[1, 2]]`)."""
    if not isinstance(value, list):
        return value
    if len(value) > 1:
        raise ValueError(f"input: a list is the positional arguments, and a workflow takes "
                         f"one payload, not {len(value)} (to pass a list, wrap it: [[...]])")
    return value[0] if value else None


def _hook_token(token_or_url: str) -> str:
    """A hook's token, from the token itself, its path `/hooks/<token>` or its URL."""
    marker = "/hooks/"
    return token_or_url.rsplit(marker, 1)[1] if marker in token_or_url else token_or_url


class _Hooks(Generic[R]):
    """`client.hooks`: single-use URLs that deliver a signal to a durable run."""

    def __init__(self, send: Callable[[Call], R], base_url: str) -> None:
        self._send = send
        self._base_url = base_url

    def create(self, spec: Mapping[str, Any] | None = None, /, *, run_id: str | None = None,
               signal: str | None = None, metadata: Any = None, ttl: float | None = None,
               token: str | None = None) -> R:
        """Create a hook for running durable run `run_id`: executing it sends `signal`
        with its payload, `metadata` merged over it. `ttl` in seconds (default 7 days);
        `token` your own (at least 32 characters) or one is made. Give the fields as
        keywords, or as one mapping in the reference's spelling (`runId`, `signalName`,
        `metadata`, `token`, `ttl`). Returns {token, url, signal, expires_at, metadata,
        hook, run_id}; `url` is absolute (joined to the client's URL when the API has no
        public URL configured)."""
        fields = _renamed(spec or {}, HOOK_FIELDS, "hook")
        fields.update(_renamed({"run_id": run_id, "signal": signal, "metadata": metadata,
                                "ttl": ttl, "token": token}, HOOK_FIELDS, "hook"))
        base = self._base_url

        def read(body: Any) -> Any:
            if isinstance(body, dict) and str(body.get("url", "")).startswith("/"):
                body = {**body, "url": base + body["url"]}
            return body

        return self._send(Call("POST", "/hooks", json=fields, read=read))

    def execute(self, token: str, payload: Mapping[str, Any] | None = None) -> R:
        """Execute a hook (by its token, or its URL): its signal goes to its run with
        `payload` (a JSON object) and the hook's metadata merged over it. Returns {run_id,
        signal, duplicate, signal_id}; the same payload again is a duplicate, another
        raises `GoneError` (single-use), as does an expired hook; an unknown token raises
        `NotFoundError`. Needs no API key."""
        return self._send(Call("POST", f"/hooks/{_seg(_hook_token(token))}",
                               json={} if payload is None else payload))


class _Methods(Generic[R]):
    """The API's calls, written once: `Client` returns their results, `AsyncClient`
    awaitables of them."""

    url: str
    hooks: _Hooks[R]

    def _send(self, call: Call) -> R:
        raise NotImplementedError

    @property
    def workflow(self) -> Self:
        """The `client.workflow.trigger(...)` namespace other SDKs spell (README, "The Python
        client"): the client itself."""
        return self

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                json: Any = None, headers: Mapping[str, str] | None = None,
                timeout: float | None = None) -> R:
        """Any call of the API (`path` from its root): the answer's JSON as it is."""
        return self._send(Call(method, path, params, json, headers, timeout))

    # ---- runs ----------------------------------------------------------------------------

    def trigger(self, workflow: str, input: Any = None,
                options: Mapping[str, Any] | None = None, *, run_id: str | None = None,
                idempotency_key: str | None = None, parent_run_id: str | None = None) -> R:
        """Start a run of `workflow`; returns {run_id, workflow, status, created}.

        `input` is the run's input, any JSON value; a list is the other SDKs' positional
        arguments (`[payload]` means `payload`). `run_id`: choose the id (starting it
        again returns that run, `created` false). `idempotency_key`: a retry with the same
        key and input returns the first run. `parent_run_id`: list the run among that
        run's children (cancelling the parent cancels it). The options may also be given
        as one mapping in the reference's spelling: {"runId", "idempotencyKey",
        "parentRunId"}."""
        opts = _renamed(options or {}, TRIGGER_OPTIONS, "options")
        opts.update(_renamed({"run_id": run_id, "idempotency_key": idempotency_key,
                              "parent_run_id": parent_run_id}, TRIGGER_OPTIONS, "options"))
        body: dict[str, Any] = {"workflow": workflow, "input": _input(input)}
        for name in ("run_id", "parent_run_id"):
            if opts.get(name):
                body[name] = opts[name]
        key = opts.get("idempotency_key")
        return self._send(Call("POST", "/runs", json=body,
                               headers={"Idempotency-Key": key} if key else None))

    def get_run(self, run_id: str, *, steps: bool = True, wait: float = 0.0) -> R:
        """A run's view: status, input, output (durable runs), error, timings, and its
        steps (a durable run's operations), unless `steps=False`. `wait` (seconds, at
        most 25): the API answers once the run ended or that long passed."""
        params: dict[str, str] = {} if steps else {"steps": "false"}
        timeout = None
        if wait > 0:
            params["wait"] = f"{wait:.1f}"
            timeout = wait + 30.0
        return self._send(Call("GET", f"/runs/{_seg(run_id)}", params, timeout=timeout))

    def list_runs(self, workflow: str | None = None, *, status: str | None = None,
                  limit: int | None = None, cursor: str | None = None,
                  params: Mapping[str, Any] | None = None) -> R:
        """Runs, newest first: {runs: [summary], next_cursor}. Filter by `workflow` and
        `status` (a run status, or `paused`); `limit` 1-100 (20); pass `next_cursor`
        back as `cursor` for the next page. `params` takes the same in one mapping, with
        the reference's `workflowName` for `workflow`."""
        query = _renamed(params or {}, LIST_PARAMS, "params")
        query.update(_renamed({"workflow": workflow, "status": status, "limit": limit,
                               "cursor": cursor}, LIST_PARAMS, "params"))
        return self._send(Call("GET", "/runs", {k: str(v) for k, v in query.items()}))

    def cancel_run(self, run_id: str, reason: str | None = None) -> R:
        """Cancel a run (and its running children); returns its view. A finished run
        raises `ConflictError` (`run_finished`)."""
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/cancel",
                               json={"reason": reason} if reason else {}))

    def send_signal(self, run_id: str, name: str, payload: Mapping[str, Any] | None = None,
                    *, idempotency_key: str | None = None) -> R:
        """Send signal `name` with `payload` (a JSON object) to durable run `run_id`;
        returns {run_id, signal, id, duplicate}. A signal sent before the run waits for
        it is kept for it. With `idempotency_key`, sending it again queues nothing."""
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/signals/{_seg(name)}",
                               json={} if payload is None else payload,
                               headers={"Idempotency-Key": idempotency_key}
                               if idempotency_key else None))

    def answer_approval(self, run_id: str, step: str, approved: bool,
                        comment: str | None = None) -> R:
        """Approve (or reject: the run is cancelled) the open approval gate `step` of
        `run_id`; returns the gate as answered. A second answer, or one past the gate's
        deadline, is refused (409) and changes nothing."""
        body: dict[str, Any] = {"approved": approved}
        if comment is not None:
            body["comment"] = comment
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/approvals/{_seg(step)}",
                               json=body))

    def list_approvals(self, approver: str | None = None, limit: int = 100) -> R:
        """The inbox: {approvals: [open gates, oldest first]} (`approver`: those that API
        key name may answer)."""
        params: dict[str, Any] = {"limit": limit}
        if approver is not None:
            params["approver"] = approver
        return self._send(Call("GET", "/approvals", params=params))

    def get_state(self, entity: str, key: str) -> R:
        """A durable state cell: {entity, key, value, version, expires_at}."""
        return self._send(Call("GET", f"/state/{_seg(entity)}/{_seg(key)}"))

    def set_state(self, entity: str, key: str, value: Any, ttl: float | None = None) -> R:
        """Set a state cell to `value` (for `ttl` seconds); the cell as set."""
        body: dict[str, Any] = {"value": value}
        if ttl is not None:
            body["ttl"] = ttl
        return self._send(Call("PUT", f"/state/{_seg(entity)}/{_seg(key)}", json=body))

    def delete_state(self, entity: str, key: str) -> R:
        return self._send(Call("DELETE", f"/state/{_seg(entity)}/{_seg(key)}"))

    def list_state(self, entity: str, after: str | None = None, limit: int = 100) -> R:
        """{entity, cells: [cell], next}: an entity's cells in key order."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        return self._send(Call("GET", f"/state/{_seg(entity)}", params=params))

    def resume_run(self, run_id: str) -> R:
        """Call a paused durable run's workflow again (after a fix for the replay mismatch
        that paused it); returns {run_id, resumed, was_paused}."""
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/resume", json={}))

    def reset_run(self, run_id: str, to: int) -> R:
        """Forget a durable run's journal from position `to` of its top scope on and call
        its workflow again; returns {run_id, reset_to, forgotten, was_paused}."""
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/reset", json={"to": to}))

    def children(self, run_id: str) -> R:
        """The runs started as children of `run_id` (`ctx.call`, `ctx.spawn`, or with
        `parent_run_id`), as summaries, oldest first."""
        return self._send(Call("GET", f"/runs/{_seg(run_id)}/children",
                               read=lambda body: body["children"]))

    def parent(self, run_id: str) -> R:
        """The summary of the run `run_id` is a child of; None if it has none (or the
        parent expired)."""
        return self._send(Call("GET", f"/runs/{_seg(run_id)}/parent",
                               read=lambda body: body["parent"]))

    get_child_workflows = children
    get_parent_workflow = parent

    # ---- a run's events ------------------------------------------------------------------

    def create_event(self, run_id: str, event_type: str, payload: Any = None) -> R:
        """Record a custom event of a run, beside its transitions; returns {id,
        event_type, payload, at}."""
        return self._send(Call("POST", f"/runs/{_seg(run_id)}/events",
                               json={"event_type": event_type, "payload": payload}))

    def list_events(self, run_id: str) -> R:
        """A run's custom events (`create_event`), oldest first."""
        return self._send(Call("GET", f"/runs/{_seg(run_id)}/events",
                               read=lambda body: body["custom"]))

    def history(self, run_id: str) -> R:
        """Every transition of a run and its steps, oldest first ({type, at, step, ...})."""
        return self._send(Call("GET", f"/runs/{_seg(run_id)}/events",
                               read=lambda body: body["events"]))


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": f"orchestrator-client/{__version__}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class Client(_Methods[Any]):
    """The API at `url`, with `api_key` sent as `Authorization: Bearer <key>` (none: no
    header; an API with ORCH_API_AUTH=off takes that). Close it, or use it in `with`."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(timeout=timeout, headers=_headers(api_key),
                                 transport=transport)
        self.sleep = sleep
        self.hooks = _Hooks(self._send, self.url)

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
            raise _unreachable(self.url, exc) from exc
        return call.read(_answer(resp))

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


class AsyncClient(_Methods[Awaitable[Any]]):
    """`Client` for asyncio: the same methods, each to be awaited (`await
    client.workflow.trigger(...)`). Close it (`await client.aclose()`) or use it in
    `async with`."""

    def __init__(self, url: str, api_key: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.AsyncClient(timeout=timeout, headers=_headers(api_key),
                                      transport=transport)
        self.hooks = _Hooks(self._send, self.url)

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
            raise _unreachable(self.url, exc) from exc
        return call.read(_answer(resp))

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
