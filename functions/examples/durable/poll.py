"""`ticket-poll` (reference 002's "poll with a cursor on a schedule"; README, "Recipes"):
pick up new tickets on each tick, from where the last tick stopped.

    orchestrator trigger ticket-poll --wait            # or let its schedule fire it

The cursor lives in a state cell (`cursor` of entity `tickets`), which outlives every
run: each tick reads it, fetches from there (a step: a replay does not fetch again),
processes the batch and only then moves the cursor. Three ticks process 0..10, 10..20
and 20..30; a tick that fails before the last line (`{"fail": true}` makes its process
step fail) leaves the cursor where it was, and the next tick fetches the same range
again, so processing must be safe to repeat. Each batch processed is written to
`tickets/processed.jsonl`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.store import Log
from functions.sdk.failures import TerminalError

__all__ = ["BATCH", "TicketFeed", "ticket_poll"]

BATCH = 10


class TicketFeed:
    """Stands in for `GET /tickets?since=<cursor>`: the next BATCH tickets."""

    def __init__(self, root: Path) -> None:
        self.processed = Log(root / "tickets" / "processed.jsonl")

    def fetch(self, since: int) -> int:
        return since + BATCH

    def process(self, since: int, latest: int, *, fail: bool) -> str:
        if fail:
            raise TerminalError(f"processing tickets {since}..{latest} failed",
                                code="processing_failed")
        line = f"processed tickets {since}..{latest}"
        self.processed.add(since=since, latest=latest, line=line)
        return line


def ticket_poll(feed: TicketFeed) -> Workflow:
    @workflow("ticket-poll", max_steps=10)
    async def run(ctx: Context, payload: Any) -> dict[str, Any]:
        fail = bool(isinstance(payload, dict) and payload.get("fail"))
        since = int(await ctx.state.get("cursor", entity="tickets") or 0)
        latest = await step("fetch", lambda: feed.fetch(since))
        line = await step("process", lambda: feed.process(since, latest, fail=fail))
        await ctx.state.set("cursor", latest, entity="tickets")
        return {"since": since, "latest": latest, "line": line}

    return run
