"""SQS: the dispatch queue ("look at step X, attempt N") and the timer queue (the same
message, delayed). Messages are hints; the rows decide what happens.

Timers live on their own queue because every delayed message in a queue slows each
send and receive on it (measured on moto), and dispatches are the hot path."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from orchestrator import telemetry
from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.messages import AdmitRun, AnyMessage, Dispatch, Promote, decode, encode
from orchestrator.errors import StoreError
from orchestrator.settings import ResourceNames

__all__ = ["MAX_DELAY", "AdmitRun", "Depth", "Dispatch", "Promote", "Queues", "Received",
           "depth"]

MAX_DELAY = 900  # SQS's ceiling on DelaySeconds


@dataclass(frozen=True)
class Received:
    queue: str
    receipt: str
    message: AnyMessage | None  # None: not one of ours; delete it
    receive_count: int
    # The sender's span (W3C), when it traced: the worker's span continues it.
    traceparent: str | None = None


@dataclass(frozen=True)
class Depth:
    """A queue's messages as SQS counts them (approximately): waiting to be received,
    received and not yet deleted (in flight), and delayed (timers not yet due)."""

    visible: int
    in_flight: int
    delayed: int


DEPTH_ATTRIBUTES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed"]


def depth(sqs: Any, url: str) -> Depth:
    """A queue's depth, in one GetQueueAttributes. (The age of its oldest message is not
    an attribute of the queue: SQS reports it to CloudWatch only.)"""
    with _translate("queue depth"):
        attrs = sqs.get_queue_attributes(QueueUrl=url,
                                         AttributeNames=DEPTH_ATTRIBUTES)["Attributes"]
    visible, in_flight, delayed = (int(attrs.get(a, "0")) for a in DEPTH_ATTRIBUTES)
    return Depth(visible, in_flight, delayed)


def _traced(entry: dict[str, Any], message: AnyMessage) -> dict[str, Any]:
    """`entry` (a SendMessage's parameters) with the trace context of `message`'s run in
    its MessageAttributes, while tracing is on; untouched otherwise."""
    if telemetry.active():
        attributes = telemetry.message_attributes(message.run_id)
        if attributes is not None:
            entry["MessageAttributes"] = attributes
    return entry


class Queues:
    def __init__(self, sqs: Any, names: ResourceNames) -> None:
        self.sqs = sqs
        with _translate("resolve queue URLs"):
            self.dispatch_url = sqs.get_queue_url(QueueName=names.dispatch_queue)["QueueUrl"]
            self.timer_url = sqs.get_queue_url(QueueName=names.timer_queue)["QueueUrl"]
        # Fault injection for the chaos tests: a real function in front of the real
        # SendMessage (never a mock). It returns the messages to send: fewer to drop
        # some, repeated ones to duplicate them.
        self.tamper: Callable[[list[Any]], list[Any]] | None = None

    def _tampered(self, messages: Sequence[Any]) -> list[Any]:
        return list(messages) if self.tamper is None else self.tamper(list(messages))

    def dispatch(self, messages: Sequence[Dispatch | Promote]) -> None:
        """Enqueue dispatches (and promotions of a fan-out's slices), ten per request."""
        messages = self._tampered(messages)
        for i in range(0, len(messages), 10):
            chunk = messages[i : i + 10]
            if len(chunk) == 1:
                with _translate("send dispatch"):
                    self.sqs.send_message(**_traced(
                        {"QueueUrl": self.dispatch_url, "MessageBody": encode(chunk[0])},
                        chunk[0]))
                continue
            entries = [_traced({"Id": str(j), "MessageBody": encode(m)}, m)
                       for j, m in enumerate(chunk)]
            with _translate("send dispatches"):
                resp = self.sqs.send_message_batch(QueueUrl=self.dispatch_url, Entries=entries)
            if resp.get("Failed"):
                raise StoreError(f"send dispatches: {len(resp['Failed'])} entries refused")

    def timer(self, message: AnyMessage, now: float) -> None:
        """Deliver `message` at its due time (re-delayed hop by hop past 15 minutes)."""
        for m in self._tampered([message]):
            # Rounded down: the message arrives at most a second early and the worker
            # waits out the rest, so sub-second schedules (throttle slots) keep their pace.
            delay = 0 if m.due_at is None else math.floor(max(0.0, m.due_at - now))
            with _translate("send timer"):
                self.sqs.send_message(**_traced(
                    {"QueueUrl": self.timer_url, "MessageBody": encode(m),
                     "DelaySeconds": min(MAX_DELAY, delay)}, m))

    def receive(
        self, url: str, *, max_messages: int = 10, wait: int = 5, visibility: float | None = None
    ) -> list[Received]:
        """Up to `max_messages`, invisible to others for `visibility` seconds (the
        queue's own timeout if None)."""
        extra: dict[str, Any] = {}
        if visibility is not None:
            extra["VisibilityTimeout"] = max(1, round(visibility))
        if telemetry.active():
            extra["MessageAttributeNames"] = [telemetry.TRACEPARENT]
        with _translate("receive"):
            resp = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max(1, min(10, max_messages)),
                WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
                **extra,
            )
        out = []
        for m in resp.get("Messages", []):
            try:
                msg: AnyMessage | None = decode(m["Body"])
            except ValidationError:
                msg = None
            count = int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            parent = m.get("MessageAttributes", {}).get(telemetry.TRACEPARENT, {})
            out.append(Received(url, m["ReceiptHandle"], msg, count,
                                parent.get("StringValue")))
        return out

    def delete(self, url: str, receipts: Sequence[str]) -> None:
        for i in range(0, len(receipts), 10):
            chunk = receipts[i : i + 10]
            entries = [{"Id": str(j), "ReceiptHandle": r} for j, r in enumerate(chunk)]
            with _translate("delete messages"):
                self.sqs.delete_message_batch(QueueUrl=url, Entries=entries)

    def keep_invisible(self, url: str, receipts: Sequence[str], seconds: float) -> None:
        """Keep received messages from other workers for `seconds` more (0: hand them
        back, visible to every worker at once)."""
        for i in range(0, len(receipts), 10):
            entries = [
                {"Id": str(j), "ReceiptHandle": r,
                 "VisibilityTimeout": 0 if seconds <= 0 else max(1, round(seconds))}
                for j, r in enumerate(receipts[i : i + 10])
            ]
            with _translate("keep messages invisible"):
                self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
