"""`orchestrator dev --reload`: new code served beside the old, locally as on AWS.

The functions app's source (the `.py` files under its module's folder) is looked at
twice a second. On a change, the new code is served in a process of its own
(serve_functions.py) beside every version still live, registered as a version of the
backend it serves (`r<n>-<hash of the source>`), and every open durable run is checked
against it (services/versions/): the result is printed, the new version becomes current
for new runs, the compatible runs move to it, and the others stay pinned to their
version, which keeps being served. A version with no run left pinned to it is retired
and its process stopped.

The source is polled (a stat of each file) rather than watched with a notification
library: a few dozen stats twice a second cost nothing, and a compiled dependency would
ride in every Lambda package for a development-only feature."""

from __future__ import annotations

import hashlib
import logging
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.settings import environment

__all__ = ["POLL_EVERY", "Reloader", "reloading", "source_root"]

log = logging.getLogger("orchestrator.dev")

POLL_EVERY = 0.5
# How often it looks for versions to retire (a pass over the open runs).
RETIRE_EVERY = 5.0
# How long a new version's process may take to serve.
READY_WITHIN = 30.0


def source_root(spec: str) -> Path:
    """The folder whose `.py` files are the functions app's code (its module's)."""
    import importlib.util

    module = spec.partition(":")[0]
    found = importlib.util.find_spec(module)
    if found is None or not found.origin:
        raise UsageError(f"--reload: cannot find the source of {module}")
    return Path(found.origin).resolve().parent


def _snapshot(root: Path) -> dict[str, tuple[float, int]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            st = path.stat()
        except OSError:
            continue  # removed meanwhile
        out[str(path)] = (st.st_mtime, st.st_size)
    return out


def _source_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(_snapshot(root)):
        try:
            digest.update(name.encode() + b"\0" + Path(name).read_bytes() + b"\0")
        except OSError:
            continue
    return digest.hexdigest()[:8]


@dataclass
class Served:
    label: str
    url: str
    stop: Callable[[], None]


@dataclass
class Reloader:
    """Serves each version of the functions app and moves the stack to the newest."""

    spec: str
    backend: str
    host: str
    env: dict[str, str]
    versions: Any  # services.versions.Versions
    moves: Callable[[], Any]  # () -> services.versions.Moves
    echo: Callable[[str], None]
    root: Path = field(default_factory=Path)
    served: dict[str, Served] = field(default_factory=dict)
    first: str = ""
    session: str = field(default_factory=lambda: secrets.token_hex(2))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _n: int = 0

    def start(self, first: Served) -> None:
        """Watch from now on; `first` is the version the stack started with."""
        self.root = source_root(self.spec)
        self.served[first.label] = first
        self.first = first.label
        self._thread = threading.Thread(target=self._watch, name="reload", daemon=True)
        self._thread.start()
        self.echo(f"reload     watching {self.root} (*.py): a change is served beside"
                  f" the running code as a new version of {self.backend}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        for label, served in list(self.served.items()):
            if label != self.first:  # the stack stops the one it started with
                served.stop()

    def _watch(self) -> None:
        seen = _snapshot(self.root)
        looked = time.monotonic()
        while not self._stop.wait(POLL_EVERY):
            now = _snapshot(self.root)
            try:
                if now != seen:
                    seen = now
                    self.reload()
                if len(self.served) > 1 and time.monotonic() - looked >= RETIRE_EVERY:
                    looked = time.monotonic()
                    self.retire_idle()
            except OrchestratorError as exc:
                self.echo(f"reload     {exc.message}")
            except Exception:  # the stack goes on with the code it has
                log.exception("reload failed")

    def reload(self) -> str:
        """Serve the code as it is now as a new version, check every open run against
        it, make it current; its label."""
        self._n += 1
        # The session's id too: labels are never used again, and tables kept from an
        # earlier session (--no-emulator) hold its labels.
        label = f"r{self._n}-{_source_hash(self.root)}-{self.session}"
        served = self._serve(label)
        try:
            self.versions.register(self.backend, label, served.url)
        except BaseException:
            served.stop()
            raise
        self.served[label] = served
        report = self.moves().promote(self.backend, label, pin_incompatible=True)
        pinned = len(report["pinned"])
        self.echo(f"reload     {label} at {served.url}: checked {report['checked']} open"
                  f" runs, {report['compatible']} compatible (moved {len(report['moved'])})"
                  + (f", {pinned} diverging stay pinned to their version" if pinned else "")
                  + f"; new runs start on {label}")
        for verdict in report["diverging"]:
            rec, iss = verdict.get("recorded") or {}, verdict.get("issued") or {}
            self.echo(f"           {verdict['run_id']} (on {verdict['version']}) diverges at"
                      f" position {(verdict.get('position') or {}).get('pos')}: recorded"
                      f" {rec.get('kind')} {rec.get('name')!r}, issued {iss.get('kind')}"
                      f" {iss.get('name')!r}")
        return label

    def retire_idle(self) -> None:
        """Retire each served version that is not current and has no run pinned to it."""
        moves = self.moves()
        current = self.versions.current(self.backend)
        for label in list(self.served):
            if label == current or moves.pinned(self.backend, label):
                continue
            try:
                moves.retire(self.backend, label)
            except OrchestratorError as exc:  # a run came to it meanwhile: next time
                log.info("reload: %s not retired: %s", label, exc.message)
                continue
            served = self.served.pop(label)
            if label != self.first:
                served.stop()
            self.echo(f"reload     {label} retired: no run is pinned to it")

    def _serve(self, label: str) -> Served:
        env = {**environment(), **self.env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli.serve_functions", self.spec,
             "--host", self.host],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        line = _first_line(proc, READY_WITHIN)
        if not line.startswith("serving "):
            proc.kill()
            raise UsageError(f"--reload: the new code of {self.spec} did not start"
                             f" ({line.strip() or 'no answer'}): the running version stays")

        def stop() -> None:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

        return Served(label, line.split()[1], stop)


def reloading(spec: str | None, functions_url: str | None, lambda_mode: bool, host: str,
              rt: Any, env: dict[str, str], echo: Callable[[str], None]) -> Reloader:
    """The reloader of a local stack (`rt`) serving the functions app `spec` at
    `functions_url`, started; UsageError if it cannot reload."""
    if not spec or lambda_mode or not functions_url:
        raise UsageError("--reload needs the functions app served here (--functions"
                         " MODULE:FACTORY), and not --lambda")
    url = functions_url.rstrip("/")
    backend = next((name for name, b in rt.manifest.backends.items()
                    if b.url.rstrip("/") == url), None)
    label = rt.versions.current(backend) if backend is not None else None
    if backend is None or label is None:
        raise UsageError(f"--reload: no backend of the manifest serving durable workflows"
                         f" is at {url} (give it url: ${{FUNCTIONS_URL}})")
    reloader = Reloader(spec, backend, host,
                        {k: env[k] for k in ("FUNCTIONS_SECRET",) if k in env},
                        rt.versions, rt.moves, echo)
    reloader.start(Served(label, url, lambda: None))
    return reloader


def _first_line(proc: subprocess.Popen[str], within: float) -> str:
    """The process's first line of output ("" if it exits or says nothing in time)."""
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()  # type: ignore[union-attr]
                                                        ), daemon=True)
    reader.start()
    reader.join(within)
    return out[0] if out else ""
