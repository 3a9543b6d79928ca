"""The AWS model applied: `AwsTiming` (the delays and the partitions' budgets of one
emulator), and the two wrappers that put it on every path a request takes
(the design: aws_model.py's docstring).

- `ModelledWSGI`: WSGI middleware outside `SerializeDynamoDB` (HTTP, every process);
- `Modelled`: around an `InProcess` before-send handler (this process's clients, and the
  emulator's own process answering its parent).

`AwsTiming.stats` counts what the model did (model_stats.py); `ModelledWSGI` serves it at
`GET /_aws_model/stats` and zeroes it at `POST /_aws_model/reset`, on the emulator's HTTP
port (in `orchestrator dev`, the emulator process's: its HTTP is served there).

Each sleeps the request's delay first, with no lock held, then charges a DynamoDB
request's partitions, then hands the request on (to the lock, and moto) or answers it with
AWS's throttling error. Neither is installed when the model is off."""

from __future__ import annotations

import io
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

from infra.emulator.aws_model import AwsModel, log_normal
from infra.emulator.charging import Plan, plan
from infra.emulator.dynamodb_lock import WSGIApp, _read_body
from infra.emulator.inprocess import Body, body_of
from infra.emulator.model_stats import ModelStats
from infra.emulator.moto_tables import MotoTables
from infra.emulator.partitions import Buckets, Charge

__all__ = ["RESET_PATH", "STATS_PATH", "THROTTLED", "Admission", "AwsTiming", "Modelled",
           "ModelledWSGI", "operation_of"]

log = logging.getLogger("orchestrator.emulator")

# What DynamoDB answers a request over a partition's budget (HTTP 400): botocore's retry
# handler knows the code as a throttling error and retries it, as against AWS.
THROTTLED = "ProvisionedThroughputExceededException"
_THROTTLED_BODY = {
    "__type": f"com.amazonaws.dynamodb.v20120810#{THROTTLED}",
    "message": "The level of configured provisioned throughput for the table was exceeded."
               " Consider increasing your provisioning level with the UpdateTable API.",
}
# The model's own endpoints on the emulator's HTTP port: no AWS path starts with `/_`.
STATS_PATH = "/_aws_model/stats"
RESET_PATH = "/_aws_model/reset"
# A transaction's item over its partition's budget (TransactionCanceledException's reason).
_THROTTLED_REASON = "Throughput exceeds the current capacity for your table or index."
# A sampled delay's ceiling, in p99s: the log-normal's tail is unbounded, AWS's timeouts are not.
_CEILING = 10.0


class AwsTiming:
    """The model at work in one emulator: a random stream for the delays (seeded for
    tests), the partitions' buckets, and the clock and sleep both use (injectable)."""

    def __init__(self, model: AwsModel, *, seed: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.model = model
        self.sleep = sleep
        self.buckets = Buckets(model, clock)
        self._random = random.Random(seed)
        self._random_lock = threading.Lock()
        self.tables = MotoTables()
        self.stats = ModelStats(clock)

    def delay(self, service: str, operation: str) -> float:
        """A delay, in seconds, drawn from the operation's distribution (0: none)."""
        latency = self.model.latency_of(service, operation)
        if latency is None:
            return 0.0
        with self._random_lock:
            gauss = self._random.gauss(0.0, 1.0)
        return min(log_normal(latency, gauss), _CEILING * latency.p99_ms / 1000)

    def wait(self, service: str, operation: str) -> None:
        """Count the request, and sleep its delay (every path calls this once per request)."""
        self.stats.request(service, operation)
        seconds = self.delay(service, operation)
        if seconds > 0:
            self.sleep(seconds)

    def admit(self, operation: str, body: bytes) -> Admission | None:
        """Whether the partitions this DynamoDB request touches can pay for it now (and
        then they have): None, it is to be throttled; else its `Admission`, to settle
        once it ran. A body it cannot read is admitted, charged nothing."""
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return Admission(self, operation, "", Plan())
        table = request.get("TableName", "")
        cost = plan(operation, request, self.model, self.tables)
        if not self.buckets.admit(cost.charges):
            self.stats.throttled(operation)
            return None
        self.stats.charged(cost.charges)
        return Admission(self, operation, table if isinstance(table, str) else "", cost)


@dataclass
class Admission:
    """An admitted DynamoDB request: once it has run, `settle` debits what it turned out
    to cost beyond its admission (charging.py), and a table created or deleted is read
    afresh."""
    timing: AwsTiming
    operation: str
    table: str
    cost: Plan

    @property
    def needs_answer(self) -> bool:
        return self.cost.needs_answer

    def settle(self, status: int, answer: bytes | None) -> None:
        """Never raises: the request has run, and its answer must reach its client."""
        try:
            self._settle(status, answer)
        except Exception:  # a charge miscounted is the model's, never the request's
            log.exception("the AWS model could not settle a %s", self.operation)

    def _settle(self, status: int, answer: bytes | None) -> None:
        if self.operation in ("CreateTable", "DeleteTable", "UpdateTable"):
            self.timing.tables.forget(self.table)
        if not 200 <= status < 300:
            # Refused (a condition that failed, a request moto found invalid): AWS still
            # charges the table's item, but no index entry was written.
            back = [Charge(c.table, c.key, c.kind, -c.units) for c in self.cost.charges
                    if "#" in c.table]
            if back:
                self.timing.buckets.debit(back)
                self.timing.stats.charged(back)
            return
        if self.cost.settle is None:
            return
        extra = self.cost.settle(answer)
        if extra:
            self.timing.buckets.debit(extra)
            self.timing.stats.charged(extra)


def operation_of(target: str, method: str, service_scope: str) -> tuple[str, str] | None:
    """(service, operation) of a request, from its X-Amz-Target (DynamoDB, SQS's JSON
    protocol) or its signing scope (S3: the HTTP method stands for the operation)."""
    prefix, _, operation = target.partition(".")
    if prefix.startswith("DynamoDB_"):
        return "dynamodb", operation
    if prefix == "AmazonSQS":
        return "sqs", operation
    if service_scope == "s3":
        return "s3", method
    return None


def _scope(authorization: str) -> str:
    # "AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, ..."
    credential = authorization.partition("Credential=")[2].partition(",")[0].split("/")
    return credential[3] if len(credential) > 3 else ""


def _throttled_answer(operation: str = "", body: bytes | None = None
                      ) -> tuple[int, dict[str, str], bytes]:
    """AWS's answer to a request over its partitions' budget: a transaction is cancelled
    (each of its items with the reason `ThrottlingError`: the model does not tell which
    item's partition was over), any other request throttled."""
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": uuid.uuid4().hex}
    if operation in ("TransactWriteItems", "TransactGetItems"):
        try:
            items = len(json.loads(body or b"{}").get("TransactItems") or []) or 1
        except (ValueError, AttributeError):
            items = 1
        reasons = ", ".join(["ThrottlingError"] * items)
        answer = {"__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                  "message": "Transaction cancelled, please refer cancellation reasons for"
                             f" specific reasons [{reasons}]",
                  "CancellationReasons": [{"Code": "ThrottlingError",
                                           "Message": _THROTTLED_REASON}] * items}
        return 400, headers, json.dumps(answer).encode()
    return 400, headers, json.dumps(_THROTTLED_BODY).encode()


class ModelledWSGI:
    """WSGI middleware: each request waits its delay, with no lock held, and a DynamoDB
    request over its partitions' budget is answered THROTTLED; the rest go on to `app`."""

    def __init__(self, app: WSGIApp, timing: AwsTiming) -> None:
        self.app = app
        self.timing = timing

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in (STATS_PATH, RESET_PATH):
            return self._own(path, environ.get("REQUEST_METHOD", ""), start_response)
        found = operation_of(environ.get("HTTP_X_AMZ_TARGET", ""),
                             environ.get("REQUEST_METHOD", ""),
                             _scope(environ.get("HTTP_AUTHORIZATION", "")))
        if found is None:
            return self.app(environ, start_response)
        service, operation = found
        body = None
        if service == "dynamodb":  # read whole, before the delay: moto reads it again
            body = _read_body(environ)
            environ["wsgi.input"] = io.BytesIO(body)
        self.timing.wait(service, operation)
        if body is None:
            return self.app(environ, start_response)
        admitted = self.timing.admit(operation, body)
        if admitted is None:
            status, headers, refusal = _throttled_answer(operation, body)
            start_response(f"{status} Bad Request", list(headers.items()))
            return [refusal]
        seen: list[int] = []

        def started(status: str, headers: Any, *rest: Any) -> Any:
            seen.append(int(status.split(" ", 1)[0]))
            return start_response(status, headers, *rest)

        answered = self.app(environ, started)
        answer: bytes | None = None
        if admitted.needs_answer:  # moto's answer is whole already: no stream is held
            answer = b"".join(answered)
            answered = [answer]
        admitted.settle(seen[-1] if seen else 500, answer)
        return answered

    def _own(self, path: str, method: str, start_response: Callable[..., Any]
             ) -> Iterable[bytes]:
        """The model's endpoints: its stats (GET), and their reset (POST)."""
        wanted = "GET" if path == STATS_PATH else "POST"
        if method != wanted:
            body = json.dumps({"message": f"{path} takes {wanted}"}).encode()
            start_response("405 Method Not Allowed", [("Content-Type", "application/json"),
                                                      ("Allow", wanted)])
            return [body]
        if path == RESET_PATH:
            self.timing.stats.reset()
        body = json.dumps(self.timing.stats.snapshot()).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body)))])
        return [body]


class Modelled:
    """A before-send handler around `inner` (an `InProcess`): the request waits its delay,
    with no lock held, then a DynamoDB request over its budget is answered THROTTLED,
    the rest by `inner`."""

    def __init__(self, inner: Any, timing: AwsTiming) -> None:
        self.inner = inner
        self.timing = timing
        self.url: str = inner.url
        self.service: str = inner.service

    def __call__(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        if not str(request.url).startswith(self.url):
            return None
        target = request.headers.get("X-Amz-Target", "")
        if isinstance(target, bytes):
            target = target.decode()
        found = operation_of(target, request.method, self.service)
        if found is not None:
            service, operation = found
            self.timing.wait(service, operation)
            if service == "dynamodb":
                request.body = body_of(request)  # read once: `inner` reads it again
                admitted = self.timing.admit(operation, request.body)
                if admitted is None:
                    status, headers, answer = _throttled_answer(operation, request.body)
                    return AWSResponse(str(request.url), status, headers, Body(answer))
                response: AWSResponse | None = self.inner(request, **kwargs)
                if response is not None:
                    # `content` reads the body once and keeps it, for botocore too.
                    admitted.settle(response.status_code,
                                    response.content if admitted.needs_answer else None)
                return response
        return self.inner(request, **kwargs)  # type: ignore[no-any-return]
