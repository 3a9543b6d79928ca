"""A durable run's journal as its followers read it (GET /runs/{id}, `show`, watch),
kept per run and brought up to date with what changed, not read whole on every look.

Entries are written once and never change while the run lives, so a follower keeps those
it has read and asks only for the rest:
- the top scope's entries after the last one it has (one query: the top scope is
  sequential, its keys grow with its positions and sort before every branch's);
- the branches of a parallel operation that may still be running: the one at the top
  scope's frontier (the next position), whose own entry is recorded only once all its
  branches ended (one query of its key prefix, nested scopes included);
- once, the branches of each parallel whose own entry has just appeared (their last
  entries may have landed after the previous look).

A look costs two queries and what changed (plus the running parallel's entries), where
reading the journal whole cost every entry on every look: a poller of a 10,000-step run
read 2 MB each time. A reset forgets entries: a change of the run row's history (a reset,
a resume, a pause) drops what is kept for that run. Runs are kept least recently looked
at first out.

The follower also keeps each top-scope entry rendered by its `render` (`look`): what a look
sends of a long run is the rendering it kept, joined, and what changed, rendered now,
where rendering every entry again took a poller of a 10,000-step run 20-30 ms a look,
while the interpreter's lock was the run's own workers' too (a 10,000-step chain polled
every 0.5 s took 25 to 30% longer than one not polled)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.store.journal import JOURNAL, entry_key

__all__ = ["JournalFollower", "Look"]

Reader = Callable[..., list[dict[str, Any]]]


@dataclass
class _Kept:
    version: Any
    top: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> entry
    branches: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)  # pos ->
    last_top: str | None = None
    head: list[str] = field(default_factory=list)  # the top's entries rendered, in order

    def entries(self) -> list[dict[str, Any]]:
        out = list(self.top.values())
        for kept in self.branches.values():
            out.extend(kept.values())
        return out


@dataclass(frozen=True)
class Look:
    """A run's journal as a look found it: `head`, its top scope's entries rendered, in
    order; `rest`, every other entry (parallel branches'), in no particular order."""

    head: list[str]
    top: Mapping[str, Any]  # the top scope's entries by key (read only)
    rest: list[dict[str, Any]]

    def shown(self, scope: str, pos: Any) -> bool:
        """Whether an entry at (`scope`, `pos`) is in `head`."""
        return scope == "" and isinstance(pos, int) and entry_key("", pos) in self.top


class JournalFollower:
    """`read(run_id, version)`: the run's journal entries (in no particular order);
    `version` is anything that changes when entries may be forgotten (a reset).
    `look(run_id, version)`: the same, the top scope's entries rendered by `render`."""

    def __init__(self, reader: Reader, render: Callable[[dict[str, Any]], str],
                 keep: int = 64) -> None:
        self.reader = reader
        self.keep = keep
        self.render = render
        self._runs: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, run_id: str, version: Any) -> list[dict[str, Any]]:
        kept = self._kept(run_id, version)
        return [_bare(e) for e in kept.entries()]

    def look(self, run_id: str, version: Any) -> Look:
        kept = self._kept(run_id, version)
        rest = [_bare(e) for pos in kept.branches.values() for e in pos.values()]
        return Look(list(kept.head), kept.top, rest)

    def _kept(self, run_id: str, version: Any) -> _Kept:
        with self._lock:
            kept = self._runs.pop(run_id, None)
        if kept is None or kept.version != version:
            kept = _Kept(version)
        self._refresh(run_id, kept)
        with self._lock:
            self._runs[run_id] = kept
            while len(self._runs) > self.keep:
                self._runs.popitem(last=False)
        return kept

    def _refresh(self, run_id: str, kept: _Kept) -> None:
        new = self.reader(run_id, after=kept.last_top)
        for entry in new:
            kept.top[entry["_key"]] = entry
            kept.last_top = entry["_key"]
            kept.head.append(self.render(_bare(entry)))  # (read in the keys' order)
            if entry.get("kind") == "parallel":
                # Ended: its branches are final now; read them once more, whole.
                self._branches(run_id, kept, int(entry["pos"]))
        # The next position of the top scope (entries are committed in order).
        frontier = max((int(e["pos"]) for e in kept.top.values()), default=-1) + 1
        self._branches(run_id, kept, frontier)

    def _branches(self, run_id: str, kept: _Kept, pos: int) -> None:
        found = self.reader(run_id, prefix=f"{JOURNAL}{pos}:")
        if found:
            kept.branches[pos] = {e["_key"]: e for e in found}
        else:
            kept.branches.pop(pos, None)


def _bare(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as read, without the sort key the follower keeps with it."""
    return {k: v for k, v in entry.items() if k != "_key"}
