"""A process's heartbeat: every `every` seconds (ORCH_HEARTBEAT_INTERVAL, 10 s) one write
of its item (adapters/store/heartbeats.py: kind, id, start, last beat, version, what it
handled since it started), then two `ADD`s per workflow of what the process counted
since the last beat (adapters/tallies.py -> adapters/store/stack_counts.py, and
adapters/store/hourly_counts.py for the hour's item).

Off the hot path: a long-lived process beats from a thread of its own (`start`); a
Lambda container, whose threads are frozen between invocations, beats at the end of an
invocation when a beat is due (`maybe`). A stack's idle process costs one write a beat.
A process that dies loses the counts of its last beat at most; one that stops cleanly
writes a last beat saying so (`stop`), so it leaves the alive list at once."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from orchestrator import __version__
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.heartbeats import Heartbeat as Beat
from orchestrator.adapters.tallies import Counts as Tally
from orchestrator.errors import OrchestratorError

__all__ = ["Heartbeat", "process_id"]

log = logging.getLogger("orchestrator.health")

Counts = Callable[[], Mapping[str, int]]


def process_id() -> str:
    """A process's id in the heartbeats: `host:pid:nonce` (the nonce tells apart two
    processes, or two beating parts of one, that share a host and pid)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _none() -> Mapping[str, int]:
    return {}


class Heartbeat:
    def __init__(self, store: Store, kind: str, process_id: str, *,
                 every: float, clock: Callable[[], float] = time.time,
                 handled: Counts = _none, in_flight: Counts = _none) -> None:
        self.store = store
        self.kind = kind
        self.id = process_id
        self.every = every
        self.clock = clock
        self.handled = handled
        self.in_flight = in_flight
        self.started_at = clock()
        self._last = float("-inf")  # monotonic time of the last beat
        self._lock = threading.Lock()

    def beat(self, *, stopped: bool = False) -> None:
        """Write this process's heartbeat and add what it counted to the stack's."""
        with self._lock:
            self._last = time.monotonic()
            # What was counted up to the beat's start is this beat's: a count taken
            # while its heartbeat is written waits for the next beat.
            taken = self.store.tallies.take()
            try:
                self.store.heartbeats.beat(Beat(
                    self.kind, self.id, self.started_at, self.clock(), self.every,
                    __version__, dict(self.handled()),
                    {k: v for k, v in self.in_flight().items() if v}, stopped))
            except Exception:
                self.store.tallies.give_back(taken)
                raise
            self.flush(taken)

    def flush(self, taken: dict[str, Tally] | None = None) -> None:
        """Add what this process counted since the last flush to the stack's counters:
        two requests per workflow it saw, one to its cumulative item (`/metrics`), one to
        its item of this hour (its page's charts). What the cumulative write could not
        store waits for the next beat; an hour's write that fails after it is not
        retried (that would count the cumulative item twice): the hour misses it."""
        if taken is None:
            taken = self.store.tallies.take()
        now = self.clock()
        for i, (workflow, counts) in enumerate(taken.items()):
            try:
                self.store.counts.add(workflow, counts)
            except Exception:
                self.store.tallies.give_back(dict(list(taken.items())[i:]))
                raise
            try:
                self.store.hourly.add(workflow, counts, now)
            except Exception:  # the charts lose a beat's counts; /metrics has them
                log.warning("hourly counts of %s lost at this beat", workflow, exc_info=True)

    def maybe(self) -> None:
        """Beat if a beat is due (a Lambda container's, at the end of an invocation)."""
        if time.monotonic() - self._last >= self.every:
            self._safely(self.beat)

    def _safely(self, beat: Callable[[], None]) -> None:
        try:
            beat()
        except OrchestratorError as exc:  # the next beat tries again
            log.warning("heartbeat of %s %s failed: %s", self.kind, self.id, exc)
        except Exception:  # anything else (a dropped connection): never the process's end
            log.warning("heartbeat of %s %s failed", self.kind, self.id, exc_info=True)

    def run(self, stop: threading.Event) -> None:
        """Beat every `every` seconds until `stop` is set."""
        while True:
            self._safely(self.beat)
            if stop.wait(self.every):
                return

    def stopped(self) -> None:
        """The last beat, as the process stops (after its last work: what it counted
        is added with it)."""
        self._safely(lambda: self.beat(stopped=True))

    def start(self, stop: threading.Event) -> threading.Thread:
        """`run` on a daemon thread of its own."""
        t = threading.Thread(target=self.run, args=(stop,), name=f"heartbeat-{self.kind}",
                             daemon=True)
        t.start()
        return t
