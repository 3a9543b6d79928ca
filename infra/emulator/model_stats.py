"""What the AWS model did, counted: the record a benchmark reads to tell the model's limits
from the orchestrator's (`GET /_aws_model/stats` on the emulator's HTTP port, served by
`ModelledWSGI`; `POST /_aws_model/reset` zeroes it between workloads).

- requests: every request the model saw, per service and operation (whichever path it
  took: HTTP, in-process, or the emulator process's socket);
- throttled: the DynamoDB requests it answered `ProvisionedThroughputExceededException`,
  per operation;
- units: the write and read units charged (admitted requests only), in total and per
  partition (table + partition key value); `snapshot` lists the `TOP` hottest partitions
  by write units and by read units.

One lock, held for a few dictionary updates per request: the model's delays are slept
outside it. The per-partition table is bounded: past `KEEP_AT` partitions the coldest half
is forgotten (a workload of unique keys must not grow it without bound; the hottest, which
the record is for, stay)."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from infra.emulator.partitions import Charge

__all__ = ["ModelStats"]


class ModelStats:
    """The counts of one `AwsTiming` since it started or was last reset; thread-safe."""

    TOP = 10
    KEEP_AT = 200_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._since = self.clock()
            self._requests: dict[tuple[str, str], int] = {}
            self._throttled: dict[str, int] = {}
            self._units = {"write": 0.0, "read": 0.0}
            # (table, key) -> [write units, read units]
            self._partitions: dict[tuple[str, str], list[float]] = {}

    def request(self, service: str, operation: str) -> None:
        with self._lock:
            slot = (service, operation)
            self._requests[slot] = self._requests.get(slot, 0) + 1

    def throttled(self, operation: str) -> None:
        with self._lock:
            self._throttled[operation] = self._throttled.get(operation, 0) + 1

    def charged(self, charges: Iterable[Charge]) -> None:
        """The units an admitted request was charged, on each of its partitions."""
        with self._lock:
            for c in charges:
                self._units[c.kind] += c.units
                row = self._partitions.setdefault((c.table, c.key), [0.0, 0.0])
                row[0 if c.kind == "write" else 1] += c.units
            if len(self._partitions) > self.KEEP_AT:
                coldest = sorted(self._partitions, key=lambda p: sum(self._partitions[p]))
                for partition in coldest[:len(coldest) // 2]:
                    del self._partitions[partition]

    def snapshot(self) -> dict[str, Any]:
        """The record as JSON-ready values."""
        with self._lock:
            requests: dict[str, dict[str, int]] = {}
            for (service, operation), n in sorted(self._requests.items()):
                requests.setdefault(service, {})[operation] = n
            rows = [{"table": table, "key": key, "write_units": w, "read_units": r}
                    for (table, key), (w, r) in self._partitions.items()]
            return {
                "seconds": self.clock() - self._since,
                "requests": requests,
                "requests_total": sum(self._requests.values()),
                "throttled": dict(sorted(self._throttled.items())),
                "throttled_total": sum(self._throttled.values()),
                "units": dict(self._units),
                "partitions": len(self._partitions),
                "hottest_writes": heapq.nlargest(self.TOP, rows, key=lambda r: r["write_units"]),
                "hottest_reads": heapq.nlargest(self.TOP, rows, key=lambda r: r["read_units"]),
            }
