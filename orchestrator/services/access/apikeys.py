"""Bearer API keys: created by `orchestrator keys create`, stored only as a SHA-256 hash.

A key is 32 random bytes (`ok_` + base64url), so a plain SHA-256 is the right hash: there
is nothing to brute-force, unlike a password, and a lookup is one GetItem by hash. The
key itself is shown once, when it is created."""

from __future__ import annotations

import hashlib
import secrets

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import apikey_key, doc_of

__all__ = ["ApiKeys", "hash_key"]

PREFIX = "ok_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, control: Control) -> None:
        self.control = control

    def create(self, name: str, now: float) -> str:
        key = PREFIX + secrets.token_urlsafe(32)
        self.control.put_new(
            apikey_key(hash_key(key)), now=now,
            doc={"name": name, "created_at": now, "hint": key[:7]},
        )
        return key

    def check(self, key: str, now: float) -> str | None:
        """The key's name if it is valid, else None."""
        if not key.startswith(PREFIX) or len(key) > 200:
            return None
        item = self.control.get(apikey_key(hash_key(key)), now=now)
        if item is None:
            return None
        return str((doc_of(item) or {}).get("name", ""))
