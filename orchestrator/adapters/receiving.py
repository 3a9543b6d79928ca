"""A worker's side of the queues: the poll loop that receives messages and hands each to
a thread, and the bookkeeping of what it received (deletes batched ten to a request,
invisibility renewed while a message waits or runs, messages handed back when no thread
is free for them)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from orchestrator.adapters.messages import AnyMessage
from orchestrator.adapters.metering import charge, metered
from orchestrator.adapters.queue import Queues, Received
from orchestrator.errors import StoreError

__all__ = ["DELETE_WITHIN", "FLUSH_EVERY", "HAND_BACK_AFTER", "Receipts", "poll"]

log = logging.getLogger("orchestrator.worker")

FLUSH_EVERY = 0.05
DELETE_WITHIN = 1.0
# A received message still waiting for a free thread after this long is handed back to
# the queue: a worker whose threads are all held up (slow calls) must not keep messages
# from workers that are idle.
HAND_BACK_AFTER = 1.0

Key = tuple[str, str]  # (queue, receipt)


class Receipts:
    def __init__(self, queues: Queues, visibility: float) -> None:
        self.queues = queues
        self.visibility = visibility
        self._lock = threading.Lock()
        self._deletes: dict[str, list[str]] = {}
        self._delete_runs: dict[str, str] = {}  # receipt -> its message's run
        self._oldest_ack = float("inf")
        # Messages received and not yet acknowledged: (queue, receipt) -> when their
        # invisibility was last renewed. They wait here for a thread; a worker that
        # dies holding them frees them within one visibility timeout.
        self._held: dict[Key, float] = {}
        # Of those, the ones still waiting for a thread (-> when received), and the ones
        # handed back meanwhile (their thread drops them).
        self._waiting: dict[Key, float] = {}
        self._handed_back: set[Key] = set()
        self.queued = 0  # received, not yet started

    def received(self, got: list[Received]) -> None:
        with self._lock:
            self.queued += len(got)
            held = time.monotonic()
            for item in got:
                self._held[(item.queue, item.receipt)] = held
                self._waiting[(item.queue, item.receipt)] = held

    def started(self, item: Received) -> bool:
        """A thread takes `item`; False if it was handed back meanwhile (drop it)."""
        key = (item.queue, item.receipt)
        with self._lock:
            self.queued -= 1
            self._waiting.pop(key, None)
            handed_back = key in self._handed_back
            self._handed_back.discard(key)
        return not handed_back

    def ack(self, receipt: Received | None) -> None:
        """The message is done with: deleted at the next flush."""
        if receipt is None:
            return
        with self._lock:
            self._held.pop((receipt.queue, receipt.receipt), None)
            self._deletes.setdefault(receipt.queue, []).append(receipt.receipt)
            if receipt.message is not None:  # whose run a batch delete is counted for
                self._delete_runs[receipt.receipt] = receipt.message.run_id
            self._oldest_ack = min(self._oldest_ack, time.monotonic())

    def flush(self, *, force: bool = True) -> None:
        """Renew and hand back what is held; delete the acknowledged messages: ten to a
        request, or once the oldest waited DELETE_WITHIN seconds (a claimed message
        redelivered meanwhile finds its guard false, so waiting is safe)."""
        now = time.monotonic()
        with self._lock:
            due = force or now - self._oldest_ack >= DELETE_WITHIN or any(
                len(r) >= 10 for r in self._deletes.values())
            pending: dict[str, list[str]] = {}
            if due:
                pending, self._deletes = self._deletes, {}
                self._oldest_ack = float("inf")
        self._renew(now)
        for url, receipts in pending.items():
            for i in range(0, len(receipts), 10):
                # A batch delete is counted for its first message's run (metering.py).
                chunk = receipts[i:i + 10]
                with self._lock:
                    runs = [self._delete_runs.pop(r, None) for r in chunk]
                try:
                    with metered(runs[0]):
                        self.queues.delete(url, chunk)
                except StoreError as exc:  # redelivery is harmless: the claim guard holds
                    log.warning("delete failed: %s", exc)

    def _renew(self, now: float) -> None:
        """Hand back the messages that waited HAND_BACK_AFTER for a thread; renew the
        invisibility of the other held ones past half their timeout."""
        with self._lock:
            back = [k for k, t in self._waiting.items() if now - t >= HAND_BACK_AFTER]
            for k in back:
                del self._waiting[k]
                self._held.pop(k, None)
                self._handed_back.add(k)
            stale = [k for k, t in self._held.items() if now - t >= self.visibility / 2]
            for k in stale:
                self._held[k] = now
        for keys, seconds in ((back, 0.0), (stale, self.visibility)):
            by_queue: dict[str, list[str]] = {}
            for url, receipt in keys:
                by_queue.setdefault(url, []).append(receipt)
            for url, receipts in by_queue.items():
                try:
                    self.queues.keep_invisible(url, receipts, seconds)
                except StoreError as exc:  # redelivered: the claim guard holds
                    log.warning("visibility change failed: %s", exc)


def poll(queues: Queues, receipts: Receipts, stop: threading.Event, *, threads: int,
         wait: int, handle: Callable[[AnyMessage, Received], None],
         flush: Callable[[], None]) -> None:
    """Poll both queues until `stop` is set, handing each message to `handle` on a pool
    of `threads`; `flush` runs every FLUSH_EVERY seconds meanwhile."""
    # Room for the running attempts plus one receive's worth of prefetched messages,
    # so a backlog is received ten at a time. The timer queue has a budget of its
    # own: its long-polls on an (often empty) queue must not hold dispatch room.
    budgets = {
        queues.dispatch_url: threading.Semaphore(threads + 10),
        queues.timer_url: threading.Semaphore(10),
    }
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="step")

    def work(item: Received, slots: threading.Semaphore) -> None:
        try:
            if not receipts.started(item):
                pass  # back in the queue for any worker (this one's poller included)
            elif item.message is None:
                receipts.ack(item)  # not ours: nothing to do with it
            else:
                handle(item.message, item)
        except Exception:  # the message is redelivered; the rows stay the truth
            log.exception("step %s failed inside the worker", item.message)
        finally:
            slots.release()

    def receive(url: str) -> None:
        slots = budgets[url]
        while not stop.is_set():
            if not slots.acquire(timeout=0.2):
                continue
            free = 1
            while free < 10:
                if slots.acquire(blocking=False):
                    free += 1
                elif receipts.queued > 0 and not stop.is_set():
                    # Work is still waiting locally: nothing is lost by waiting for
                    # room for a full batch instead of receiving one at a time.
                    if slots.acquire(timeout=0.05):
                        free += 1
                else:
                    break
            try:
                got = queues.receive(url, max_messages=free, wait=wait,
                                     visibility=receipts.visibility)
            except StoreError as exc:
                log.warning("receive failed: %s", exc)
                got = []
                stop.wait(1.0)
            except Exception:  # anything else (a dropped connection): this loop goes on
                log.exception("receive failed")
                got = []
                stop.wait(1.0)
            for _ in range(free - len(got)):
                slots.release()
            if got and got[0].message is not None:
                # A receive is counted for its first message's run (metering.py);
                # an empty one is no run's.
                charge(got[0].message.run_id, "sqs.ReceiveMessage")
            receipts.received(got)
            for item in got:
                pool.submit(work, item, slots)

    def flusher() -> None:
        while not stop.wait(FLUSH_EVERY):
            try:
                flush()
            except Exception:  # what it could not write waits for the next pass
                log.exception("flush failed")

    loops = [threading.Thread(target=receive, args=(u,), name=f"poll-{i}", daemon=True)
             for i, u in enumerate((queues.dispatch_url, queues.timer_url))]
    loops.append(threading.Thread(target=flusher, name="flush", daemon=True))
    for t in loops:
        t.start()
    stop.wait()
    for t in loops:
        t.join(timeout=wait + 5)
    pool.shutdown(wait=True)
