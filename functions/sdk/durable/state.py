"""`ctx.state`: durable state cells, values scoped by an entity that outlive runs.

Each operation is recorded in the run's journal together with its effect (the
orchestrator performs it and writes both at once), so a replay gets the recorded
answer and changes nothing: the winner of `add` still sees that it won, `incr` keeps
the number it drew, `get` sees what it saw then (a later `get` is a new, live read)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from functions.sdk.durable.call import named, sent
from functions.sdk.durable.durations import Duration, seconds

if TYPE_CHECKING:
    from functions.sdk.durable.context import Context

__all__ = ["State"]


class State:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def _op(self, action: str, key: str, entity: str, name: str | None = None,
                  **fields: Any) -> Any:
        entity = named(entity, f"state.{action}: entity")
        if not isinstance(key, str) or not key or len(key) > 512:
            from functions.sdk.durable.errors import WorkflowError

            raise WorkflowError(f"state.{action}: the key is a string of 1 to 512 characters,"
                                f" got {key!r}")
        return await self._ctx._wait("state", name or f"{entity}/{key}", action=action,
                                     entity=entity, key=key, **fields)

    @staticmethod
    def _ttl(ttl: Duration | None, what: str) -> float | None:
        return None if ttl is None else seconds(ttl, what, allow_zero=False)

    async def add(self, key: str, *, entity: str, value: Any = None,
                  ttl: Duration | None = None, name: str | None = None) -> bool:
        """Claim `key` once for the whole project: True if this run created the cell
        (holding `value`, default true), False if it existed. Recorded: a replay of the
        winner is still the winner."""
        won = await self._op("add", key, entity, name, value=sent(value, "state.add: value"),
                             ttl=self._ttl(ttl, f"state.add {key!r} ttl"))
        return bool(won)

    async def incr(self, key: str, *, entity: str, by: int | float = 1,
                   name: str | None = None) -> int | float:
        """Add `by` to the number in the cell (0 if there is none) and return the new
        number, applied once however the run is retried (a ticket, a counter). `name`
        names the operation in the journal (default `<entity>/<key>`): a stable name
        where the key varies from run to run."""
        value: int | float = await self._op("incr", key, entity, name, by=by)
        return value

    async def get(self, key: str, *, entity: str, name: str | None = None) -> Any:
        """The cell's value now (None if there is none): a live read, recorded."""
        return await self._op("get", key, entity, name)

    async def set(self, key: str, value: Any, *, entity: str,
                  ttl: Duration | None = None, name: str | None = None) -> None:
        """Set the cell to `value` (for `ttl`, if given). `name`, for every operation
        here: its name in the journal (default `<entity>/<key>`)."""
        await self._op("set", key, entity, name, value=sent(value, "state.set: value"),
                       ttl=self._ttl(ttl, f"state.set {key!r} ttl"))

    async def delete(self, key: str, *, entity: str) -> bool:
        """Delete the cell; whether there was one."""
        return bool(await self._op("delete", key, entity))
