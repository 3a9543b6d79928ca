"""Hooks: secret URLs that deliver a signal to a durable run, once.

A hook's token (256 bits) is an HMAC of the run and the operation that created it under
the hook key (`ORCH_HOOK_SECRET`), so it is never stored: the control table keeps only
its SHA-256 (`hook#<sha256>`), with the run, the signal, the metadata and the expiry.
The same operation always has the same token: a workflow replaying `create_hook` hands
out the same URL, and the hook is stored before the workflow can hand it out.

`POST /hooks/{token}` with a JSON object sends the hook's signal with the metadata
merged over the body (the workflow's metadata wins). A token is single-use: executed
once it answers 410 (so does an expired one); an unknown one 404; neither changes
anything. The hook is spent in the transaction that queues its signal (`used`, the
payload's hash, on the hook's item): a refusal (a payload over the cap, a finished run)
or a failed write leaves it unspent, so nothing is used up unless the signal is stored.
The same request sent again (its answer lost) is a duplicate: it sends the same signal
again, which the signal's idempotency key makes a no-op (and wakes the run again).

Metadata, like any value sent, is at most MAX_VALUE_BYTES; so is the payload it is
merged into (services/values.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import HOOK_SECRET, doc_of, hook_key, hook_used
from orchestrator.errors import (
    Code,
    Conflict,
    NotFound,
    OrchestratorError,
    UsageError,
    imported_run,
)
from orchestrator.services.durable.signals import Signals
from orchestrator.services.values import check_value, checked_name
from orchestrator.strict_json import dumps

__all__ = ["Gone", "Hooks"]

KEY_ITEM = HOOK_SECRET
MAX_TTL = 365 * 24 * 3600.0
DEFAULT_TTL = 7 * 24 * 3600.0


class Gone(OrchestratorError):
    """410: a hook already executed, or expired."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = Code.HOOK_GONE


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Hooks:
    def __init__(self, control: Control, store: Store, signals: Signals,
                 clock: Callable[[], float], *, secret: str | None,
                 public_url: str | None) -> None:
        self.control = control
        self.store = store
        self.signals = signals
        self.clock = clock
        self._secret = secret.encode() if secret else None
        self.public_url = public_url

    def _key(self) -> bytes:
        if self._secret is None:
            made = secrets.token_hex(32)
            self.control.put_new(KEY_ITEM, now=self.clock(), doc={"key": made})
            stored = doc_of(self.control.get(KEY_ITEM, now=self.clock()) or {}) or {}
            self._secret = str(stored.get("key", made)).encode()
        return self._secret

    def token_for(self, run_id: str, op_id: str) -> str:
        mac = hmac.new(self._key(), f"{run_id}\x1f{op_id}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def url_for(self, token: str) -> str:
        return f"{self.public_url or ''}/hooks/{token}"

    def create(self, run_id: str, op_id: str, signal: str, metadata: Any, ttl: float | None,
               *, token: str | None = None) -> dict[str, Any]:
        """Store the hook of operation `op_id` of a run (again: a no-op). Returns what
        the journal keeps (no token) with the token and URL."""
        signal = checked_name("signal name", signal)
        check_value("a hook's metadata", metadata)
        life = DEFAULT_TTL if ttl is None else min(max(float(ttl), 1.0), MAX_TTL)
        now = self.clock()
        tok = token or self.token_for(run_id, op_id)
        sha = _sha(tok)
        doc = {"run_id": run_id, "signal": signal, "metadata": metadata,
               "expires_at": round(now + life, 3), "op_id": op_id}
        if not self.control.put_new(hook_key(sha), now=now, doc=doc,
                                    expires_at=now + life + DEFAULT_TTL):
            stored = doc_of(self.control.get(hook_key(sha), now=now) or {}) or doc
            doc = stored
        return {"signal": doc["signal"], "expires_at": doc["expires_at"],
                "metadata": doc.get("metadata"), "hook": sha[:16], "token": tok,
                "url": self.url_for(tok)}

    def create_for(self, run_id: str, signal: str, metadata: Any, ttl: float | None,
                   token: str | None = None) -> dict[str, Any]:
        """A hook created from outside the workflow (POST /hooks)."""
        run = self.store.runs.get_run(run_id, self.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        if run.definition.durable is None:
            raise Conflict(Code.CONFLICT, f"run {run_id!r} is not a durable run")
        if run.imported is not None:
            raise imported_run(run_id, run.imported, "a hook")
        if run.status.terminal:
            raise Conflict(Code.RUN_FINISHED, f"run {run_id!r} has already finished")
        return self.create(run_id, f"api:{secrets.token_hex(8)}", signal, metadata, ttl,
                           token=token)

    def execute(self, token: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise UsageError("body: a hook's payload is a JSON object")
        now = self.clock()
        sha = _sha(token)
        pk = hook_key(sha)
        item = self.control.get(pk, now=now)
        doc = doc_of(item or {})
        if doc is None:
            raise NotFound("no such hook (unknown token)")
        digest = hashlib.sha256(dumps(body).encode()).hexdigest()
        used = _used(item or {}, doc)
        if used is not None and used != digest:
            raise Gone("this hook was executed already: a hook is single-use")
        metadata = doc.get("metadata")
        payload = {**body, **(metadata if isinstance(metadata, dict) else {})}
        run_id, signal, key = str(doc["run_id"]), str(doc["signal"]), f"hook:{sha}"
        if used is not None:
            # This very request again (its answer lost): the signal's key makes it a
            # no-op, and the run is woken again.
            sent = self.signals.send(run_id, signal, payload, key=key)
            return {"run_id": run_id, "signal": signal, "duplicate": True,
                    "signal_id": sent["id"]}
        if now >= float(doc["expires_at"]):
            raise Gone("this hook has expired")
        check_value("the hook's signal payload (the body with the hook's metadata merged"
                    " over it)", payload)
        run = self.store.runs.get_run(run_id, now)
        if run is not None and run.imported is not None:
            raise imported_run(run_id, run.imported, "a hook's signal")
        if run is None or run.status.terminal:
            # Refused before it is used up: a finished run reads no signal.
            raise Conflict(Code.RUN_FINISHED, f"the hook's run {run_id} has already"
                           " finished: its signal would never be read")
        # Spent with the signal's queueing, in one transaction: both or neither.
        sent = self.signals.send(run_id, signal, payload, key=key,
                                 also=(self.control.use_hook(pk, digest, now),))
        if sent["duplicate"]:
            # A guard failed: another request spent the hook first (this one, sent twice
            # at once, is a duplicate; any other finds it gone).
            again = self.control.get(pk, now=self.clock())
            if again is None or _used(again, doc_of(again) or {}) != digest:
                raise Gone("this hook was executed already: a hook is single-use")
        return {"run_id": run_id, "signal": signal, "duplicate": bool(sent["duplicate"]),
                "signal_id": sent["id"]}


def _used(item: dict[str, Any], doc: dict[str, Any]) -> str | None:
    """The digest of the request that spent a hook (None: unspent). Hooks spent before
    `used` was an attribute of their item kept it in their document."""
    used = hook_used(item) or doc.get("used")
    return None if used is None else str(used)
