"""`GET /metrics`: the whole stack's metrics in Prometheus's text format, written by
prometheus-client from a collector (`StackCollector`) that reads shared state when
scraped, never an in-process registry: the work is done by many processes (and Lambda
containers) while this API process answers.

| metric                                  | type      | labels          |
|-----------------------------------------|-----------|-----------------|
| orchestrator_runs_started_total         | counter   | workflow        |
| orchestrator_runs_finished_total        | counter   | workflow,status |
| orchestrator_step_duration_seconds      | histogram | workflow        |
| orchestrator_queue_messages             | gauge     | queue,state     |
| orchestrator_backend_in_flight          | gauge     | backend         |
| orchestrator_backend_concurrency_limit  | gauge     | backend         |
| orchestrator_backend_running            | gauge     | backend         |
| orchestrator_processes_alive            | gauge     | kind            |
| orchestrator_processes_gone             | gauge     | kind            |

The counters and the histogram are the `counts` items every process adds to at its
heartbeat (adapters/tallies.py: up to one beat behind, ORCH_HEARTBEAT_INTERVAL), the
runs of workflows the stack does not declare (ad-hoc scripts, named by their clients)
under one `workflow="(ad-hoc)"` (adapters/store/stack_counts.py); the
gauges are read at the scrape (services/health/overview.py). A scrape costs one query
of the counters, one of the heartbeats, three GetQueueAttributes and one read per
backend with a concurrency limit."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.adapters.tallies import DURATION_BUCKETS, bucket_attr
from orchestrator.api.state import api_state
from orchestrator.engine.states import RunStatus
from orchestrator.runtime import Runtime

__all__ = ["StackCollector", "metrics"]

KINDS = ("worker", "sweeper", "api")
QUEUE_STATES = ("visible", "in_flight", "delayed")


class StackCollector(Collector):
    """The stack's metrics, read from its tables and queues at each collection."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def collect(self) -> Iterator[Metric]:
        rt = self.rt
        now = rt.clock()
        counts = rt.store.counts.read(now)
        yield from _counters(counts)
        health = rt.health().read()
        queues = GaugeMetricFamily("orchestrator_queue_messages",
                                   "Messages in a queue, as SQS approximately counts them"
                                   " (visible, in flight: received and not deleted, delayed)",
                                   labels=["queue", "state"])
        for q in health.queues:
            for state in QUEUE_STATES:
                queues.add_metric([q.name, state], getattr(q.depth, state))
        yield queues
        in_flight = GaugeMetricFamily("orchestrator_backend_in_flight",
                                      "Calls holding a slot of a backend's concurrency limit",
                                      labels=["backend"])
        limit = GaugeMetricFamily("orchestrator_backend_concurrency_limit",
                                  "A backend's concurrency limit (limits: concurrency)",
                                  labels=["backend"])
        running = GaugeMetricFamily("orchestrator_backend_running",
                                    "Attempts running on a backend, as the alive workers"
                                    " said at their last heartbeat", labels=["backend"])
        for b in health.backends:
            if b.holding is not None:
                in_flight.add_metric([b.backend], b.holding)
            if b.concurrency is not None:
                limit.add_metric([b.backend], b.concurrency)
            running.add_metric([b.backend], b.running)
        yield from (in_flight, limit, running)
        for name, which, doc in (
                ("orchestrator_processes_alive", health.alive,
                 "Processes whose heartbeat came within three of their beats"),
                ("orchestrator_processes_gone", health.gone,
                 "Processes stopped or silent, whose heartbeat has not expired yet")):
            family = GaugeMetricFamily(name, doc, labels=["kind"])
            for kind in sorted({*KINDS, *(p.kind for p in which)}):
                family.add_metric([kind], sum(1 for p in which if p.kind == kind))
            yield family


def _counters(counts: dict[str, dict[str, float]]) -> Iterator[Metric]:
    started = CounterMetricFamily("orchestrator_runs_started",
                                  "Runs created (started at once, or queued for admission)",
                                  labels=["workflow"])
    finished = CounterMetricFamily("orchestrator_runs_finished",
                                   "Runs that ended, by their final status",
                                   labels=["workflow", "status"])
    durations = HistogramMetricFamily(
        "orchestrator_step_duration_seconds",
        "Call steps' attempts, from the start check to the recorded outcome",
        labels=["workflow"])
    ended = [s.value for s in RunStatus if s.terminal]
    for workflow, c in sorted(counts.items()):
        started.add_metric([workflow], c.get("started", 0.0))
        for status in ended:
            finished.add_metric([workflow, status], c.get(f"finished_{status}", 0.0))
        if c.get("duration_count"):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for i, bound in enumerate((*DURATION_BUCKETS, float("inf"))):
                cumulative += c.get(bucket_attr(i), 0.0)
                buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
            durations.add_metric([workflow], buckets, sum_value=c.get("duration_sum", 0.0))
    yield from (started, finished, durations)


async def metrics(request: Request) -> Response:
    """The stack's metrics (Prometheus text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StackCollector(api_state(request).rt))
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)
