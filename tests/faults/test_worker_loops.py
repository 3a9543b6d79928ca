"""The worker's loops outlive what a call to the queue can raise besides an AWS error (a
connection to the emulator's process dropped, a bug in a library): a receive or a flush
that raises is logged and the loop goes on, where before it ended the thread and left the
worker deaf to its queue."""

from __future__ import annotations

import time
from typing import Any

from tests.support.harness import Harness

WORKFLOWS = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      a: { backend: fn, route: /echo }
      b: { backend: fn, route: /echo, dependsOn: [a] }
      c: { backend: fn, route: /echo, dependsOn: [b] }
"""


def test_a_receive_or_a_flush_that_raises_leaves_the_worker_at_work(
    harness_factory: Any
) -> None:
    h: Harness = harness_factory(WORKFLOWS)
    raised = {"ReceiveMessage": 0, "DeleteMessageBatch": 0}

    def once(event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        if not raised[operation]:
            raised[operation] += 1
            raise ConnectionError("the emulator process went away")

    for operation in raised:
        h.rt.clients.sqs.meta.events.register_first(f"before-send.sqs.{operation}", once)
    h.start_workers()
    assert h.wait(h.start("chain"))["status"] == "success"
    deadline = time.monotonic() + 30  # the acknowledged messages are deleted in batches
    while not raised["DeleteMessageBatch"]:
        assert time.monotonic() < deadline, "no batch of deletes was sent"
        time.sleep(0.05)
    assert h.wait(h.start("chain"))["status"] == "success"  # both loops went on
    assert raised == {"ReceiveMessage": 1, "DeleteMessageBatch": 1}
