"""Step functions of the flow-control recipes (README, "Recipes"): what a YAML workflow
with a concurrency group or a throttle protects.

- `/deploy` (workflow `deploy-prod`, `concurrency: {group: deploy-prod, policy: queue}`):
  a deploy that takes `seconds` (input, default 4, at most 30). It appends its start and
  end to ``<work_dir>/flow/deploys.jsonl``; with the group, no two deploys overlap and a
  second one waits, queued, until the first is done.
- `/callCrm` (workflow `enrich`, `throttle: {limit: 6, period: 1m, key: crm-<tenant>}`):
  stands in for a CRM that allows six calls a minute per tenant, and appends each call
  (tenant, time) to ``<work_dir>/flow/crm.jsonl``.

- `/pageLead`, `/refundOrder`, `/closeRefund` (workflow `refund`, two approval gates:
  ask, then the team lead if nobody answered): page the lead, refund the order, or
  close it unrefunded; each appends what it did to ``<work_dir>/flow/refunds.jsonl``.

- `/fetchCustomer`, `/updateCustomer` (workflow `customer-update`, whose update step has
  `lock: "customer-${{ input.customer }}"`): the update appends its start and end to
  ``<work_dir>/flow/customers.jsonl`` and takes `seconds` (input, default 3); with the
  lock, two updates of one customer never overlap.

- `/reindexCustomer` (workflow `reindex-customer`, `debounce: {key: <the event's key>,
  period: 2s, maxWait: 30s}` on event `customer.changed`): reindexes the customer the
  event names, appending it and the event's data to ``<work_dir>/flow/reindex.jsonl``;
  five events in a burst cause one call, with the fifth event.

All are safe to run twice (execution is at-least-once): a repeated call appends a
second line with the same idempotency key, which the log keeps so a reader can tell."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from functions.examples.durable.store import Log
from functions.sdk import FunctionApp, StepRequest, TerminalError

__all__ = ["DEFAULT_DEPLOY_SECONDS", "MAX_DEPLOY_SECONDS", "Flow", "register"]

DEFAULT_DEPLOY_SECONDS = 4.0
MAX_DEPLOY_SECONDS = 30.0


class Flow:
    """The recipes' logs under one directory."""

    def __init__(self, root: Path) -> None:
        self.deploys = Log(root / "deploys.jsonl")
        self.crm = Log(root / "crm.jsonl")
        self.refunds = Log(root / "refunds.jsonl")
        self.customers = Log(root / "customers.jsonl")
        self.reindexes = Log(root / "reindex.jsonl")


def _seconds(value: Any) -> float:
    if value is None:
        return DEFAULT_DEPLOY_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value <= MAX_DEPLOY_SECONDS:
        raise TerminalError(f"input.seconds: a number of seconds from 0 to {MAX_DEPLOY_SECONDS:g},"
                            f" got {value!r}")
    return float(value)


def register(app: FunctionApp, root: Path) -> Flow:
    """Serve the two routes on `app`, logging under `root`."""
    flow = Flow(root)

    @app.step("/deploy", summary="A deploy that takes input.seconds; one at a time.")
    def deploy(req: StepRequest) -> dict[str, Any]:
        given = req.input if isinstance(req.input, dict) else {}
        seconds = _seconds(given.get("seconds"))
        started = time.time()
        flow.deploys.add(event="start", run=req.run_id, at=started, key=req.idempotency_key)
        time.sleep(seconds)  # the deploy's own work: a real step takes its time
        ended = time.time()
        flow.deploys.add(event="end", run=req.run_id, at=ended, key=req.idempotency_key)
        return {"started": started, "ended": ended}

    @app.step("/callCrm", summary="Call the CRM for input.tenant (six a minute per tenant).")
    def call_crm(req: StepRequest) -> dict[str, Any]:
        given = req.input if isinstance(req.input, dict) else {}
        tenant = given.get("tenant")
        if not isinstance(tenant, str) or not tenant:
            raise TerminalError("input.tenant: the tenant to call the CRM for (a string)")
        at = time.time()
        flow.crm.add(tenant=tenant, at=at, run=req.run_id, key=req.idempotency_key)
        return {"tenant": tenant, "calledAt": at}

    def _order(req: StepRequest) -> str:
        given = req.input if isinstance(req.input, dict) else {}
        return str(given.get("order", "1042"))

    @app.step("/pageLead", summary="Page the team lead about an unanswered refund.")
    def page_lead(req: StepRequest) -> dict[str, Any]:
        order = _order(req)
        flow.refunds.add(action="page-lead", order=order, run=req.run_id,
                         key=req.idempotency_key)
        return {"paged": True, "order": order}

    @app.step("/refundOrder", summary="Refund the order (once per idempotency key).")
    def refund_order(req: StepRequest) -> dict[str, Any]:
        order = _order(req)
        flow.refunds.add(action="refund", order=order, run=req.run_id, key=req.idempotency_key)
        return {"refunded": order}

    @app.step("/closeRefund", summary="Leave the refund open: nobody answered.")
    def close_refund(req: StepRequest) -> dict[str, Any]:
        order = _order(req)
        flow.refunds.add(action="close", order=order, run=req.run_id, key=req.idempotency_key)
        return {"closed": order, "refunded": False}

    def _customer(req: StepRequest) -> str:
        given = req.input if isinstance(req.input, dict) else {}
        customer = given.get("customer")
        if not isinstance(customer, str) or not customer:
            raise TerminalError("input.customer: the customer to update (a string)")
        return customer

    @app.step("/fetchCustomer", summary="Fetch a customer's record (outside any lock).")
    def fetch_customer(req: StepRequest) -> dict[str, Any]:
        return {"customer": _customer(req), "fetchedAt": time.time()}

    @app.step("/updateCustomer", summary="Update a customer: one at a time per customer.")
    def update_customer(req: StepRequest) -> dict[str, Any]:
        customer = _customer(req)
        given = req.input if isinstance(req.input, dict) else {}
        seconds = _seconds(given.get("seconds", 3))
        flow.customers.add(event="start", customer=customer, run=req.run_id, at=time.time())
        time.sleep(seconds)  # the update's own work
        flow.customers.add(event="end", customer=customer, run=req.run_id, at=time.time())
        return {"updated": customer}

    @app.step("/reindexCustomer", summary="Reindex the customer an event names.")
    def reindex_customer(req: StepRequest) -> dict[str, Any]:
        event = req.input if isinstance(req.input, dict) else {}
        customer = str(event.get("key") or "")
        flow.reindexes.add(customer=customer, data=event.get("data"), run=req.run_id,
                           event=event.get("id"))
        return {"reindexed": customer}

    return flow
