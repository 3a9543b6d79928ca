"""`send-welcome-email` (README, "Durable examples"): look the customer up, write the
message, send it.

    orchestrator trigger send-welcome-email --input '{"userId": "user-123"}' --wait

Three steps, each recorded once it succeeds: a retry of `send-email` (the mail server
was down) does not look the customer up again, and the message it sends is the one
`generate-email` wrote, even if the template changed in between. The outbox keys the
message on the step's idempotency key, so a send that runs twice mails once."""

from __future__ import annotations

from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.common import keyed, required
from functions.examples.durable.mail import Outbox
from functions.examples.durable.shop import Customers

__all__ = ["render_welcome", "send_welcome_email"]


def render_welcome(customer: dict[str, Any]) -> dict[str, str]:
    first = customer["name"].split()[0]
    return {
        "to": customer["email"],
        "subject": f"Welcome to the shop, {first}!",
        "body": (f"Hello {first},\n\nyour account {customer['id']} is ready. Orders ship "
                 "within two working days.\n\nThe Example Shop team\n"),
    }


def send_welcome_email(customers: Customers, outbox: Outbox) -> Workflow:
    """The workflow, working on `customers` and mailing through `outbox`."""

    @workflow("send-welcome-email", max_steps=10, execution_timeout="1h")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        user_id = required(payload, "userId")
        # An unknown customer is a TerminalError: the run fails at once, unretried.
        customer = await step("fetch-user", customers.get, user_id)
        email = await step("generate-email", render_welcome, customer)
        sent = await step("send-email", keyed(ctx, outbox.send, email["to"], email["subject"],
                                              email["body"]),
                          retries=5, delay="2s")
        return {"success": True, "userId": user_id, "messageId": sent["id"]}

    return run
