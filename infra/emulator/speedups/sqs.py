"""moto's SQS (moto.sqs.models), without its walks of a whole queue per message (the
speed-ups' registry, `__init__.py`, applies these, each behind its capability check).

Receives: before handing out each message, moto's ReceiveMessage asks for the queue's
retention period through GetQueueAttributes' code, which builds every attribute of the
queue, twice, counting the queue's messages three times each time: a receive of ten
messages from a queue with N waiting walked them sixty times. The retention period is read
from the queue itself, where those attributes take it from.

Sends: SendMessage builds them all too (once or twice per message) to read one of them,
ContentBasedDeduplication: within a send, the queue's attributes are that one (as moto
spells it, present only on a FIFO queue), so a batch of ten sent to a queue of N no longer
walks the N thirty times."""

from __future__ import annotations

import threading
from typing import Any

from infra.emulator.capabilities import resolve

__all__ = ["attributes", "retained", "send_message"]

# Threads inside SQSBackend.send_message (a depth: a send may nest another).
_sending = threading.local()


def retained(stock: Any) -> Any:
    unix_time = resolve("moto.core.utils:unix_time")

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str,
                                                   message: Any) -> bool:
        # With the period read where Queue.attributes reads it (getattr of its snake_case
        # name), not by building them all.
        period = self.get_queue(queue_name).message_retention_period
        return bool(period + message.sent_timestamp / 1000 > unix_time())

    return is_message_valid_based_on_retention_period


def send_message(stock: Any) -> Any:
    def send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        _sending.depth = getattr(_sending, "depth", 0) + 1
        try:
            return stock(self, *args, **kwargs)
        finally:
            _sending.depth -= 1

    return send_message


def attributes(stock: Any) -> Any:
    underscored = resolve("moto.core.utils:camelcase_to_underscores")("ContentBasedDeduplication")

    def attributes(self: Any) -> dict[str, Any]:
        # Queue.attributes. Within a send moto reads only ContentBasedDeduplication; it is
        # among the attributes of a FIFO queue only, a bool given as "true" / "false".
        if not getattr(_sending, "depth", 0):
            return stock.fget(self)  # type: ignore[no-any-return]
        if not self.fifo_queue:
            return {}
        value = getattr(self, underscored)
        return {"ContentBasedDeduplication": str(value).lower() if isinstance(value, bool)
                else value}

    return property(attributes)
