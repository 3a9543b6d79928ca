"""`reindex` (reference 002's "debounce with tickets"; README, "Recipes"): five updates in a
burst cause one reindex, on the last of them.

    for i in 1 2 3 4 5; do orchestrator event emit customer.updated --key acme; done

Each event starts a run that draws a ticket (`ctx.state.incr("ticket:<customer>")`,
entity `reindex`) and sleeps through a quiet window (`quietWindow` in the event's data,
default 5 s). Then it reads the ticket again, live: only the run holding the highest
ticket reindexes; the others end "superseded". The ticket must come from `incr`: its
answer is recorded, so the pass after the sleep holds the number it drew before it (a
marker written with `set` would be written again on every pass, and every run would
think it was last). Reindexes are written to `reindex/log.jsonl`. The `debounce:`
option of a workflow does the same without code (README, "Debounce")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.store import Log
from functions.sdk.failures import TerminalError

__all__ = ["QUIET_WINDOW", "Indexer", "reindex"]

QUIET_WINDOW = "5s"


class Indexer:
    def __init__(self, root: Path) -> None:
        self.log = Log(root / "reindex" / "log.jsonl")

    def reindex(self, customer: str, ticket: int) -> str:
        line = f"reindexing {customer} (ticket {ticket})"
        self.log.add(customer=customer, ticket=ticket, line=line)
        return line


def reindex(indexer: Indexer) -> Workflow:
    @workflow("reindex", max_steps=10)
    async def run(ctx: Context, event: dict[str, Any]) -> dict[str, Any]:
        data = (event or {}).get("data") or {}
        customer = ctx.subject or data.get("customer")
        if not customer:
            raise TerminalError("reindex needs a customer: the key of the event",
                                code="invalid_input")
        mine = await ctx.state.incr(f"ticket:{customer}", entity="reindex")
        await ctx.sleep(data.get("quietWindow", QUIET_WINDOW))
        latest = await ctx.state.get(f"ticket:{customer}", entity="reindex")
        if mine == latest:
            line = await step("reindex", lambda: indexer.reindex(customer, int(mine)))
            return {"customer": customer, "ticket": mine, "reindexed": True, "line": line}
        ctx.logger.info("ticket %s superseded", mine)
        return {"customer": customer, "ticket": mine, "reindexed": False,
                "line": f"ticket {mine} superseded"}

    return run
