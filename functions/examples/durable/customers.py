"""`customer-sync` (reference 002's "a lock per customer"; README, "Recipes"): fetch a
customer's record, then update it inside `ctx.lock(f"customer-{customer}")`.

    orchestrator trigger customer-sync --input '{"customer": "acme", "seconds": 3}'

Three runs for one customer started together run their locked sections one after
another, in the order they reached the lock; a run for another customer does not wait.
The fetch outside the lock does not wait either. A run waiting for the lock holds
nothing; the lock is released at the block's end (and by a run that ends, however it
ends). Each section's start and end are written to `customers/sections.jsonl`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.common import required
from functions.examples.durable.store import Log

__all__ = ["CustomerBook", "customer_sync"]


class CustomerBook:
    def __init__(self, root: Path) -> None:
        self.sections = Log(root / "customers" / "sections.jsonl")

    async def update(self, customer: str, run_id: str, seconds: float) -> dict[str, Any]:
        self.sections.add(event="start", customer=customer, run=run_id, at=time.time())
        await asyncio.sleep(seconds)  # the update's own work
        self.sections.add(event="end", customer=customer, run=run_id, at=time.time())
        return {"updated": customer}


def customer_sync(book: CustomerBook) -> Workflow:
    @workflow("customer-sync", max_steps=10)
    async def run(ctx: Context, payload: Any) -> dict[str, Any]:
        customer = required(payload, "customer")
        seconds = float((payload or {}).get("seconds", 3))
        await step("fetch", lambda: {"customer": customer})
        async with ctx.lock(f"customer-{customer}"):
            done: dict[str, Any] = await step(
                "update", lambda: book.update(customer, ctx.run_id, seconds))
        return done

    return run
