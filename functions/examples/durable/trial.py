"""`trial` (README, "Durable examples"): a 14-day trial that an upgrade can cut short. The manifest
starts one run per `trial.started` event; the event's key is the customer.

    orchestrator event emit trial.started --key cust-1 --data '{"email": "ada@example.com"}'
    orchestrator event emit trial.started --key cust-2
    orchestrator event emit plan.upgraded --key cust-1 --data '{"plan": "pro"}'

The run starts the trial and mails a welcome, then waits for `plan.upgraded` about
that customer (a run only sees events with its own subject, or none), for 14 days
(`"trialLength": "30s"` in the event's data makes it short enough to watch). An upgrade
takes the `upgrade` branch and a thank-you mail; the end of the wait takes `downgrade`.
The outcome is recorded the first time the wait ends, so an upgrade that lands just
after the deadline does not change a branch already taken. Nothing is held while the
run waits. The accounts live in `accounts.json`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, seconds, step, workflow
from functions.examples.durable.common import keyed
from functions.examples.durable.mail import Outbox
from functions.examples.durable.store import Records
from functions.sdk.failures import TerminalError

__all__ = ["TRIAL_LENGTH", "Accounts", "trial"]

TRIAL_LENGTH = "14d"


class Accounts:
    def __init__(self, root: Path) -> None:
        self.records = Records(root / "accounts.json", lambda: {"accounts": {}})

    def get(self, customer: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.records.read()["accounts"].get(customer)
        return found

    def _set(self, customer: str, key: str, **fields: Any) -> dict[str, Any]:
        def effect(doc: dict[str, Any]) -> dict[str, Any]:
            account = doc["accounts"].setdefault(customer, {"customer": customer,
                                                            "history": []})
            account.update(fields)
            account["history"].append(fields["plan"])
            return dict(account)
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer

    def start_trial(self, customer: str, email: str, ends: str, *, key: str
                    ) -> dict[str, Any]:
        return self._set(customer, key, plan="trial", email=email, trial_ends=ends)

    def upgrade(self, customer: str, plan: str, *, key: str) -> dict[str, Any]:
        return self._set(customer, key, plan=plan)

    def downgrade(self, customer: str, *, key: str) -> dict[str, Any]:
        return self._set(customer, key, plan="free")


def trial(accounts: Accounts, outbox: Outbox) -> Workflow:
    """The workflow, on `accounts`, mailing through `outbox`."""

    @workflow("trial", max_steps=10, execution_timeout="60d")
    async def run(ctx: Context, event: dict[str, Any]) -> dict[str, Any]:
        data = (event or {}).get("data") or {}
        customer = ctx.subject or data.get("customer")
        if not customer:
            raise TerminalError("a trial needs a customer: the key of the trial.started "
                                "event", code="invalid_input")
        email = data.get("email") or f"{customer}@example.com"
        length = data.get("trialLength", TRIAL_LENGTH)
        ends = ctx.now() + timedelta(seconds=seconds(length, "trialLength"))

        await step("start-trial", keyed(ctx, accounts.start_trial, customer, email,
                                        ends.isoformat()))
        await step("welcome-email", keyed(
            ctx, outbox.send, email, "Your trial has started",
            f"Enjoy every feature until {ends:%d %B %Y, %H:%M} UTC.\n", customer=customer))
        upgraded = await ctx.wait_for_event("plan.upgraded", subject=customer, timeout=length)
        if upgraded is not None:
            plan = (upgraded.get("data") or {}).get("plan") or "pro"
            await step("upgrade", keyed(ctx, accounts.upgrade, customer, plan))
            await step("thank-email", keyed(
                ctx, outbox.send, email, f"Welcome to {plan}",
                f"Thank you for upgrading to {plan}.\n", customer=customer))
            return {"customer": customer, "upgraded": True, "plan": plan,
                    "event": upgraded.get("id")}
        await step("downgrade", keyed(ctx, accounts.downgrade, customer))
        await step("trial-over-email", keyed(
            ctx, outbox.send, email, "Your trial has ended",
            "Your account is on the free plan now. Upgrade any time.\n", customer=customer))
        return {"customer": customer, "upgraded": False, "plan": "free"}

    return run
