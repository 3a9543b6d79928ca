"""Durable workflows that do real work on local files, one module each:

| workflow | module | shows |
|---|---|---|
| `send-welcome-email` | `welcome` | steps recorded once; a mail sent once per idempotency key |
| `process-order` | `orders` | a saga: refund and release stock when shipping fails |
| `batch-process` | `batch` | fan-out with `max_parallel`, per-item failures, aggregate |
| `document-approval` | `approval` | a hook mailed to a person, approve or reject |
| `trial` | `trial` | one run per event, `wait_for_event` with a 14-day timeout |
| `fetch-rates` | `rates` | retries with exponential backoff, `retry_on` |
| `monthly-revenue` | `revenue` | fan-out and collect, results in input order |
| `book-trip` | `trip` | a saga: cancel bookings newest first, safe to replay |
| `handle-order` | `handle_once` | each order once: event id, `ctx.state.add`, idempotency key |
| `ticket-poll` | `poll` | a cursor in a state cell, moved only once a tick is done |
| `reindex` | `reindex` | debounce with tickets: `ctx.state.incr`, a quiet window, a live read |
| `customer-sync` | `customers` | a lock per customer: `async with ctx.lock(...)` |

Their state (`Services`) lives under one data directory: customers, stock, a payments
ledger, shipments, bookings, documents, accounts, and mail as `.eml` files in
`outbox/`. Each workflow is made by a function that takes the services it works on,
so a test can hand it its own (a fresh directory, or a service that fails on purpose).

    from functions.examples.durable import create_app
    serve(create_app(Path("/tmp/durable")), port=8001)   # POST /durable/<name>

The demo app (`functions.examples.monthly_report:create_app`, what `orchestrator dev`
serves) serves them too, with their data under `<work_dir>/durable`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from functions.durable import Workflow
from functions.examples.durable.approval import Documents, document_approval
from functions.examples.durable.batch import Batches, batch_process
from functions.examples.durable.customers import CustomerBook, customer_sync
from functions.examples.durable.handle_once import OrderDesk, handle_order
from functions.examples.durable.mail import Outbox
from functions.examples.durable.orders import process_order
from functions.examples.durable.poll import TicketFeed, ticket_poll
from functions.examples.durable.rates import RatesFeed, fetch_rates
from functions.examples.durable.reindex import Indexer, reindex
from functions.examples.durable.revenue import Sales, monthly_revenue
from functions.examples.durable.shop import Shop
from functions.examples.durable.trial import Accounts, trial
from functions.examples.durable.trip import Desk, book_trip
from functions.examples.durable.welcome import send_welcome_email
from functions.sdk import FunctionApp

__all__ = ["DEFAULT_DATA_DIR", "Services", "create_app", "workflows"]

DEFAULT_DATA_DIR = Path(".orchestrator/work/durable")


@dataclass(frozen=True)
class Services:
    """What the examples work on. Nothing is written until a step writes it; files that
    hold sample data (customers, stock, drafts) get it on first use."""

    outbox: Outbox
    shop: Shop
    batches: Batches
    documents: Documents
    accounts: Accounts
    rates: RatesFeed
    sales: Sales
    desk: Desk
    orders: OrderDesk
    tickets: TicketFeed
    indexer: Indexer
    customers: CustomerBook

    @classmethod
    def at(cls, root: Path) -> Services:
        root = root.resolve()
        return cls(outbox=Outbox(root / "outbox"), shop=Shop.at(root), batches=Batches(root),
                   documents=Documents(root), accounts=Accounts(root), rates=RatesFeed(root),
                   sales=Sales(root), desk=Desk(root), orders=OrderDesk(root),
                   tickets=TicketFeed(root), indexer=Indexer(root),
                   customers=CustomerBook(root))


def workflows(s: Services) -> list[Workflow]:
    """The workflows, working on `s`."""
    return [
        send_welcome_email(s.shop.customers, s.outbox),
        process_order(s.shop, s.outbox),
        batch_process(s.batches),
        document_approval(s.documents, s.outbox),
        trial(s.accounts, s.outbox),
        fetch_rates(s.rates),
        monthly_revenue(s.sales),
        book_trip(s.desk, s.outbox),
        handle_order(s.orders),
        ticket_poll(s.tickets),
        reindex(s.indexer),
        customer_sync(s.customers),
    ]


def create_app(data_dir: Path = DEFAULT_DATA_DIR,
               secret: str | Sequence[str] | None = None) -> FunctionApp:
    """An app serving the workflows on the files under `data_dir`."""
    app = FunctionApp(secret, title="durable-examples")
    app.workflow(*workflows(Services.at(data_dir)))
    return app
