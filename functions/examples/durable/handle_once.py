"""`handle-order` (reference 002's "handle each event once"; README, "Recipes"): charge and
ship an order once, however many times it arrives.

    orchestrator event emit order.placed --data '{"order": "1042"}'
    orchestrator event emit order.placed --data '{"order": "1042"}'   # a second event

Three layers of deduplication, one per kind of duplicate:

- the same event delivered twice starts one run: a run an event starts takes its id from
  the event's id and the workflow (`POST /events` with the same `id` is one event);
- two different events about one order are caught by `ctx.state.add("order-<n>",
  entity="orders")`, which claims the key once for the whole project; its answer is
  recorded, so a replay of the winner still sees that it won, and the loser ends
  "already handled";
- a step that dies after the payment service charged but before its result was
  recorded runs again with the same idempotency key, and `Payments` charges once per key.

Charges and shipments are written to `orders/payments.jsonl` and `orders/shipments.jsonl`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.common import keyed, required
from functions.examples.durable.store import Log

__all__ = ["OrderDesk", "handle_order"]


class OrderDesk:
    def __init__(self, root: Path) -> None:
        self.folder = root / "orders"
        self.payments = Log(self.folder / "payments.jsonl")
        self.shipments = Log(self.folder / "shipments.jsonl")

    def charge(self, order: str, *, key: str) -> dict[str, Any]:
        """Charge once per idempotency key (a retried step gets the first charge back)."""
        done = self.payments.entries(key=key)
        if done:
            return {"charged": order, "key": key, "again": True}
        self.payments.add(order=order, key=key)
        return {"charged": order, "key": key}

    def ship(self, order: str, *, key: str) -> dict[str, Any]:
        if not self.shipments.entries(key=key):
            self.shipments.add(order=order, key=key)
        return {"shipped": order}


def handle_order(desk: OrderDesk) -> Workflow:
    @workflow("handle-order", max_steps=10)
    async def run(ctx: Context, event: dict[str, Any]) -> dict[str, Any]:
        data = (event or {}).get("data") if isinstance(event, dict) and "data" in event \
            else event
        order = required(data, "order")
        if not await ctx.state.add(f"order-{order}", entity="orders"):
            ctx.logger.info("order %s already handled", order)
            return {"order": order, "handled": False, "message": f"order {order} already handled"}
        charged = await step("charge", keyed(ctx, desk.charge, order))
        await step("ship", keyed(ctx, desk.ship, order))
        return {"order": order, "handled": True, "key": charged["key"]}

    return run
