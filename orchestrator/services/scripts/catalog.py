"""Every workflow a run may name: the manifest's, the script workflows stored through
the API (registry.py), and `activity.<capability>`, the activity workflow of a script
host with that capability (a script's `activity submit --requires CAP`).

`Catalog` stands where the manifest stood (admission, events, the scheduler, webhooks
read `.workflows` and `.backends` from it): `.workflows` is a mapping that looks in the
manifest first, then in the stored scripts. The stored ones are read again at most
every `ttl` seconds (and at once after this process stored one): a handler set through
one API process is seen by another's events within that time."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from orchestrator.errors import Conflict, NotFound, OrchestratorError, UsageError
from orchestrator.manifest.shell import SHELL
from orchestrator.manifest.workflows import Workflow
from orchestrator.services.scripts.registry import ScriptEntry, ScriptRegistry
from orchestrator.services.scripts.texts import ScriptTexts, check_script, digest

__all__ = ["ACTIVITY", "Catalog"]

# `activity.<capability>`: the activity workflow, served at /durable/activity.
ACTIVITY = "activity"
TTL = 2.0
# A workflow's name (the manifest's rule).
WORKFLOW_NAME = re.compile(r"[A-Za-z0-9._~\-]{1,128}")

log = logging.getLogger(__name__)


class Catalog:
    def __init__(self, manifest: Any, registry: ScriptRegistry, texts: ScriptTexts, *,
                 ttl: float = TTL, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.manifest = manifest
        self.registry = registry
        self.texts = texts
        self.ttl = ttl
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stored: dict[str, Workflow] = {}
        self._read_at: float | None = None

    def __getattr__(self, name: str) -> Any:
        # Everything else (backends, webhooks, source, capable ...) is the manifest's.
        return getattr(self.manifest, name)

    @property
    def workflows(self) -> Mapping[str, Any]:
        return _Workflows(self)

    # -- scripts ----------------------------------------------------------------------

    def shell_backend(self, capability: str = SHELL) -> str:
        """The first backend that has `capability`, or UsageError saying how to add one."""
        capable = getattr(self.manifest, "capable", None)
        name = capable(capability) if capable is not None else None
        if name is None:
            raise UsageError(f"no backend has the {capability!r} capability: add "
                             f"`capabilities: [{capability}]` to a backend that runs a "
                             "script host (orchestrator dev serves one)")
        return str(name)

    def script(self, name: str, text: str, **fields: Any) -> Workflow:
        """A script workflow `name` running `text` (not stored): `fields` are what a
        manifest workflow may have beside it (on, schedule, throttle, ...)."""
        doc = {"script": name, "backend": self.shell_backend(), **fields}
        try:
            wf = Workflow.model_validate(doc)
        except ValueError as exc:
            raise UsageError(f"script {name!r}: {exc}") from None
        return wf.with_script(text, digest(text))

    def register(self, name: str, text: str, *, on: list[dict[str, Any]] | None = None,
                 schedule: dict[str, Any] | None = None) -> ScriptEntry:
        """Store script workflow `name` (replacing one of that name)."""
        if not WORKFLOW_NAME.fullmatch(name) or set(name) == {"."}:
            raise UsageError(f"script name {name!r}: letters, digits and . _ ~ - only,"
                             " at most 128")
        if name in self.manifest.workflows:
            raise Conflict("conflict", f"workflow {name!r} is the manifest's: a stored "
                           "script may not take its name")
        check_script(text, f"script {name!r}")
        fields: dict[str, Any] = {}
        if on:
            fields["on"] = on
        if schedule:
            fields["schedule"] = schedule
        self.script(name, text, **fields)  # refuses what a manifest would
        sha = self.texts.put(text)
        entry = self.registry.put(ScriptEntry(name, sha, tuple(on or ()), schedule))
        with self._lock:
            self._read_at = None
        return entry

    def unregister(self, name: str) -> None:
        if not self.registry.delete(name):
            raise NotFound(f"no stored script {name!r}")
        with self._lock:
            self._read_at = None

    def stored(self) -> dict[str, Workflow]:
        with self._lock:
            fresh = (self._read_at is not None
                     and self._monotonic() - self._read_at < self.ttl)
            if fresh:
                return self._stored
        out: dict[str, Workflow] = {}
        for entry in self.registry.all():
            fields: dict[str, Any] = {}
            if entry.on:
                fields["on"] = list(entry.on)
            if entry.schedule:
                fields["schedule"] = entry.schedule
            try:
                out[entry.name] = self.script(entry.name, self.texts.get(entry.sha256),
                                              **fields)
            except UsageError:
                continue  # no shell backend any more: nothing could run it
            except OrchestratorError as exc:  # its text unreadable: the others still serve
                log.warning("stored script %r: its text %s could not be read: %s",
                            entry.name, entry.sha256[:12], exc)
                continue
        with self._lock:
            self._stored, self._read_at = out, self._monotonic()
        return out

    def declares(self, name: str) -> bool:
        """Whether workflow `name` is the stack's: the manifest's, an activity's or a
        stored script's; not an ad-hoc script's (`script`, named by its client)."""
        return (name in self.manifest.workflows or name.startswith(ACTIVITY + ".")
                or name in self.stored())

    def why_missing(self, name: str) -> str | None:
        """Why workflow `name` is not in the catalog, when there is more to say than
        that it is not defined: an activity no backend can run."""
        if name.startswith(ACTIVITY + "."):
            try:
                self.shell_backend(name[len(ACTIVITY) + 1:])
            except UsageError as exc:
                return exc.message
        return None

    def activity(self, capability: str) -> Workflow:
        return Workflow.model_validate({"backend": self.shell_backend(capability),
                                        "workflow": ACTIVITY})


class _Workflows(Mapping[str, Any]):
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def __getitem__(self, name: str) -> Any:
        wf = self.catalog.manifest.workflows.get(name)
        if wf is not None:
            return wf
        if name.startswith(ACTIVITY + "."):
            try:
                return self.catalog.activity(name[len(ACTIVITY) + 1:])
            except UsageError:
                raise KeyError(name) from None
        return self.catalog.stored()[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.catalog.manifest.workflows
        yield from (n for n in self.catalog.stored() if n not in self.catalog.manifest.workflows)

    def __len__(self) -> int:
        return sum(1 for _ in self)
