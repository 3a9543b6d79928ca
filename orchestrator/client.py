"""A small HTTP client for the orchestrator's API, used by the CLI."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

from orchestrator.errors import NotFound, OrchestratorError, UsageError

__all__ = ["ApiClient", "ApiUnavailable", "default_url"]

DEFAULT_URL = "http://127.0.0.1:8080"


def default_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("ORCHESTRATOR_URL") or DEFAULT_URL


class ApiUnavailable(OrchestratorError):
    code = "api_unavailable"
    retryable = True


class ApiClient:
    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self.http.request(method, self.url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiUnavailable(
                f"cannot reach the orchestrator at {self.url}: {exc} "
                "(is `orchestrator dev` running? set --url or ORCHESTRATOR_URL)"
            ) from exc
        try:
            body = resp.json()
        except ValueError:
            body = {"error": {"code": "bad_response", "message": resp.text[:300]}}
        if resp.status_code >= 400:
            err = body.get("error", {}) if isinstance(body, dict) else {}
            message = err.get("message") or f"HTTP {resp.status_code}"
            if resp.status_code == 404:
                raise NotFound(message)
            if resp.status_code < 500:
                raise UsageError(message)
            raise ApiUnavailable(f"{self.url}: {message}")
        return body

    def start(self, workflow: str, input: Any, run_id: str | None = None) -> Any:
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if run_id:
            body["run_id"] = run_id
        return self.request("POST", "/runs", json=body)

    def run(self, run_id: str) -> Any:
        return self.request("GET", f"/runs/{run_id}")

    def runs(self, workflow: str, limit: int = 20) -> Any:
        return self.request("GET", "/runs", params={"workflow": workflow, "limit": limit})

    def cancel(self, run_id: str, reason: str) -> Any:
        return self.request("POST", f"/runs/{run_id}/cancel", json={"reason": reason})
