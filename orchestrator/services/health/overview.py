"""What the health page, `GET /health` and `GET /metrics` show, read when asked:

- the queues' depths (dispatch, timer, dead letters): one GetQueueAttributes each,
  SQS's approximate counts of messages visible, in flight and delayed. The age of the
  oldest message is not shown: SQS reports it to CloudWatch only (and moto not at all);
- the processes: every heartbeat item not expired (one query), split into those alive
  (seen within three of their beats) and those gone (silent longer, or stopped);
- the backends: for each one with `limits:`, its calls in flight as its limit item holds
  them (holders whose lease has not passed: one read each) beside its limits, and for
  every backend the attempts the alive workers said were running at their last beat;
- the stack's counters (`counts`): runs started and finished, step durations (one query).

Each read costs a handful of requests, whatever the stack's size but for processes
(a page of 100 heartbeats a query) and limited backends (one read each)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.queue import Depth, depth
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.backend_limits import BackendLimitStore
from orchestrator.adapters.store.heartbeats import Heartbeat
from orchestrator.engine.backend_limits import Limits
from orchestrator.settings import ResourceNames

__all__ = ["BackendLoad", "Health", "HealthReads", "QueueDepth"]


@dataclass(frozen=True)
class QueueDepth:
    name: str  # dispatch, timer, dead_letter
    depth: Depth

    def as_json(self) -> dict[str, Any]:
        d = self.depth
        return {"queue": self.name, "visible": d.visible, "in_flight": d.in_flight,
                "delayed": d.delayed}


@dataclass(frozen=True)
class BackendLoad:
    backend: str
    # Its `limits:` (None: none declared) and its calls holding a slot now (None: no
    # concurrency limit, so no slots are kept).
    concurrency: int | None
    rate: str | None
    holding: int | None
    # The attempts the alive workers were running at their last beat.
    running: int

    def as_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "concurrency": self.concurrency, "rate": self.rate,
                "holding": self.holding, "running": self.running}


@dataclass(frozen=True)
class Health:
    at: float
    queues: list[QueueDepth]
    alive: list[Heartbeat]
    gone: list[Heartbeat]
    backends: list[BackendLoad]

    @property
    def dead_letters(self) -> int:
        return sum(q.depth.visible + q.depth.in_flight for q in self.queues
                   if q.name == "dead_letter")

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "queues": [q.as_json() for q in self.queues],
            "dead_letters": self.dead_letters,
            "processes": {"alive": [p.as_json(self.at) for p in self.alive],
                          "gone": [p.as_json(self.at) for p in self.gone]},
            "backends": [b.as_json() for b in self.backends],
            # What SQS cannot tell without CloudWatch.
            "oldest_message_age": None,
        }


def _rate(limits: Limits | None) -> str | None:
    if limits is None or limits.rate_count is None or limits.rate_period is None:
        return None
    return f"{limits.rate_count}/{limits.rate_period:g}s"


class HealthReads:
    def __init__(self, store: Store, sqs: Any, names: ResourceNames,
                 urls: Mapping[str, str], limits: Mapping[str, Limits | None],
                 clock: Callable[[], float]) -> None:
        # `urls`: the dispatch and timer queues' (the dead letters' is looked up once).
        self.store = store
        self.sqs = sqs
        self.names = names
        self.urls = dict(urls)
        self.limits = dict(limits)
        self.clock = clock
        self.slots = BackendLimitStore(store.control)

    def _queue_urls(self) -> dict[str, str]:
        if "dead_letter" not in self.urls:
            with _translate("resolve the dead-letter queue"):
                self.urls["dead_letter"] = self.sqs.get_queue_url(
                    QueueName=self.names.dead_letter_queue)["QueueUrl"]
        return self.urls

    def queues(self) -> list[QueueDepth]:
        return [QueueDepth(name, depth(self.sqs, url))
                for name, url in self._queue_urls().items()]

    def processes(self, now: float) -> tuple[list[Heartbeat], list[Heartbeat]]:
        """(alive, gone), newest beat first."""
        every = self.store.heartbeats.processes(now)
        alive = [p for p in every if p.alive(now)]
        return alive, [p for p in every if not p.alive(now)]

    def backends(self, now: float, alive: list[Heartbeat]) -> list[BackendLoad]:
        running: dict[str, int] = {}
        for p in alive:
            for backend, n in p.in_flight.items():
                running[backend] = running.get(backend, 0) + int(n)
        out = []
        for backend in sorted(set(self.limits) | set(running)):
            lim = self.limits.get(backend)
            holding = None
            if lim is not None and lim.concurrency is not None:
                held = self.slots.state(backend, now).holders
                holding = sum(1 for until in held.values() if until > now)
            out.append(BackendLoad(backend, None if lim is None else lim.concurrency,
                                   _rate(lim), holding, running.get(backend, 0)))
        return out

    def read(self) -> Health:
        now = self.clock()
        alive, gone = self.processes(now)
        return Health(now, self.queues(), alive, gone, self.backends(now, alive))
