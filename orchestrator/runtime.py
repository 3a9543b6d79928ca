"""Wiring: build the adapters once from Settings and a manifest, and hand them out.

Entry points (the local stack, `orchestrator worker`, the API, tests, benchmarks) all
assemble the same parts here, so there is one way the system is put together."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.advance import Advancer
from orchestrator.aws import Clients, make_clients
from orchestrator.blobs import Blobs
from orchestrator.invoker import Invoker
from orchestrator.queue import Queues
from orchestrator.runs import RunService
from orchestrator.settings import Settings
from orchestrator.store import Store
from orchestrator.sweeper import Sweeper
from orchestrator.worker import BackendRef, Worker

__all__ = ["Runtime"]


@dataclass
class Runtime:
    settings: Settings
    manifest: Any
    clients: Clients
    store: Store
    queues: Queues
    blobs: Blobs
    advancer: Advancer
    runs: RunService
    clock: Callable[[], float]

    @classmethod
    def build(
        cls,
        settings: Settings,
        manifest: Any,
        *,
        clients: Clients | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Runtime:
        clients = clients or make_clients(settings)
        names = settings.names
        store = Store(clients.dynamodb, names)
        queues = Queues(clients.sqs, names)
        blobs = Blobs(clients.s3, names.blob_bucket)
        adv = Advancer(store, queues, blobs, settings, clock)
        runs = RunService(adv, manifest, default_timeout=settings.default_step_timeout)
        return cls(settings, manifest, clients, store, queues, blobs, adv, runs, clock)

    def backends(self) -> dict[str, BackendRef]:
        return {
            name: BackendRef(url=b.url, secret=b.secret)
            for name, b in self.manifest.backends.items()
        }

    def worker(self, **kwargs: Any) -> Worker:
        invoker = Invoker(max_body=self.settings.output_hard_cap, clock=self.clock)
        return Worker(self.advancer, invoker, self.backends(), clock=self.clock, **kwargs)

    def sweeper(self) -> Sweeper:
        return Sweeper(self.advancer, clock=self.clock)
