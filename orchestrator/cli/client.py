"""The CLI's client of the orchestrator's API: the calls its commands make, sent through
`orchestrator.client.Client` (users' client).

Every call carries `Authorization: Bearer <key>` when a key is set, and every refusal
becomes the error of its status, which the CLI turns into its exit code (common.py): 401
`Unauthorized`, 404 `NotFound`, 409 `Conflict`, 422 `Unprocessable`, any other 4xx (410
included: a hook used or expired) `UsageError`, a 5xx, an answer not JSON or no answer
`ApiUnavailable`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from orchestrator.client import ApiError, Client
from orchestrator.errors import (
    Code,
    Conflict,
    NotFound,
    OrchestratorError,
    Unauthorized,
    Unprocessable,
    UsageError,
)
from orchestrator.settings import (
    KEY_VARIABLE,
    URL_VARIABLE,
    ClientDefaults,
)

__all__ = [
    "KEEP",
    "KEY_VARIABLE",
    "URL_VARIABLE",
    "ApiClient",
    "ApiUnavailable",
    "default_api_key",
    "default_url",
]



class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()
"""`rerun(input=KEEP)`: leave the field out, so the old run's input is used again."""


def default_url(environ: Mapping[str, str] | None = None) -> str:
    return ClientDefaults.from_env(environ).url


def default_api_key(environ: Mapping[str, str] | None = None) -> str | None:
    return ClientDefaults.from_env(environ).api_key


class ApiUnavailable(OrchestratorError):
    code = Code.API_UNAVAILABLE
    retryable = True


class ApiClient:
    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = Client(self.url, api_key, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer's JSON; `kwargs`: params, json, headers, timeout."""
        with self._translating():
            return self.client.request(method, path, **kwargs)

    @contextmanager
    def _translating(self) -> Iterator[None]:
        try:
            yield
        except ApiError as exc:
            raise _translated(exc, self.url) from exc

    # ---- runs --------------------------------------------------------------------------

    def start(
        self,
        workflow: str,
        input: Any,
        run_id: str | None = None,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
    ) -> Any:
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if run_id:
            body["run_id"] = run_id
        if priority is not None:
            body["priority"] = priority
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.request("POST", "/runs", json=body, headers=headers)

    def run(self, run_id: str, *, steps: bool = True, wait: float = 0.0) -> Any:
        """A run's view; steps=False: the run alone (one read of its row). `wait`: held
        by the API until the run ends or that many seconds passed (a long poll)."""
        params: dict[str, str] = {} if steps else {"steps": "false"}
        extra: dict[str, Any] = {}
        if wait > 0:
            params["wait"] = f"{wait:.1f}"
            extra["timeout"] = wait + 30.0
        return self.request("GET", f"/runs/{run_id}", params=params or None, **extra)

    def runs(
        self,
        workflow: str | None = None,
        limit: int = 20,
        *,
        status: str | None = None,
        cursor: str | None = None,
        q: str | None = None,
    ) -> Any:
        params: dict[str, Any] = {"limit": limit}
        for name, value in (("workflow", workflow), ("status", status), ("cursor", cursor),
                            ("q", q)):
            if value:
                params[name] = value
        return self.request("GET", "/runs", params=params)

    def bulk(self, spec: dict[str, Any]) -> Any:
        """Start a bulk action (or count its runs: `dry_run`)."""
        return self.request("POST", "/bulk-actions", json=spec)

    def bulk_job(self, job_id: str, *, limit: int = 100, cursor: str | None = None) -> Any:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        return self.request("GET", f"/bulk-actions/{job_id}", params=params)

    def history(self, run_id: str) -> Any:
        return self.request("GET", f"/runs/{run_id}/events")

    def cancel(self, run_id: str, reason: str) -> Any:
        return self.request("POST", f"/runs/{run_id}/cancel", json={"reason": reason})

    def rerun(self, run_id: str, *, input: Any = KEEP, new_run_id: str | None = None) -> Any:
        body: dict[str, Any] = {}
        if input is not KEEP:
            body["input"] = input
        if new_run_id:
            body["run_id"] = new_run_id
        return self.request("POST", f"/runs/{run_id}/rerun", json=body)

    # ---- durable runs: signals, hooks, operators' hands, parents and children ------------

    def signal(self, run_id: str, name: str, payload: dict[str, Any], *,
               idempotency_key: str | None = None) -> Any:
        with self._translating():
            return self.client.send_signal(run_id, name, payload,
                                           idempotency_key=idempotency_key)

    def answer_approval(self, run_id: str, step: str, approved: bool,
                        comment: str | None) -> Any:
        with self._translating():
            return self.client.answer_approval(run_id, step, approved, comment)

    def approvals(self, approver: str | None, limit: int) -> Any:
        with self._translating():
            return self.client.list_approvals(approver, limit)

    def state(self, method: str, *args: Any) -> Any:
        """One of the client's state calls: get, set, delete, list."""
        with self._translating():
            return getattr(self.client, f"{method}_state")(*args)

    def resume(self, run_id: str) -> Any:
        with self._translating():
            return self.client.resume_run(run_id)

    def reset(self, run_id: str, to: int) -> Any:
        with self._translating():
            return self.client.reset_run(run_id, to)

    def children(self, run_id: str) -> Any:
        """{run_id, children: [summary]}."""
        return self.request("GET", f"/runs/{quote(run_id, safe='')}/children")

    def parent(self, run_id: str) -> Any:
        """{run_id, parent_run_id, parent: summary | None}."""
        return self.request("GET", f"/runs/{quote(run_id, safe='')}/parent")

    def create_hook(self, run_id: str, signal: str, *, metadata: Any = None,
                    ttl: float | None = None, token: str | None = None) -> Any:
        with self._translating():
            return self.client.hooks.create(run_id=run_id, signal=signal, metadata=metadata,
                                            ttl=ttl, token=token)

    def execute_hook(self, token: str, payload: dict[str, Any]) -> Any:
        """`token`: the hook's token, its path or its URL."""
        with self._translating():
            return self.client.hooks.execute(token, payload)

    # ---- events and schedules ----------------------------------------------------------

    def emit(
        self,
        name: str,
        data: Any = None,
        *,
        key: str | None = None,
        event_id: str | None = None,
    ) -> Any:
        body: dict[str, Any] = {"name": name, "data": data}
        if key is not None:
            body["key"] = key
        if event_id is not None:
            body["id"] = event_id
        return self.request("POST", "/events", json=body)

    def schedules(self) -> Any:
        return self.request("GET", "/schedules")

    def schedule(self, workflow: str, action: str) -> Any:
        """`action` is pause, resume or trigger."""
        return self.request("POST", f"/schedules/{workflow}/{action}")


def _translated(exc: ApiError, url: str) -> OrchestratorError:
    if exc.status is None:
        return ApiUnavailable(f"{exc.message} (is `orchestrator dev` running? set --url or "
                              f"{URL_VARIABLE})")
    if exc.status < 400:  # a 2xx whose body is not JSON
        return ApiUnavailable(f"{url}: answered {exc.status} with a body that is not JSON")
    return _refusal(exc.status, exc.code, exc.message, url)


def _refusal(status: int, code: str, message: str, url: str) -> OrchestratorError:
    if status == 401:
        return Unauthorized(code, message)
    if status == 404:
        return NotFound(message)
    if status == 409:
        return Conflict(code, message)
    if status == 422:
        return Unprocessable(code, message)
    if status < 500:
        return UsageError(message)
    return ApiUnavailable(f"{url}: {message}")
