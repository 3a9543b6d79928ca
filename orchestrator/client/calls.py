"""The client's requests, described once for both clients: a `Call` (the request and how
its answer's JSON is read), and the helpers that build one from a method's arguments (a
path segment escaped, option names in either spelling, a run's input)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

__all__ = ["Call", "hook_token", "renamed", "run_input", "seg"]


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


def seg(value: str) -> str:
    """A path segment: a run id, a signal name or a token, escaped."""
    return quote(str(value), safe="")


def renamed(given: Mapping[str, Any], names: Mapping[str, str], what: str) -> dict[str, Any]:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"{what}: unknown {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(sorted(names))})")
    return {names[k]: v for k, v in given.items() if v is not None}


def run_input(value: Any) -> Any:
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


def hook_token(token_or_url: str) -> str:
    """A hook's token, from the token itself, its path `/hooks/<token>` or its URL."""
    marker = "/hooks/"
    return token_or_url.rsplit(marker, 1)[1] if marker in token_or_url else token_or_url
