"""Lambda's limits in time for `orchestrator dev --lambda` with the AWS model on
(infra/emulator/aws_model.py): one account's concurrency pool and the invocation delay,
shared by every `EventFront`, `QueueMapping` and `Schedule` of one stack
(infra/lambda_local.py).

- Pool: at most `concurrency` invocations run at once across all the stack's functions,
  as AWS's concurrent-executions quota is per account and region, not per function.
- Delay: each invocation waits a delay drawn from the model's `latency.lambda.default`
  (a log-normal, `log_normal`, capped at ten p99s as in modelled.py): a warm invocation's
  overhead, on top of the handler's own time (a synchronous invocation let in holds its
  slot through it; a throttled one waits it before its answer). The random stream is
  seedable and the sleep injectable, as in `AwsTiming`.
- Over the limit, by how the function is invoked:
  - synchronously (`EventFront`: a Function URL, or the HTTP API): answered at once,
    never queued: a Function URL with `THROTTLED_URL` (HTTP 429, TooManyRequestsException);
    an HTTP API with `THROTTLED_API` (HTTP 500: API Gateway turns every invocation error,
    throttling included, into its "Internal server error");
  - by an SQS event source mapping (`QueueMapping`): the mapping does not receive while
    no slot is free, so the messages stay in the queue (AWS scales a throttled mapping's
    pollers down; what it received and could not invoke comes back after the visibility
    timeout: the same messages, later, so leaving them unreceived is the simplest
    faithful behaviour); its pollers hold no slot, only its invocations do;
  - asynchronously (`Schedule`, EventBridge): the invocation waits for a slot (AWS keeps
    a throttled asynchronous event in its internal queue and retries it).
- Off: no model, no `LambdaLimits`; the fronts and mappings take the exact path they
  took before (`limits=None`)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from infra.emulator.aws_model import AwsModel, Latency, log_normal

__all__ = ["THROTTLED_API", "THROTTLED_URL", "LambdaLimits"]

# What a Function URL answers an invocation over the concurrency limit: Lambda's
# TooManyRequestsException, "Rate exceeded", as HTTP 429
# (https://repost.aws/knowledge-center/lambda-troubleshoot-throttling; a Function URL is
# throttled through the function's concurrency:
# https://docs.aws.amazon.com/lambda/latest/dg/urls-configuration.html). AWS documents
# no body for it; this is the one Function URLs are seen to send.
THROTTLED_URL: dict[str, Any] = {
    "statusCode": 429,
    "headers": {"content-type": "application/json",
                "x-amzn-ErrorType": "TooManyRequestsException"},
    "body": json.dumps({"Message": "Rate Exceeded."}),
}
# What API Gateway answers when Lambda rejects the invocation (throttling included):
# "If the Lambda API rejects the invocation request, API Gateway returns a 500 error
# code ... {"message": "Internal server error"}"
# (https://docs.aws.amazon.com/lambda/latest/dg/services-apigateway-errors.html).
THROTTLED_API: dict[str, Any] = {
    "statusCode": 500,
    "headers": {"content-type": "application/json"},
    "body": json.dumps({"message": "Internal server error"}),
}
# A drawn delay's ceiling, in p99s (as modelled.py's): the log-normal's tail is unbounded.
_CEILING = 10.0


class LambdaLimits:
    """One account's Lambda concurrency and invocation delay. Thread-safe: the fronts'
    invocations run on threads of their own, the mappings' on their pools."""

    def __init__(self, concurrency: int, latency: Latency | None, *, seed: int | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.concurrency = concurrency
        self.latency = latency
        self.sleep = sleep
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self.running = 0  # invocations holding a slot now
        self.peak = 0  # the most that ever held one at once
        self.throttled = 0  # synchronous invocations answered THROTTLED_* so far
        self.throttled_api = 0  # of them, HTTP API ones (THROTTLED_API: a 500 like any)
        self.waiting = 0  # invocations waiting for a slot now (mappings, schedules)

    @classmethod
    def from_model(cls, model: AwsModel, *, seed: int | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> LambdaLimits:
        """The limits the model's `lambda.concurrency` and `latency.lambda` describe."""
        return cls(model.lambda_.concurrency, model.latency_of("lambda", "default"),
                   seed=seed, sleep=sleep)

    def delay(self) -> float:
        """An invocation's delay, in seconds, drawn from the model (0: none modelled)."""
        if self.latency is None:
            return 0.0
        with self._lock:
            gauss = self._random.gauss(0.0, 1.0)
        return min(log_normal(self.latency, gauss), _CEILING * self.latency.p99_ms / 1000)

    def wait(self) -> None:
        """Sleep one invocation's delay (with no lock held)."""
        seconds = self.delay()
        if seconds > 0:
            self.sleep(seconds)

    def try_acquire(self, *, api: bool = False) -> bool:
        """Take a slot if one is free now (a synchronous invocation): False, throttled.
        `api`: the invocation is an HTTP API's, counted apart too (its 500 is API
        Gateway's answer to any invocation error: the count tells throttling from others)."""
        with self._lock:
            if self.running >= self.concurrency:
                self.throttled += 1
                self.throttled_api += api
                return False
            self._take()
            return True

    def acquire(self, stop: threading.Event, poll: float = 0.2) -> bool:
        """Wait for a free slot and take it (a mapping's or a schedule's invocation);
        False if `stop` was set first (and then no slot is held)."""
        with self._freed:
            if not self._until_free(stop, poll):
                return False
            self._take()
            return True

    def until_free(self, stop: threading.Event, poll: float = 0.2) -> bool:
        """Wait until a slot is free, without taking it (a mapping before it polls);
        False if `stop` was set first."""
        with self._freed:
            return self._until_free(stop, poll)

    def _until_free(self, stop: threading.Event, poll: float) -> bool:
        self.waiting += 1
        try:
            while self.running >= self.concurrency:
                if stop.is_set():
                    return False
                self._freed.wait(poll)
            return True
        finally:
            self.waiting -= 1

    def release(self) -> None:
        with self._freed:
            self.running -= 1
            # Every waiter: one woken by notify() may be an `until_free` that takes no
            # slot, leaving an `acquire` waiting for its next poll with a slot free.
            self._freed.notify_all()

    def _take(self) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
