"""AWS Lambda entry points: the API, the worker and the sweeper, each a thin handler over
the same wiring the long-lived processes use (`Runtime.build`), built once per container.

    Handler: orchestrator.lambda_handlers.api       API Gateway HTTP API (payload v2)
                                                     or a Function URL, through mangum
    Handler: orchestrator.lambda_handlers.worker    SQS event source mapping on the
                                                     dispatch and timer queues, with
                                                     ReportBatchItemFailures
    Handler: orchestrator.lambda_handlers.sweeper   a schedule (EventBridge, 1 minute)

The container reads its settings from the environment (`ORCH_*`, as the processes do)
and its manifest from `ORCH_MANIFEST` (default `orchestrator.yml`, relative to the task
root) on its first event, never again. Imports of the heavier parts wait for that first
event, so a cold start imports only what its handler uses.

**Time.** A worker invocation starts a record's attempt only if the step's timeout plus
`ORCH_LAMBDA_MARGIN` (default 5 s) fits in the invocation's remaining time; a record that
does not fit is handed back as a batch item failure (SQS delivers it again after the
queue's visibility timeout) and the inline continuation of a chain stops the same way
(its next step goes to the queue). The lease a claim takes is the step's timeout plus
`ORCH_LEASE_MARGIN`, so it always outlives the attempt, and the invocation outlives the
attempt by the margin. The queues' visibility timeout must be at least six times the
function timeout (AWS's advice for event source mappings); template.yaml sets 360 s for
a 60 s function, which bounds the steps it can run to 55 s (longer steps need a longer
function timeout, up to 900 s).

**The sweeper** is invoked once a minute (EventBridge's finest rate) and sweeps every
`ORCH_SWEEP_INTERVAL` seconds until less than one interval plus its margin is left, so
passes stay seconds apart; two invocations that overlap split the shards between them as
two sweeper processes do. It stops early when nothing is in flight and no schedule
ticks before its end: an idle stack costs one short invocation a minute, and work lost
right after an idle spell is found within that minute at worst.

**Heartbeats.** A container's threads are frozen between invocations, so each handler
beats at the end of an invocation when a beat is due (`Heartbeat.maybe`: at most one
write per ORCH_HEARTBEAT_INTERVAL, plus the counts for `/metrics` it adds), under an id
`lambda:<host>:<pid>:<nonce>`; a container reaped while frozen loses what it counted
since its last beat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.settings import LambdaSettings, Settings, environment

if TYPE_CHECKING:
    from orchestrator.runtime import Runtime

__all__ = ["api", "container", "forget", "sweeper", "worker"]

# How long an invocation keeps back after an attempt's timeout (seconds).
DEFAULT_MARGIN = LambdaSettings.margin
# A batch's records are handled at once: the event source mapping sends at most ten.
BATCH_THREADS = 10

log = logging.getLogger("orchestrator.lambda")

_built: dict[str, Any] = {}
_lock = threading.RLock()  # a part's build may build the container


def container() -> Runtime:
    """This container's runtime: settings from the environment, the manifest from
    ORCH_MANIFEST; built on the first event and kept."""
    rt = _built.get("runtime")
    if rt is not None:
        return rt  # type: ignore[no-any-return]
    with _lock:
        if "runtime" not in _built:
            from orchestrator import logs, telemetry
            from orchestrator.manifest.loader import load_manifest
            from orchestrator.runtime import Runtime
            env = environment()
            # With SCRIPTS_URL, the script host deployed beside (manifest/hosts.py).
            manifest = load_manifest(Path(LambdaSettings.from_env(env).manifest_path),
                                     dict(env))
            settings = Settings.from_env(env)
            if env.get("AWS_LAMBDA_FUNCTION_NAME"):  # on Lambda (not `dev --lambda`)
                logs.configure(settings.log_format)
            telemetry.setup(settings)
            _built["runtime"] = Runtime.build(settings, manifest)
        return _built["runtime"]  # type: ignore[no-any-return]


def forget() -> None:
    """Drop this container's parts: the next event builds them again, as a new
    container would (after a deploy, or between tests)."""
    with _lock:
        pool = _built.pop("pool", None)
        _built.clear()
    if pool is not None:
        pool.shutdown(wait=False)


def _part(name: str, build: Any) -> Any:
    part = _built.get(name)
    if part is None:
        with _lock:
            if name not in _built:
                _built[name] = build()
            part = _built[name]
    return part


def _margin() -> float:
    return LambdaSettings.from_env().margin


# ---- API ---------------------------------------------------------------------------------


def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """An HTTP API (payload v2) or Function URL event, answered by the API's Starlette
    app. mangum hands the app the body's exact bytes (decoded when the event says it is
    base64), so webhook signatures are checked on what the sender signed."""

    def build() -> Any:
        from mangum import Mangum

        from orchestrator.api.app import create_app

        return Mangum(create_app(container()), lifespan="off")

    answer: dict[str, Any] = _part("api", build)(event, context)
    _beat("api")
    _flush_spans()
    return answer


def _process_id() -> str:
    from orchestrator.services.health.heartbeat import process_id

    return f"lambda:{process_id()}"


def _beat(kind: str) -> None:
    """The API's heartbeat, when due (a worker's and a sweeper's are their own)."""
    from orchestrator.services.health.heartbeat import Heartbeat

    rt = container()
    _part(f"beat-{kind}", lambda: Heartbeat(rt.store, kind, _process_id(),
                                            every=rt.settings.heartbeat_interval)).maybe()


def _flush_spans() -> None:
    """Export the invocation's spans before it returns (Lambda freezes the container
    after: a batch exporter's thread would not run). A no-op unless tracing is on."""
    from orchestrator import telemetry

    telemetry.flush()


# ---- worker ------------------------------------------------------------------------------


def worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A batch of SQS records from the dispatch or timer queue, handled at once. A record
    whose attempt would not end within the invocation, or whose handling failed, is
    reported as a batch item failure (delivered again); one that is not ours, a
    duplicate or a late copy (its claim fails) is done."""
    from orchestrator.adapters.messages import decode

    w = _part("worker", lambda: container().worker(worker_id=_process_id()))
    pool: ThreadPoolExecutor = _part(
        "pool", lambda: ThreadPoolExecutor(BATCH_THREADS, thread_name_prefix="record"))
    deadline = time.time() + context.get_remaining_time_in_millis() / 1000.0
    margin = _margin()

    def one(record: dict[str, Any]) -> bool:
        try:
            msg = decode(record["body"])
        except ValueError:
            return True  # not one of ours: let the mapping delete it
        # The sender's span, when it traced (telemetry.message_attributes).
        parent = record.get("messageAttributes", {}).get("traceparent", {}).get("stringValue")
        try:
            return bool(w.handle_before(msg, deadline, margin, parent=parent))
        except Exception:  # the record comes back; the rows stay the truth
            log.exception("record %s failed", record.get("messageId"))
            return False

    records = event.get("Records", [])
    with w.folding():  # counts and a wide join's completions: one write each per batch
        done = list(pool.map(one, records))
    failed = [r for r, ok in zip(records, done, strict=True) if not ok]
    _hand_back(failed)
    w.heartbeat.maybe()
    _flush_spans()
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in failed]}


def _hand_back(records: list[dict[str, Any]]) -> None:
    """Make the records reported as failures visible again at once: the mapping would
    leave them invisible for the rest of the queue's visibility timeout (six times the
    function's), and a record handed back for lack of time wants a fresh invocation now."""
    rt = container()
    known = {rt.settings.names.dispatch_queue: rt.queues.dispatch_url,
             rt.settings.names.timer_queue: rt.queues.timer_url}
    by_queue: dict[str, list[str]] = {}
    for r in records:
        name = str(r.get("eventSourceARN", "")).rsplit(":", 1)[-1]
        url = known.get(name)
        if url is None and name:  # a queue mapped besides the stack's two
            try:
                url = rt.clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except Exception:
                url = None
        if url is not None and r.get("receiptHandle"):
            by_queue.setdefault(url, []).append(r["receiptHandle"])
    for url, receipts in by_queue.items():
        try:
            rt.queues.keep_invisible(url, receipts, 0)
        except Exception:  # they come back after the visibility timeout instead
            log.warning("hand back failed", exc_info=True)


# ---- sweeper -----------------------------------------------------------------------------


def sweeper(event: dict[str, Any], context: Any, *,
            sleep: Callable[[float], object] = time.sleep) -> dict[str, Any]:
    """Sweep every ORCH_SWEEP_INTERVAL seconds while more than one interval plus the
    margin of the invocation is left, and while there is something to watch: a run in
    flight, a pass that found work, or a schedule tick due before the invocation ends.
    An idle stack costs one short pass a minute. What the passes repaired, added up."""
    rt = container()
    s = _part("sweeper", lambda: rt.sweeper(sweeper_id=_process_id()))
    interval = rt.settings.sweep_interval
    margin = min(_margin(), interval)
    total: dict[str, int] = {}
    passes = 0
    while True:
        started = time.monotonic()
        report = s.sweep()
        s.heartbeat.maybe()
        passes += 1
        for key, value in report.__dict__.items():
            total[key] = total.get(key, 0) + int(value)
        took = time.monotonic() - started
        left = context.get_remaining_time_in_millis() / 1000.0
        wait = max(0.0, interval - took)
        if left - wait < interval + margin:
            break
        quiet = not (report.woken or report.runs or report.queued)
        if quiet and not _tick_due(rt, time.time() + left) and not rt.store.runs.any_active():
            total["idle"] = 1
            break
        sleep(wait)
    _flush_spans()
    return {"passes": passes, **total}


def _tick_due(rt: Runtime, before: float) -> bool:
    """Whether a schedule's next tick falls before `before` (from the manifest alone)."""
    from orchestrator.engine.ticks import next_tick

    now = time.time()
    return any(next_tick(wf.schedule, now) <= before for wf in rt.scheduler.scheduled.values())
