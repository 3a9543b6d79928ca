"""A durable run's scopes and journal as a worker holds them: the driver rows (the root
driver `DRIVER`, a parallel branch's `$run/<scope>`), a branch's scope and index, which
branches a parallel operation starts first, which scopes' entries a call sees
(`in_view`), and the journal read into its places (`JournalView`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.engine.definition import DRIVER

if TYPE_CHECKING:
    from orchestrator.engine.records import StepRecord

__all__ = [
    "RESULT_POS",
    "JournalView",
    "branch_index",
    "branch_scope",
    "first_branches",
    "first_holder",
    "in_view",
    "is_driver",
    "parent_of",
    "row_of",
    "scope_of",
]

# A parallel branch's result sits in its scope at this position (functions/sdk/durable).
RESULT_POS = 99_999_999


def is_driver(step: str) -> bool:
    """The root driver, or a parallel branch's (`$run/<scope>`)."""
    return step == DRIVER or step.startswith(DRIVER + "/")


def first_holder(row: StepRecord) -> bool:
    """Whether the claim that gave `row` was the first ever of a run's root driver: its
    journal is then empty, and need not be read. Only a holder of the root driver writes
    entries, and only after a claim. The row's history says so: made ready, then claimed
    once, nothing else (a wait rewrites it, a retry, an expired lease or a second claim
    adds to it). Not by the claims' times: two claims in one millisecond, or under a
    clock that stands still (a test's), carry the same. A branch's driver reads its
    parent's entries."""
    return row.step == DRIVER and [h.get("type") for h in row.history] == [
        "step.ready", "step.started"]


def scope_of(step: str) -> str:
    """The scope a driver row advances."""
    return step[len(DRIVER) + 1:] if step.startswith(DRIVER + "/") else ""


def row_of(scope: str) -> str:
    """The driver row of a scope."""
    return f"{DRIVER}/{scope}" if scope else DRIVER


def parent_of(scope: str) -> str:
    return scope.rsplit("/", 1)[0] if "/" in scope else ""


def branch_scope(parent: str, pos: int, index: int) -> str:
    """Branch `index` of the parallel operation at `pos` of `parent` (as the SDK names
    it)."""
    return f"{parent}/{pos}:{index}" if parent else f"{pos}:{index}"


def branch_index(scope: str) -> int:
    return int(scope.rsplit("/", 1)[-1].split(":", 1)[1])


def first_branches(total: int, limit: int, done: set[int]) -> tuple[list[int], int]:
    """The branches to start when a parallel operation begins (the first `limit` not
    done already: a branch whose code returned at once holds no slot), and the cursor:
    the next branch to start. Each branch's end then starts the branch at the cursor,
    so at most `limit` are in flight and a free slot never waits for a slow branch."""
    out: list[int] = []
    j = 0
    while j < total and len(out) < limit:
        if j not in done:
            out.append(j)
        j += 1
    return out, j


def in_view(scope: str, target: str) -> bool:
    """Whether entries of `scope` matter to a call advancing `target`: its ancestors,
    itself and what is inside it."""
    return (not scope or scope == target or target.startswith(scope + "/")
            or scope.startswith(target + "/") or not target)


class JournalView:
    """A run's journal as a worker holds it while it advances the run: the entries in
    the order they were committed, their places, and the parallel branches whose result
    is recorded (a result entry, or a one-step branch's step marked `ends`)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]] = ()) -> None:
        self.entries: list[dict[str, Any]] = []
        self.places: dict[tuple[str, int], dict[str, Any]] = {}
        self.ended: set[str] = set()
        for entry in entries:
            self.add(entry)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Add a committed entry (one at a place already held is the same: ignored)."""
        doc = dict(entry)
        place = (str(doc.get("scope", "")), int(doc["pos"]))
        if place in self.places:
            return
        self.entries.append(doc)
        self.places[place] = doc
        if place[1] == RESULT_POS or doc.get("ends"):
            self.ended.add(place[0])

    def has(self, scope: str, pos: int) -> bool:
        return (scope, pos) in self.places

    def at(self, scope: str, pos: int) -> dict[str, Any] | None:
        """The entry committed at a place, if any."""
        return self.places.get((scope, pos))

    def __len__(self) -> int:
        return len(self.entries)
