"""The deployed stack's Lambda functions, emulated locally (`orchestrator dev --lambda`):
the very handlers of orchestrator/lambda_handlers.py and functions/sdk/lambda_adapter.py,
invoked the way AWS invokes them.

- `EventFront`: an HTTP server whose every request becomes an HTTP API (payload 2.0)
  event for a handler, its answer turned back into the HTTP response (the API Gateway or
  Function URL in front of a function);
- `QueueMapping`: an SQS event source mapping: batches of up to ten received from a queue
  and handed to the worker handler as one SQS event, with an invocation timeout; the
  records it does not report as failures are deleted, the failures left to come back
  (the handler makes them visible at once; if the invocation raised, every record comes
  back after the visibility timeout, as on AWS);
- `Schedule`: the sweeper handler invoked once a minute (EventBridge's rate(1 minute)).

The handlers read their configuration from the environment, as on Lambda. With the AWS
model on, each takes the stack's one `LambdaLimits` (infra/lambda_limits.py: the
account's concurrency and the invocation delay, and what AWS does over the limit);
without it (`limits=None`, the default) each runs as it always did."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from infra.lambda_events import Context, http_event, sqs_event
from infra.lambda_limits import THROTTLED_API, THROTTLED_URL, LambdaLimits

__all__ = ["EventFront", "QueueMapping", "Schedule"]

log = logging.getLogger("orchestrator.lambda_local")

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


# The most invocations one `EventFront` runs at once with the AWS model on: its threads
# (each with an event loop of its own) are made as they are needed, up to the model's
# concurrency, but a model of thousands would be thousands of threads in one process.
FRONT_THREADS = 64


class EventFront:
    """An ASGI app: each HTTP request → one invocation of `handler` → the response.

    Without limits, the handlers run on the server loop's default executor, as always.
    With `limits` (the AWS model), on a pool of the front's own, of the model's
    concurrency but at most FRONT_THREADS (64) threads: the default executor's
    min(32, cores + 4) threads would hold the front under the account's limit, so a
    Function URL would never answer 429 at the model's concurrency. Past 64 (a model's
    concurrency above that), the front queues invocations as the default executor did,
    and only the account's pool, shared with the other fronts and the mappings, throttles."""

    _loops = threading.local()

    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        # As on Lambda, the handler runs on a thread of its own with an event loop of its
        # own (mangum runs the app to completion on the thread's loop).
        if getattr(self._loops, "loop", None) is None:
            self._loops.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loops.loop)
        return self.handler(event, Context(timeout=self.timeout))

    def __init__(self, handler: Handler, *, timeout: float = 30.0,
                 function_url: bool = False, limits: LambdaLimits | None = None) -> None:
        self.handler = handler
        self.timeout = timeout
        self.function_url = function_url
        self.limits = limits
        self._pool = None if limits is None else ThreadPoolExecutor(
            min(limits.concurrency, FRONT_THREADS), thread_name_prefix="front")

    async def _run(self, event: dict[str, Any]) -> dict[str, Any]:
        limits, pool = self.limits, self._pool
        if limits is None or pool is None:
            return await asyncio.to_thread(self._invoke, event)
        # The slot is taken on arrival, here on the loop (a short lock): an invocation
        # over the limit is answered at once, never queued behind those the pool runs.
        if not limits.try_acquire(api=not self.function_url):
            await asyncio.to_thread(limits.wait)  # its delay, as every invocation's
            return THROTTLED_URL if self.function_url else THROTTLED_API
        # As asyncio.to_thread does, on the front's own pool: the caller's context goes
        # too. Shielded: a caller gone does not cancel it before it releases its slot.
        call = functools.partial(contextvars.copy_context().run, self._limited, event)
        return await asyncio.shield(asyncio.get_running_loop().run_in_executor(pool, call))

    def _limited(self, event: dict[str, Any]) -> dict[str, Any]:
        """An invocation holding its slot: its delay, the handler, the slot freed."""
        limits = self.limits
        assert limits is not None
        try:
            limits.wait()
            return self._invoke(event)
        finally:
            limits.release()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(part.split("=", 1) if "=" in part else (part, "")
                     for part in scope.get("query_string", b"").decode().split("&") if part)
        event = http_event(scope["method"], scope["path"], query=query, headers=headers,
                           body=body, base64_body=True, function_url=self.function_url)
        answer = await self._run(event)
        raw = answer.get("body") or ""
        data = base64.b64decode(raw) if answer.get("isBase64Encoded") else raw.encode()
        out_headers = [(k.encode(), str(v).encode())
                       for k, v in (answer.get("headers") or {}).items()]
        for k, values in (answer.get("multiValueHeaders") or {}).items():
            out_headers += [(k.encode(), str(v).encode()) for v in values]
        for cookie in answer.get("cookies") or []:
            out_headers.append((b"set-cookie", cookie.encode()))
        await send({"type": "http.response.start", "status": int(answer.get("statusCode", 200)),
                    "headers": out_headers})
        await send({"type": "http.response.body", "body": data})


class QueueMapping:
    """An SQS event source mapping of `queue_url` onto `handler`.

    With `limits` (the account's pool), it polls only while the account has a slot free,
    so a throttled mapping leaves its messages in the queue; an invocation takes its slot
    once its batch is received (pollers, as on AWS, use none). A batch received as the
    last slot went elsewhere waits, in flight, for the next one: AWS would let it come
    back after the visibility timeout and invoke it then; here it is invoked as soon as
    a slot frees (sooner, never lost: what is not invoked comes back, as any batch)."""

    def __init__(self, sqs: Any, queue_url: str, handler: Handler, *, timeout: float = 120.0,
                 concurrency: int = 4, batch_size: int = 10,
                 limits: LambdaLimits | None = None) -> None:
        self.sqs = sqs
        self.url = queue_url
        self.arn = sqs.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.handler = handler
        self.timeout = timeout
        self.batch_size = batch_size
        self.slots = threading.Semaphore(concurrency)
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="invoke")
        self.limits = limits

    def poll_once(self, *, wait: int = 1, timeout: float | None = None) -> dict[str, Any] | None:
        """Receive one batch and invoke the handler on it (here, not on the pool); what
        the handler answered, or None for an empty receive."""
        forever = threading.Event()  # never set: wait as long as the account is full
        if self.limits is not None:
            self.limits.until_free(forever)
        msgs = self._receive(wait)
        if not msgs:
            return None
        if self.limits is not None:
            self.limits.acquire(forever)
        try:
            return self._invoke(msgs, self.timeout if timeout is None else timeout)
        finally:
            if self.limits is not None:
                self.limits.release()

    def _receive(self, wait: int) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=self.batch_size, WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        return got

    def _invoke(self, msgs: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
        if self.limits is not None:
            self.limits.wait()
        try:
            answer = self.handler(sqs_event(msgs, self.arn), Context(timeout=timeout))
        except Exception:  # the whole batch comes back after the visibility timeout
            log.exception("worker invocation failed")
            return {"batchItemFailures": [{"itemIdentifier": m["MessageId"]} for m in msgs]}
        failed = {f["itemIdentifier"] for f in answer.get("batchItemFailures", [])}
        done = [m for m in msgs if m["MessageId"] not in failed]
        for i in range(0, len(done), 10):
            self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]}
                for j, m in enumerate(done[i:i + 10])])
        return answer

    def run(self, stop: threading.Event) -> None:
        """Poll until `stop`, up to `concurrency` invocations at once (and, with
        `limits`, only while the account has a slot free)."""
        while not stop.is_set():
            if not self.slots.acquire(timeout=0.2):
                continue
            if self.limits is not None and not self.limits.until_free(stop):
                self.slots.release()
                continue
            try:
                msgs = self._receive(1)
            except Exception:
                log.exception("receive failed")
                self.slots.release()
                stop.wait(1.0)
                continue
            if not msgs:
                self.slots.release()
                continue
            if self.limits is not None and not self.limits.acquire(stop):
                self.slots.release()  # stopping: the batch comes back after its visibility
                continue

            def invoke(batch: list[dict[str, Any]] = msgs) -> None:
                try:
                    self._invoke(batch, self.timeout)
                finally:
                    if self.limits is not None:
                        self.limits.release()
                    self.slots.release()

            self.pool.submit(invoke)
        self.pool.shutdown(wait=True)


class Schedule:
    """`handler` invoked every `every` seconds (from the start of one to the next), each
    invocation with `timeout` seconds, as EventBridge's rate() schedule does."""

    def __init__(self, handler: Handler, *, every: float = 60.0, timeout: float = 60.0,
                 limits: LambdaLimits | None = None) -> None:
        self.handler = handler
        self.every = every
        self.timeout = timeout
        self.limits = limits

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            if self.limits is None:
                self._tick(stop)
            elif self.limits.acquire(stop):  # throttled: the event waits its turn
                try:
                    self.limits.wait()
                    self._tick(stop)
                finally:
                    self.limits.release()
            stop.wait(max(0.0, started + self.every - time.monotonic()))

    def _tick(self, stop: threading.Event) -> None:
        try:
            self.handler({"source": "aws.events", "detail-type": "Scheduled Event"},
                         _Stoppable(self.timeout, stop))
        except Exception:
            log.exception("sweeper invocation failed")


class _Stoppable(Context):
    """A context whose time runs out at once when the emulation stops."""

    def __init__(self, timeout: float, stop: threading.Event) -> None:
        super().__init__(timeout=timeout)
        self.stop = stop

    def get_remaining_time_in_millis(self) -> int:
        return 0 if self.stop.is_set() else super().get_remaining_time_in_millis()
