"""`process-order` (README, "Durable examples"), with a saga: validate, reserve stock, charge, ship,
confirm; when a step after the first effect fails for good, undo what was done, newest
first, and tell the customer.

    orchestrator trigger process-order --wait --input \\
      '{"orderId": "o-1001", "customerId": "user-123", "items": [{"sku": "mug", "quantity": 2}]}'

Shipping fails for a customer the carrier cannot reach (user-789 lives in the US): the
payment is refunded, the stock released, a cancellation mailed, and the run ends
`success` with `status: refunded` (the order was handled; nothing is left to retry).
Each undo is a step of its own with generous retries: one that already ran is not run
again on replay, and a refund that fails for a while is tried again rather than left
undone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from functions.durable import Context, StepCall, StepFailed, Workflow, step, workflow
from functions.examples.durable.common import keyed, required
from functions.examples.durable.mail import Outbox
from functions.examples.durable.shop import Shop

__all__ = ["compensation", "process_order"]


def compensation(name: str, body: Callable[[], Any]) -> StepCall:
    """An undo step: it must end up done, so it keeps trying for about a day."""
    step_call: StepCall = step(name, body, retries=20, backoff="exponential", delay="5s",
                               max_delay="2h")
    return step_call


def _money(cents: int) -> str:
    return f"EUR {cents / 100:.2f}"


def process_order(shop: Shop, outbox: Outbox) -> Workflow:
    """The workflow, on `shop`'s files, mailing through `outbox`."""

    def validate(payload: dict[str, Any], order_id: str) -> dict[str, Any]:
        customer = shop.customers.get(required(payload, "customerId"))
        quote = shop.inventory.quote(payload.get("items"))
        address = payload.get("address") or {"name": customer["name"],
                                             "country": customer["country"]}
        return {"id": order_id, "customer": customer, "address": address, **quote}

    @workflow("process-order", max_steps=30, execution_timeout="1d")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        order_id = required(payload, "orderId")
        order = await step("validate-order", validate, payload, order_id)
        customer = order["customer"]
        undo: list[StepCall] = []  # rebuilt on every replay from the recorded steps
        charge: dict[str, Any] | None = None
        try:
            await step("reserve-stock", keyed(ctx, shop.inventory.reserve, order_id,
                                              order["lines"]))
            undo.append(compensation("release-stock",
                                     keyed(ctx, shop.inventory.release, order_id)))
            charge = await step("charge-payment", keyed(ctx, shop.payments.charge, order_id,
                                                        customer["id"], order["total"]))
            undo.append(compensation("refund-payment",
                                     keyed(ctx, shop.payments.refund, charge)))
            parcel = await step("ship-order", keyed(ctx, shop.shipping.ship, order_id,
                                                    order["address"]))
        except StepFailed as failure:
            for undo_step in reversed(undo):
                await undo_step
            reason = failure.error.get("message", failure.code)
            await step("send-cancellation", keyed(
                ctx, outbox.send, customer["email"], f"Order {order_id} cancelled",
                f"We could not complete order {order_id}: {reason}.\n"
                + ("The payment has been refunded in full.\n" if charge else "")))
            return {"orderId": order_id, "status": "refunded" if charge else "cancelled",
                    "failedStep": failure.step, "reason": reason}
        await step("send-confirmation", keyed(
            ctx, outbox.send, customer["email"], f"Order {order_id} is on its way",
            f"Thank you for your order of {_money(order['total'])}.\n"
            f"Tracking number: {parcel['tracking']}.\n"))
        return {"orderId": order_id, "status": "shipped", "charged": order["total"],
                "tracking": parcel["tracking"]}

    return run
