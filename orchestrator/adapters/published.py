"""What a functions app publishes about itself: its OpenAPI document (with the
`x-durable-workflow` of each durable workflow), read to name a version of its code by
default and to tell a functions app from anything else at a URL."""

from __future__ import annotations

import json

import httpx

from orchestrator.errors import UsageError

__all__ = ["published"]


def published(url: str, *, timeout: float = 10.0) -> bytes:
    """The OpenAPI document served at `url`/openapi.json, as canonical JSON bytes
    (sorted keys: the same document always gives the same bytes). UsageError naming
    the URL if there is none."""
    where = url.rstrip("/") + "/openapi.json"
    try:
        resp = httpx.get(where, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise UsageError(f"{where}: cannot be reached ({type(exc).__name__}: {exc})") from None
    if resp.status_code != 200:
        raise UsageError(f"{where} answered {resp.status_code}: not a functions app")
    try:
        doc = resp.json()
    except ValueError:
        raise UsageError(f"{where}: not JSON, so not a functions app") from None
    if not isinstance(doc, dict) or "paths" not in doc:
        raise UsageError(f"{where}: not an OpenAPI document, so not a functions app")
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
