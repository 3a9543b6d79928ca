"""Moving open runs between versions: check them (check.py), migrate the compatible
ones, make a version current once every open run was checked against it (a deploy's
promotion), and retire a version no run is pinned to.

A move is one transaction guarded by the run's driver row as its check found it (not
held, not claimed since), so the journal a new version replays is the one checked. A
run that was advancing, or moved on between its check and its move, is checked again,
a few rounds within `settle` seconds; one still busy then stays where it is (pinned to
a live version: nothing is stranded) and is reported `busy`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.adapters.published import published
from orchestrator.adapters.store import Store
from orchestrator.engine.definition import DRIVER
from orchestrator.errors import (
    Code,
    ConditionFailed,
    Conflict,
    NotFound,
    OrchestratorError,
    UsageError,
)
from orchestrator.services.versions.check import (
    Checker,
    Target,
    Verdict,
    open_durable,
    open_scripts,
)
from orchestrator.services.versions.registry import Versions, digest_label

__all__ = ["Moves"]

# How long a migration keeps checking again a run that was busy (advancing) when checked.
SETTLE = 10.0
# How often it looks again, meanwhile.
RECHECK_EVERY = 0.2


class Moves:
    def __init__(self, store: Store, versions: Versions, checker: Checker,
                 clock: Callable[[], float], *, secrets: Mapping[str, str | None],
                 cancel: Callable[[str, str], Any],
                 resume: Callable[[str], Any] | None = None,
                 script_host: Callable[[str], Target] | None = None,
                 settle: float = SETTLE, sleep: Callable[[float], object] = time.sleep
                 ) -> None:
        self.store = store
        self.versions = versions
        self.checker = checker
        self.clock = clock
        self.secrets = secrets
        self.cancel = cancel
        # A run paused because its version went away goes on once moved to a live one.
        self.resume = resume
        # A script's new text -> the target its runs are checked at (the shell backend).
        self.script_host = script_host
        self.settle = settle
        self.sleep = sleep

    def backend_of(self, backend: str | None) -> str:
        """`backend`, or the stack's one backend with versions when none is named."""
        if backend is not None:
            if backend not in self.secrets:
                raise NotFound(f"no backend {backend!r} (backends: "
                               f"{', '.join(sorted(self.secrets))})")
            return backend
        versioned = [name for name in self.secrets if self.versions.registry(name).live]
        if len(versioned) != 1:
            raise UsageError("name the backend: " + (
                f"{', '.join(sorted(versioned))} have versions" if versioned
                else "no backend has versions registered"))
        return versioned[0]

    def target(self, backend: str, label: str) -> Target:
        url = self.versions.url_of(backend, label)
        if url is None:
            live = self.versions.registry(backend).live
            raise NotFound(f"backend {backend!r} has no live version {label!r} (live: "
                           f"{', '.join(sorted(live)) or 'none'})")
        return Target(url, self.secrets.get(backend), label)

    def check(self, backend: str, target: Target, *, workflow: str | None = None,
              version: str | None = None) -> list[Verdict]:
        """Every open durable run of `backend` (of `workflow`, on `version`) checked."""
        runs = list(open_durable(self.store, self.clock(), backend=backend,
                                 workflow=workflow, version=version))
        return self.checker.check_all(runs, target)

    def migrate(self, backend: str, to: str, *, workflow: str | None = None,
                version: str | None = None,
                verdicts: list[Verdict] | None = None) -> dict[str, Any]:
        """Move the compatible open runs (of `workflow`, on `version`) to `to`."""
        target = self.target(backend, to)
        if verdicts is None:
            verdicts = self.check(backend, target, workflow=workflow, version=version)
        moved: list[str] = []
        busy: list[Verdict] = []
        settled = {v.run_id: v for v in verdicts}
        pending = [v for v in verdicts if v.compatible and v.version != to]
        deadline = time.monotonic() + self.settle
        while pending:
            busy = [v for v in pending if v.held or not self._move(v, backend, to)]
            moved.extend(v.run_id for v in pending if v not in busy)
            if not busy or time.monotonic() >= deadline:
                break
            self.sleep(RECHECK_EVERY)  # a run that was advancing: look at it again
            again = self.store.runs.get_runs([v.run_id for v in busy], self.clock())
            fresh = self.checker.check_all(
                [run for run in again.values() if not run.status.terminal], target)
            settled.update({v.run_id: v for v in fresh})
            pending = [v for v in fresh if v.compatible and v.version != to]
            busy = []
        final = [settled[rid] for rid in settled]
        for verdict in final:  # moved before, its resume lost (a crash between the two)
            if verdict.version == to and verdict.paused == Code.VERSION_GONE:
                self._resume(verdict.run_id)
        return {
            "backend": backend, "to": to, "moved": moved,
            "already": [v.run_id for v in final if v.compatible and v.version == to],
            "busy": [v.run_id for v in busy],
            "diverging": [v.doc() for v in final if v.status == "diverging"],
            "unchecked": [v.doc() for v in final if v.status == "unchecked"],
        }

    def _move(self, verdict: Verdict, backend: str, to: str) -> bool:
        try:
            self.store.versions.move_run(verdict.run_id, DRIVER, backend, verdict.version, to,
                                         verdict.claimed_at, self.clock())
        except ConditionFailed:
            return False  # it moved on (or ended) since its check, or `to` is retiring
        if verdict.paused == Code.VERSION_GONE:
            self._resume(verdict.run_id)
        return True

    def _resume(self, run_id: str) -> None:
        """A run paused because its version went away goes on, once on a live one."""
        if self.resume is None:
            return
        try:
            self.resume(run_id)
        except OrchestratorError:  # held or ended meanwhile: the next migrate resumes it
            pass

    def promote(self, backend: str, label: str, *, pin_incompatible: bool = False,
                verdicts: list[Verdict] | None = None) -> dict[str, Any]:
        """Make `label` current once every open run was checked against it: all
        compatible, they all move to it; any diverging (or not checked), nothing moves
        and the current version stays, unless `pin_incompatible`: the compatible ones
        move, the others stay pinned where they are. `verdicts`: the check made already
        (a deploy checks every backend first, then promotes each)."""
        target = self.target(backend, label)
        registry = self.versions.registry(backend)
        if verdicts is None:
            verdicts = self.check(backend, target)
        bad = [v for v in verdicts if not v.compatible]
        report: dict[str, Any] = {
            "backend": backend, "version": label, "was": registry.current,
            "checked": len(verdicts), "compatible": len(verdicts) - len(bad),
            "diverging": [v.doc() for v in bad if v.status == "diverging"],
            "unchecked": [v.doc() for v in bad if v.status == "unchecked"]}
        # A promotion of the version that is current already is a repeat (its first
        # send landed and its answer was lost): promoted, and the runs that diverge stay
        # pinned where they are, as the first one left them.
        if bad and not pin_incompatible and registry.current != label:
            return {**report, "current": registry.current, "promoted": False}
        if registry.current != label:
            self.versions.make_current(backend, label, expected=registry.current)
        moves = self.migrate(backend, label, verdicts=verdicts)
        # A run busy at first and found diverging (or not checked) when looked at again
        # stays where it is too.
        later = [v for v in moves["diverging"] + moves["unchecked"]
                 if v["run_id"] not in {b.run_id for b in bad}]
        return {**report, "current": label, "promoted": True, "moved": moves["moved"],
                "busy": moves["busy"], "pinned": [v.run_id for v in bad]
                + [v["run_id"] for v in later],
                "diverging": report["diverging"] + [v for v in later
                                                    if v["status"] == "diverging"],
                "unchecked": report["unchecked"] + [v for v in later
                                                    if v["status"] == "unchecked"]}

    def pinned(self, backend: str, label: str) -> list[str]:
        """The open runs pinned to `label` that may still call it (a cancelled one
        calls nothing more)."""
        return [run.run_id for run in open_durable(self.store, self.clock(),
                                                   backend=backend, version=label)
                if not run.kill_requested]

    def retire(self, backend: str, label: str, *, migrate: bool = False,
               cancel: bool = False) -> dict[str, Any]:
        """Retire `label`: refused (409 `version_pinned`, naming how many) while open
        runs are pinned to it, unless `migrate` (to the current version, the compatible
        ones) or `cancel` moves them off it first. Marked first, so no run starts on it
        while its runs are counted."""
        registry = self.versions.registry(backend)
        if label not in registry.live:
            raise NotFound(f"backend {backend!r} has no live version {label!r} (live: "
                           f"{', '.join(sorted(registry.live)) or 'none'})")
        if label == registry.current:
            raise Conflict(Code.CONFLICT, f"version {label!r} is {backend}'s current version:"
                           " make another current first")
        mark = self.clock()
        try:
            self.store.versions.mark_retiring(backend, label, mark)
        except ConditionFailed:
            raise Conflict(Code.CONFLICT, f"version {label!r} of {backend!r} is current or"
                           " being retired already") from None
        report: dict[str, Any] = {"backend": backend, "version": label}
        try:
            if migrate and registry.current is not None:
                report["migration"] = self.migrate(backend, registry.current, version=label)
            if cancel:
                report["cancelled"] = [run_id for run_id in self.pinned(backend, label)
                                       if self._cancelled(run_id, label)]
            pinned = self.pinned(backend, label)
            if pinned:
                raise Conflict(Code.VERSION_PINNED, (
                    f"{len(pinned)} open run{'s are' if len(pinned) != 1 else ' is'} pinned"
                    f" to version {label!r} of {backend!r}: migrate them (--migrate) or"
                    f" cancel them (--cancel), or wait for them to end"))
            self._remove(backend, label, mark)
        except BaseException:
            self.store.versions.unmark_retiring(backend, label, mark)
            raise
        self.versions.forget(backend, label)
        return {**report, "retired": True}

    def _cancelled(self, run_id: str, label: str) -> bool:
        """Cancel one run pinned to `label`; False if it was refused (it is counted as
        still pinned, below) or had ended."""
        try:
            return bool(self.cancel(run_id, f"version {label} retired"))
        except OrchestratorError:
            return False

    def _remove(self, backend: str, label: str, mark: float) -> None:
        """Retire the marked version; refused if a run still pinned to it called it
        since the mark. The uses noted by runs that ended or moved off meanwhile (a
        migration's own runs, claimed before their move) are dropped first."""
        for last in (False, True):
            try:
                self.store.versions.remove(backend, label, mark, self.clock())
                return
            except ConditionFailed:
                users = self.store.versions.users(backend, label)
                runs = self.store.runs.get_runs(sorted(users), self.clock()).values()
                still = [r.run_id for r in runs
                         if not r.status.terminal and r.version == label]
                if still or last or not users:
                    raise Conflict(Code.VERSION_PINNED, (
                        f"a run started on version {label!r} of {backend!r} while it was"
                        f" being retired, and has called it ({', '.join(still) or 'now'}):"
                        " it stays live")) from None
                self.store.versions.forget_users(backend, label, mark, users)

    def listing(self, backend: str | None = None) -> list[dict[str, Any]]:
        """Each backend's live versions (or `backend`'s), with the open runs pinned to
        each (one pass over the open durable runs)."""
        names = [self.backend_of(backend)] if backend is not None else sorted(self.secrets)
        pinned: dict[tuple[str, str | None], int] = {}
        for run in open_durable(self.store, self.clock()):
            at = run.definition.steps[0].backend
            pinned[(at, run.version)] = pinned.get((at, run.version), 0) + 1
        out = []
        for name in names:
            registry = self.versions.registry(name)
            if not registry.live and backend is None:
                continue
            out.append({
                "backend": name, "current": registry.current,
                "versions": [{**v.doc(), "current": v.label == registry.current,
                              "open_runs": pinned.get((name, v.label), 0)}
                             for v in sorted(registry.live.values(),
                                             key=lambda v: v.registered_at)],
                "unversioned_runs": pinned.get((name, None), 0)})
        return out

    def register(self, backend: str, url: str, label: str | None = None) -> dict[str, Any]:
        """Register the code at `url` as a version of `backend` (not current): its
        label given, or a hash of what it publishes (which also proves it is a
        functions app)."""
        name = self.backend_of(backend)
        doc = published(url)
        label = label or digest_label(doc)
        new = self.versions.register(name, label, url, digest_label(doc))
        return {"backend": name, "version": label, "url": url.rstrip("/"), "new": new}

    def require_app(self, url: str) -> None:
        """UsageError (naming the URL) unless a functions app answers at `url`."""
        published(url)

    def check_script(self, workflow: str, text: str) -> tuple[Target, list[Verdict]]:
        """The open runs of script workflow `workflow` checked against a new `text`
        (each stays on the text it started on whatever the check says: this tells
        before its name is given the new text whether runs like them would pause)."""
        if self.script_host is None:
            raise UsageError("no backend here runs scripts (capability shell)")
        target = self.script_host(text)
        runs = list(open_scripts(self.store, self.clock(), workflow))
        return target, self.checker.check_all(runs, target)
