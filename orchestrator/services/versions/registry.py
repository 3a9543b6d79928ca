"""A stack's versions of its backends' code (adapters/store/versions.py), as the rest
of the orchestrator asks about them: the version a new durable run starts on (`pin`,
the current one, read at most once a second), where a version is served (`url_of`: a
label names one URL for good, so it is kept once read; `callable_url`, for a call of a
run: read afresh at the run's first call, since a retire may have counted the runs
pinned to it before this one's row was written), and the registrations the manifest
declares (`seed`).

A backend with no version registered has none: its runs record no version and are
called at its manifest URL, as before versions existed."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.versions import Registry
from orchestrator.engine.definition import Definition
from orchestrator.errors import Code, ConditionFailed, Conflict, NotFound

__all__ = ["CURRENT_TTL", "Versions", "digest_label", "script_version"]

# How long a process keeps a backend's current version before reading it again.
CURRENT_TTL = 1.0



def script_version(sha256: str) -> str:
    """A script run's version: its text's hash, shortened."""
    return "s-" + sha256[:12]


def digest_label(published: bytes) -> str:
    """The default label of a version: a hash of what its backend publishes (its OpenAPI
    document, with the `x-durable-workflow` of each workflow)."""
    return "h-" + hashlib.sha256(published).hexdigest()[:12]


class Versions:
    def __init__(self, store: Store, clock: Callable[[], float], *,
                 ttl: float = CURRENT_TTL) -> None:
        self.store = store
        self.rows = store.versions
        self.clock = clock
        self.ttl = ttl
        self._lock = threading.Lock()
        self._current: dict[str, tuple[float, str | None]] = {}
        self._urls: dict[tuple[str, str], str] = {}

    def registry(self, backend: str) -> Registry:
        registry = self.rows.read(backend, self.clock())
        with self._lock:
            self._current[backend] = (time.monotonic(), registry.current)
            for label, version in registry.live.items():
                self._urls[(backend, label)] = version.url
        return registry

    def current(self, backend: str) -> str | None:
        """The version new runs of `backend` start on (None: it has none)."""
        with self._lock:
            seen = self._current.get(backend)
        if seen is not None and time.monotonic() - seen[0] < self.ttl:
            return seen[1]
        return self.registry(backend).current

    def pin(self, definition: Definition) -> str | None:
        """The version a new run of `definition` starts on: its backend's current one,
        for a durable Python workflow; a script's text is its own version (`s-` and
        its hash: the run is called with that text whatever its name holds later)."""
        if definition.durable is None or not definition.steps:
            return None
        if definition.script:
            return script_version(str(definition.script.get("sha256", "")))
        return self.current(definition.steps[0].backend)

    def url_of(self, backend: str, label: str) -> str | None:
        """Where `label` of `backend` is served; None if it is not live."""
        with self._lock:
            url = self._urls.get((backend, label))
        if url is not None:
            return url
        version = self.registry(backend).live.get(label)
        return None if version is None else version.url

    def callable_url(self, backend: str, label: str, run_id: str, first: bool) -> str | None:
        """Where run `run_id`, pinned to `label`, is to be called now (None: the version
        is not live). At the run's `first` call the version is read afresh: the run may
        have been written after a retire counted the runs pinned to it, and a version
        being retired is called only once the run's use is noted on it, which keeps its
        retire from retiring it (adapters/store/versions.py). Later calls need no read:
        any retire since counts this run (its row is there), and is refused while it
        is pinned; a move checked its new version live in its own transaction."""
        if not first:
            return self.url_of(backend, label)
        version = self.rows.get(backend, label, self.clock())
        if version is None:
            return None
        if version.retiring is not None and not self.rows.use(backend, label, run_id):
            return None
        with self._lock:
            self._urls[(backend, label)] = version.url
        return version.url

    def forget(self, backend: str, label: str) -> None:
        """A retired version's URL is no longer served from this process's memory."""
        with self._lock:
            self._urls.pop((backend, label), None)
            self._current.pop(backend, None)

    def register(self, backend: str, label: str, url: str, digest: str | None = None) -> bool:
        """Make `label` a live version of `backend` at `url` (True: new). A label
        already naming another URL is refused (409): labels never move."""
        try:
            return self.rows.register(backend, label, url.rstrip("/"), digest, self.clock())
        except ConditionFailed as exc:
            why = ("was retired: a label is never used again" if exc.item and "retired"
                   in exc.item else "is served elsewhere already")
            raise Conflict(Code.VERSION_TAKEN, f"version {label!r} of {backend!r} {why}:"
                           " give the new code another label") from None

    def make_current(self, backend: str, label: str, expected: str | None = None) -> None:
        try:
            self.rows.make_current(backend, label, self.clock(), expected)
        except ConditionFailed:
            registry = self.registry(backend)
            if label not in registry.live:
                raise NotFound(f"backend {backend!r} has no live version {label!r}"
                               f" (live: {', '.join(sorted(registry.live)) or 'none'})"
                               ) from None
            raise Conflict(Code.CONFLICT, f"version {label!r} of {backend!r} cannot become"
                           " current now (it is being retired, or another deploy moved"
                           " the current version meanwhile)") from None
        with self._lock:
            self._current.pop(backend, None)

    def seed(self, backends: Mapping[str, Any]) -> dict[str, str]:
        """Register the versions each backend of the manifest declares (`versions:`),
        and make its `current:` current where the backend has none yet. Returns the
        backends whose declared current differs from the registry's (backend -> the
        declared one): making it current is a promotion, after a check of open runs."""
        moves: dict[str, str] = {}
        for name, backend in backends.items():
            declared = getattr(backend, "versions", None) or {}
            for label, url in declared.items():
                self.register(name, label, url)
            current = getattr(backend, "current", None)
            if current is None:
                continue
            registry = self.registry(name)
            if registry.current is None:
                self.make_current(name, current)
            elif registry.current != current:
                moves[name] = current
        return moves
