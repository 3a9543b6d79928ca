"""The driver's moves between calls, decided without I/O: whether a recorded wait still
stands, what must be looked up before `resolve` can tell whether it is over, when a run
is over its journal cap, when calls that record nothing become a fault, and when a
released run is due and when the sweeper looks at it. runners/durable/driver.py carries them
out (reads, writes, calls); it decides nothing of its own.

Each function returns a value the caller acts on, as engine/transitions.py does for the
steps of a DAG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from functions.sdk.protocol import JournalEntry, WaitKind
from orchestrator.engine.durable import Continue, Next
from orchestrator.engine.durable_scopes import JournalView
from orchestrator.engine.durable_waits import Waiting
from orchestrator.errors import Code, error_doc

__all__ = [
    "HANDOFF_BEFORE",
    "IDLE_CALLS",
    "LOST_POKE_CHECK",
    "TIMER_REACH",
    "Look",
    "Release",
    "idle_calls",
    "look_for",
    "new_entries",
    "over_cap",
    "release_of",
    "stands",
]

# Waits ending within this many seconds get a timer message now; later ones are the
# sweeper's to hand to the queue when they come within reach (SQS delays <= 15 min).
TIMER_REACH = 900.0
# The sweeper hands a far wait to the queue this long before it ends.
HANDOFF_BEFORE = 600.0
# Calls in a row that record nothing yet ask to go on: a protocol fault, not progress.
IDLE_CALLS = 3
# A run waiting only for a poke (a signal, an event, a hook, its branches, a child) is
# looked at after this long anyway: a poke lost with its process costs one look.
LOST_POKE_CHECK = 3600.0


class Look(StrEnum):
    """What the driver looks up before `resolve` decides a wait (NOTHING: the clock
    alone decides)."""

    NOTHING = "nothing"
    TAKE_SIGNAL = "take_signal"      # the oldest signal queued under the wait's name
    REGISTER_EVENT = "register_event"  # a fresh event wait registers, then looks
    FIND_EVENT = "find_event"        # the earliest matching event in the wait's window
    CREATE_HOOK = "create_hook"      # the hook (idempotent), which tells when it fired
    START_CHILD = "start_child"      # a fresh call or any spawn starts its child (once)
    CHILD = "child"                  # the child of a call, once it has ended
    OPEN_PARALLEL = "open_parallel"  # a fresh parallel: its aggregate and first branches
    PARALLEL = "parallel"            # the parallel's aggregate
    APPROVAL = "approval"            # the gate (opened once), timed out past its deadline
    STATE = "state"                  # a state cell's operation, done with its entry
    LOCK = "lock"                    # take the lock if it is this run's turn, or let it go


def stands(waiting: Waiting, view: JournalView) -> bool:
    """Whether a wait recorded on the driver row still stands: one whose place the
    journal holds already was resolved (a stale record of a past wait). A mismatch
    stands until an operator resumes or resets the run."""
    return waiting.kind is WaitKind.MISMATCH or not view.has(waiting.scope, waiting.pos)


def look_for(waiting: Waiting, fresh: bool) -> tuple[Look, ...]:
    """What to look up, in order, for `waiting`; `fresh`: the wait was just reported by
    a call (not found on the row), so it registers or starts what it waits for."""
    kind = waiting.kind
    if kind is WaitKind.SIGNAL:
        return (Look.TAKE_SIGNAL,)
    if kind is WaitKind.EVENT:
        return (Look.REGISTER_EVENT, Look.FIND_EVENT) if fresh else (Look.FIND_EVENT,)
    if kind is WaitKind.HOOK:
        return (Look.CREATE_HOOK,)
    if kind is WaitKind.SPAWN:
        return (Look.START_CHILD,)
    if kind is WaitKind.CALL:
        return (Look.START_CHILD, Look.CHILD) if fresh else (Look.CHILD,)
    if kind is WaitKind.PARALLEL:
        return (Look.OPEN_PARALLEL, Look.PARALLEL) if fresh else (Look.PARALLEL,)
    if kind is WaitKind.APPROVAL:
        return (Look.APPROVAL,)
    if kind is WaitKind.STATE:
        return (Look.STATE,)
    if kind is WaitKind.LOCK:
        return (Look.LOCK,)
    return (Look.NOTHING,)


def over_cap(entries: int, cap: int) -> dict[str, Any] | None:
    """The run's error once its journal holds more than `cap` entries (None: within)."""
    if entries <= cap:
        return None
    return error_doc(
        Code.JOURNAL_TOO_LARGE,
        f"the run recorded {entries} operations, over the cap of {cap}: split the work into "
        "child runs (ctx.call), or start a fresh run with what this one has (ctx.spawn "
        "then return)")


def idle_calls(idle: int, committed: int, after: Next, workflow: str
               ) -> tuple[int, dict[str, Any] | None]:
    """Count a call that committed nothing and asks to go on; past IDLE_CALLS in a row
    they would loop, and the call fails as a protocol fault (the error, retried)."""
    idle = idle + 1 if not committed and isinstance(after, Continue) else 0
    if idle < IDLE_CALLS:
        return idle, None
    return idle, error_doc(Code.BAD_ANSWER, f"workflow {workflow}: {idle} calls in a row "
                           "recorded nothing and reported no wait")


@dataclass(frozen=True)
class Release:
    """A released run: `due` is when it may run again (None: only a poke brings it
    back), `wake` when the sweeper looks at it; `dispatch` sends it to the queue now (a
    worker's time ran out), `timer` sends a delayed message for `due`."""

    due: float | None
    wake: float
    dispatch: bool = False
    timer: bool = False


def release_of(waiting: Waiting, now: float, *, redispatch_after: float,
               send: bool = False) -> Release:
    """When a run released to wait comes back, and by what."""
    until = waiting.until
    if send:
        return Release(now, now + redispatch_after, dispatch=True)
    if until is None:
        # A poke brings it back; the wake only repairs a poke lost with its process.
        return Release(None, now + LOST_POKE_CHECK)
    if until - now <= TIMER_REACH:
        return Release(until, until + redispatch_after, timer=True)
    # Far off: the sweeper hands it to the queue when it comes within reach.
    return Release(until, until - HANDOFF_BEFORE)


def new_entries(view: JournalView, entries: Sequence[JournalEntry]
                ) -> tuple[list[JournalEntry], tuple[JournalEntry, dict[str, Any]] | None]:
    """The checkpoints of a batch still to commit, in order. A line sent again (the
    same entry at a place the view or the batch holds already) is dropped. A different
    entry at a held place ends the batch there: `(it, the one held)`, which the caller
    treats as a conflict (the call replays what is committed)."""
    out: list[JournalEntry] = []
    seen: dict[tuple[str, int], JournalEntry] = {}
    for entry in entries:
        place = (entry.scope, entry.pos)
        committed = view.at(*place)
        held = committed if committed is not None else (
            seen[place].doc() if place in seen else None)
        if held is None:
            seen[place] = entry
            out.append(entry)
        elif held != entry.doc():
            return out, (entry, held)
    return out, None
