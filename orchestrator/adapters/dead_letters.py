"""The dead-letter queue: dispatch messages SQS gave up on after the dispatch queue's
maxReceiveCount (template.yaml's RedrivePolicy), shown and redriven by the dashboard.

A dispatch is a hint (the rows decide what happens), so sending one back is always safe:
a step it names that has moved on ignores it. Looking does not take the messages: they
are received with a visibility of 0 and stay visible to the next look and to a redrive."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.settings import ResourceNames

__all__ = ["DeadLetter", "DeadLetters"]

LOOKS = 5  # receives per look: SQS hands out a sample of the queue on each


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    body: Any  # the decoded JSON, or the raw text when it is not JSON
    sent_at: float  # when it first entered the dispatch queue (seconds)
    receive_count: int


class DeadLetters:
    def __init__(self, sqs: Any, names: ResourceNames) -> None:
        self.sqs = sqs
        self.names = names
        self._urls: tuple[str, str] | None = None

    def urls(self) -> tuple[str, str]:
        """(the dead-letter queue's URL, the dispatch queue's)."""
        if self._urls is None:
            with _translate("resolve the dead-letter queue"):
                dlq = self.sqs.get_queue_url(QueueName=self.names.dead_letter_queue)["QueueUrl"]
                main = self.sqs.get_queue_url(QueueName=self.names.dispatch_queue)["QueueUrl"]
            self._urls = (dlq, main)
        return self._urls

    def count(self) -> int:
        with _translate("count dead letters"):
            attrs = self.sqs.get_queue_attributes(
                QueueUrl=self.urls()[0],
                AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
        return int(attrs.get("ApproximateNumberOfMessages", "0"))

    def _receive(self, visibility: int) -> list[dict[str, Any]]:
        with _translate("receive dead letters"):
            resp = self.sqs.receive_message(
                QueueUrl=self.urls()[0], MaxNumberOfMessages=10, WaitTimeSeconds=0,
                VisibilityTimeout=visibility,
                MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"])
        messages: list[dict[str, Any]] = resp.get("Messages", [])
        return messages

    def look(self, limit: int = 50) -> list[DeadLetter]:
        """Up to `limit` of the queue's messages, oldest first, left in the queue."""
        seen: dict[str, DeadLetter] = {}
        for _ in range(LOOKS):
            batch = self._receive(0)
            for m in batch:
                seen.setdefault(m["MessageId"], _letter(m))
            if not batch or len(seen) >= limit:
                break
        return sorted(seen.values(), key=lambda d: d.sent_at)[:limit]

    def redrive(self, only: Collection[str] | None = None) -> int:
        """Send messages back to the dispatch queue (those of `only`, by message id, or
        every one found), each deleted from this queue after it is sent: a crash in
        between sends one twice, which a hint allows. The number sent back."""
        dlq, main = self.urls()
        moved = misses = 0
        while misses < LOOKS:
            batch = self._receive(30)
            if not batch:
                break
            picked = [m for m in batch if only is None or m["MessageId"] in only]
            misses += not picked
            for m in picked:
                with _translate("redrive a dead letter"):
                    self.sqs.send_message(QueueUrl=main, MessageBody=m["Body"])
                    self.sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
                moved += 1
            rest = [m for m in batch if m not in picked]
            if rest:  # not asked for: visible again at once
                with _translate("hand dead letters back"):
                    self.sqs.change_message_visibility_batch(QueueUrl=dlq, Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"],
                         "VisibilityTimeout": 0} for i, m in enumerate(rest)])
            if only is not None and moved >= len(only):
                break
        return moved


def _letter(m: dict[str, Any]) -> DeadLetter:
    attrs = m.get("Attributes", {})
    try:
        body: Any = json.loads(m["Body"])
    except ValueError:
        body = m["Body"]
    return DeadLetter(m["MessageId"], body, int(attrs.get("SentTimestamp", "0")) / 1000,
                      int(attrs.get("ApproximateReceiveCount", "0")))
