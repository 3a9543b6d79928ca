"""`ctx.lock(key)`: one run at a time in a section, the others waiting in arrival order.

    async with ctx.lock(f"customer-{customer}"):   # released at the block's end
        ...
    await ctx.lock("deploy-prod")                  # held until the run ends

Waiting holds nothing (the call ends; the hand-over brings the run back). Taking and
releasing are operations of the journal: a replay does not take the lock again. A run
that ends, however it ends, releases the locks it holds."""

from __future__ import annotations

from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from functions.sdk.durable.call import named

if TYPE_CHECKING:
    from functions.sdk.durable.context import Context

__all__ = ["Lock"]


class Lock:
    def __init__(self, ctx: Context, key: str) -> None:
        self._ctx = ctx
        self.key = named(key, "lock: key")

    async def acquire(self) -> Lock:
        """Wait (holding nothing) until this run holds the lock."""
        await self._ctx._wait("lock", self.key, action="acquire", key=self.key)
        return self

    async def release(self) -> None:
        """Let the lock go to the next in line."""
        await self._ctx._wait("lock", self.key, action="release", key=self.key)

    def __await__(self) -> Generator[Any, None, Lock]:
        return self.acquire().__await__()

    async def __aenter__(self) -> Lock:
        return await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            return  # the call is suspending (or stopping): the block has not ended
        await self.release()
