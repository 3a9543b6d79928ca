"""A durable call's answer as it arrives: version 2 streams checkpoints (NDJSON lines,
functions/sdk/protocol/durable.py) that the worker commits while the call goes on.

The call runs in a reader thread of its own, which holds the HTTP answer open and hands
over what arrives: the lines received so far (several at once when they came while the
previous ones were being committed: they are then committed in one request), or the whole
answer when it is not a stream (an SDK that speaks only version 1, an error). The
worker's thread takes them, commits, and looks at the run between takes (a cancel is
seen within STOP_CHECK seconds, however long a step runs). Stopping the exchange (a
checkpoint that could not be committed, a cancel) hangs up at once: the connection is
closed under the reader, and the function's server, seeing its caller go, starts no
operation after it (functions/sdk/durable/stream.py). Where the transport cannot close
it from another thread, the reader ends at the next thing to arrive."""

from __future__ import annotations

import contextvars
import queue
import threading
from dataclasses import dataclass

from functions.sdk.protocol import NDJSON
from orchestrator.adapters.invoker import Call, Invoker, Reply, Result, StreamCut
from orchestrator.engine.attempts import Outcome, OutcomeKind
from orchestrator.errors import Code, error_doc

__all__ = ["END", "IDLE", "Exchange", "Lines"]


@dataclass(frozen=True)
class Lines:
    """Complete lines received (in order)."""

    lines: list[bytes]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# The answer ended (its body is complete).
END = _Marker("END")
# Nothing arrived within the wait.
IDLE = _Marker("IDLE")

Item = Lines | Result | StreamCut | _Marker


class Exchange:
    """One call, read in a thread of its own."""

    def __init__(self, invoker: Invoker, call: Call, max_line: int) -> None:
        self.invoker = invoker
        self.call = call
        self.max_line = max_line
        self.queue: queue.Queue[Item] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._reply: Reply | None = None
        # What ended the answer, taken from the queue behind lines and kept for the next take.
        self._held: Item | None = None
        self.streamed = False
        # In the caller's context: the call carries its trace and log fields.
        self._thread = threading.Thread(target=contextvars.copy_context().run,
                                        args=(self._read,), name=f"call {call.run_id}",
                                        daemon=True)
        self._thread.start()

    def stop(self, *, hang_up: bool = True) -> None:
        """Read no more, and (`hang_up`) close the connection now: a call stopped before
        its end. A call read to its end line is let go without hanging up, so its
        connection is kept for the next call."""
        with self._lock:
            self._stop.set()
            reply = self._reply
        if reply is not None and hang_up:
            reply.hang_up()

    def take(self, wait: float) -> Item:
        """What arrived next; IDLE after `wait` seconds of nothing. Lines received
        meanwhile come together."""
        if self._held is not None:
            item, self._held = self._held, None
            return item
        try:
            item = self.queue.get(timeout=wait)
        except queue.Empty:
            return IDLE
        if not isinstance(item, Lines):
            return item
        lines = list(item.lines)
        while True:
            try:
                more = self.queue.get_nowait()
            except queue.Empty:
                return Lines(lines)
            if not isinstance(more, Lines):
                # Keep what ends the answer for the next take.
                self._held = more
                return Lines(lines)
            lines.extend(more.lines)

    def _read(self) -> None:
        try:
            with self.invoker.open(self.call, accept=f"{NDJSON}, application/json") as reply:
                with self._lock:
                    if self._stop.is_set():
                        return  # stopped before the answer began
                    self._reply = reply
                kind = (reply.header("content-type") or "").split(";")[0].strip()
                if not (200 <= reply.status < 300 and kind == NDJSON):
                    self.queue.put(reply.result())
                    return
                self.streamed = True
                buf = b""
                for chunk in reply.chunks():
                    if self._stop.is_set():
                        return
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    if len(buf) > self.max_line:
                        self.queue.put(StreamCut(Outcome(OutcomeKind.PERMANENT, error=error_doc(
                            Code.OUTPUT_TOO_LARGE,
                            f"a line of the answer exceeds the hard cap of {self.max_line}"
                            " bytes"))))
                        return
                    full = [line for line in lines if line.strip()]
                    if full:
                        self.queue.put(Lines(full))
                if buf.strip():
                    self.queue.put(Lines([buf]))
                self.queue.put(END)
        except StreamCut as cut:
            self.queue.put(cut)
        except Exception as exc:  # the reader must always say how the answer ended
            self.queue.put(StreamCut(Outcome(OutcomeKind.RETRYABLE, error=error_doc(
                Code.CONNECTION_ERROR, f"reading the answer: {type(exc).__name__}: {exc}"))))
