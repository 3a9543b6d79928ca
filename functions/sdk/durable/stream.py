"""A version 2 answer: the call's operations as NDJSON lines, sent as they happen.

The workflow runs in a task of its own; each operation it reports goes out as one line
(operations that pile up while a line is being sent go out together, in one chunk).
The last line is an `EndOp`: a stream without it was cut, and the orchestrator keeps
what it committed before the cut. If the orchestrator goes away (the run was stopped,
it found a checkpoint it could not commit, or it died), the workflow's task is cancelled
as soon as the server says the client went away, or at the next send that fails; and
the runner's `present()` says so from then on, which the call checks before it starts
any step body (a body that would start between the hang-up and the cancel does not)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable

from starlette.types import Receive, Scope, Send

from functions.sdk.durable.workflow import op_doc
from functions.sdk.protocol import NDJSON, DurableOp, EndOp

__all__ = ["OpStream"]

# run(sink, present): `sink` takes each operation as it happens, `present()` says whether
# the orchestrator is still there.
Runner = Callable[[Callable[[DurableOp], None], Callable[[], bool]], Awaitable[float | None]]


def _line(op: DurableOp) -> bytes:
    return json.dumps(op_doc(op), separators=(",", ":"), allow_nan=False).encode() + b"\n"


class OpStream:
    """An ASGI response streaming what `run(sink)` reports to `sink`; `run` returns the
    run's deadline, which the closing `EndOp` carries."""

    def __init__(self, run: Runner, headers: dict[str, str] | None = None) -> None:
        self.run = run
        self.headers = {"content-type": NDJSON, "cache-control": "no-store",
                        **(headers or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        queue: asyncio.Queue[DurableOp | None] = asyncio.Queue()
        deadline: list[float | None] = [None]
        gone = asyncio.Event()

        async def work() -> None:
            try:
                deadline[0] = await self.run(queue.put_nowait, lambda: not gone.is_set())
            finally:
                queue.put_nowait(None)

        await send({"type": "http.response.start", "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in self.headers.items()]})
        task = asyncio.create_task(work())

        async def watch() -> None:
            # The request's body is read: what the server says next is that the client
            # went away (a server that only says so at the end says nothing early). One
            # that hands over the request again (a wrapper replaying the body) will not
            # say it either: nothing to watch, and no loop that never waits.
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    task.cancel()
                    return
                if message["type"] != "http.request" or not message.get("more_body"):
                    return

        watcher = asyncio.create_task(watch())
        try:
            ended = False
            while not ended:
                item = await queue.get()
                chunk = []
                while True:
                    if item is None:
                        ended = True
                        break
                    chunk.append(_line(item))
                    try:
                        item = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                if ended:
                    await task  # raises what the runner raised: the stream has no end line
                    chunk.append(_line(EndOp(deadline=deadline[0])))
                await send({"type": "http.response.body", "body": b"".join(chunk),
                            "more_body": not ended})
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
