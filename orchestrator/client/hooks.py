"""`client.hooks`: single-use URLs that deliver a signal to a durable run, created and
executed through the client's calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from orchestrator.client.calls import Call, hook_token, renamed, seg

__all__ = ["HOOK_FIELDS", "Hooks"]

R = TypeVar("R")

HOOK_FIELDS = {"runId": "run_id", "signalName": "signal", "run_id": "run_id",
               "signal": "signal", "metadata": "metadata", "ttl": "ttl", "token": "token"}


class Hooks(Generic[R]):
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
        fields = renamed(spec or {}, HOOK_FIELDS, "hook")
        fields.update(renamed({"run_id": run_id, "signal": signal, "metadata": metadata,
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
        return self._send(Call("POST", f"/hooks/{seg(hook_token(token))}",
                               json={} if payload is None else payload))
