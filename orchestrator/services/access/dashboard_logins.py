"""One-time links that sign a browser in to the dashboard (`orchestrator dev` prints one).

A link's token (256 bits) is stored only as its SHA-256, with an expiry; following the
link spends it with one conditional delete, so it signs in once, and only before it
expires. Spending it makes a new API key (named `dashboard`) that the browser keeps in an
HttpOnly cookie: the dashboard is then authenticated exactly as the API is."""

from __future__ import annotations

import hashlib
import secrets

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import login_key
from orchestrator.services.access.apikeys import ApiKeys

__all__ = ["DashboardLogins"]

LINK_TTL = 15 * 60.0


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DashboardLogins:
    def __init__(self, control: Control) -> None:
        self.control = control

    def create(self, now: float, ttl: float = LINK_TTL) -> str:
        """A new one-time token, good for `ttl` seconds."""
        token = secrets.token_urlsafe(32)
        self.control.put_new(login_key(_sha(token)), now=now, expires_at=now + ttl,
                             doc={"created_at": now})
        return token

    def spend(self, token: str, now: float) -> str | None:
        """A new API key for the browser if `token` is a live, unspent link; else None.
        Two browsers racing on one link: one delete wins, the other gets None."""
        if not token or len(token) > 200:
            return None
        spent = self.control.delete(
            login_key(_sha(token)),
            condition="attribute_exists(pk) AND expires_at > :now",
            values={":now": num(now)},
        )
        return ApiKeys(self.control).create("dashboard", now) if spent else None
