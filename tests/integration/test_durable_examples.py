"""The durable examples (functions/examples/durable/) on the real engine: WorkflowEnv runs
them on the embedded emulator, served over real HTTP, with a fake clock (a 14-day trial
takes milliseconds); the batch's concurrency is measured with real worker threads. Every
assertion is on what the examples left on disk: mail in the outbox, the payments ledger,
stock, bookings, published files, the services' own request logs."""

from __future__ import annotations

import asyncio
import csv
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from functions.durable import Workflow, advance
from functions.examples import monthly_report
from functions.examples.durable import Services, create_app, workflows
from functions.examples.durable.batch import Batches, batch_process
from functions.examples.durable.revenue import ORDERS_CSV, Sales, monthly_revenue
from functions.examples.durable.trip import Desk, book_trip
from functions.sdk import FunctionApp
from functions.sdk.serving import BackgroundServer
from infra.direct import create_data_resources
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from orchestrator.manifest.loader import lint_manifest, lint_text
from orchestrator.manifest.routes import read_spec
from orchestrator.services.durable.hooks import Gone
from orchestrator.testing import RunFailed, WorkflowEnv
from tests.support.harness import Harness, fresh_settings

ROOT = Path(__file__).resolve().parents[2]
DAY = 86400.0
SECRET = "durable-examples-secret"
TRIAL = {"trial": {"on": {"event": "trial.started"}}}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def s(data: Path) -> Services:
    """The examples' files, as the tests read them (the app opens the same directory)."""
    return Services.at(data)


@pytest.fixture
def env(emulator: Emulator, data: Path) -> Iterator[WorkflowEnv]:
    """The examples' own app (signed), on the session's emulator."""
    with WorkflowEnv(create_app(data, secret=SECRET), secret=SECRET, options=TRIAL,
                     emulator=emulator) as e:
        yield e


def names(env: WorkflowEnv, run_id: str) -> list[tuple[str, str]]:
    return [(e["name"], e["status"]) for e in env.journal(run_id) if e.get("scope") == ""]


def mail(s: Services, to: str) -> list[str]:
    return sorted(m["subject"] for m in s.outbox.messages(to))


# ---- send-welcome-email --------------------------------------------------------------


def test_the_welcome_email_is_written_to_the_outbox_once(env: WorkflowEnv, s: Services) -> None:
    run_id = env.start("send-welcome-email", {"userId": "user-123"})
    env.run_until_idle()
    result = env.result(run_id)
    [message] = s.outbox.messages()
    assert result == {"success": True, "userId": "user-123", "messageId": message["id"]}
    assert message["to"] == "ada@example.com"
    assert message["subject"] == "Welcome to the shop, Ada!"
    assert "your account user-123 is ready" in message["body"]
    assert message["key"].startswith(run_id + ":")
    assert Path(message["path"]).read_bytes().startswith(b"From: Example Shop")
    assert names(env, run_id) == [("fetch-user", "ok"), ("generate-email", "ok"),
                                  ("send-email", "ok")]


def test_an_unknown_user_fails_at_once_and_mails_nobody(env: WorkflowEnv, s: Services) -> None:
    run_id = env.start("send-welcome-email", {"userId": "user-000"})
    env.run_until_idle()
    with pytest.raises(RunFailed) as failed:
        env.result(run_id)
    assert failed.value.error["code"] == "unknown_customer"
    [entry] = env.journal(run_id)
    assert (entry["name"], entry["status"], entry["attempts"]) == ("fetch-user", "error", 1)
    assert s.outbox.messages() == []


# ---- process-order -------------------------------------------------------------------


def order(order_id: str, customer: str, **items: int) -> dict[str, Any]:
    return {"orderId": order_id, "customerId": customer,
            "items": [{"sku": sku, "quantity": n} for sku, n in items.items()]}


def test_an_order_is_reserved_charged_shipped_and_confirmed(env: WorkflowEnv,
                                                            s: Services) -> None:
    stock = s.shop.inventory.stock("mug")
    run_id = env.start("process-order", order("o-1", "user-123", mug=2, cap=1))
    env.run_until_idle()
    result = env.result(run_id)
    assert result["status"] == "shipped" and result["charged"] == 2 * 1250 + 1800
    [charge] = s.shop.payments.entries("o-1")
    assert (charge["kind"], charge["amount"], charge["customer"]) == ("charge", 4300, "user-123")
    assert s.shop.inventory.stock("mug") == stock - 2
    assert s.shop.shipping.parcels()["o-1"]["tracking"] == result["tracking"]
    assert mail(s, "ada@example.com") == ["Order o-1 is on its way"]


def test_shipping_that_fails_refunds_the_charge_and_releases_the_stock(
        env: WorkflowEnv, s: Services) -> None:
    stock = s.shop.inventory.stock("tee")
    run_id = env.start("process-order", order("o-2", "user-789", tee=2))  # lives in the US
    env.run_until_idle()
    assert env.result(run_id) == {
        "orderId": "o-2", "status": "refunded", "failedStep": "ship-order",
        "reason": "order o-2: the carrier does not deliver to US"}
    ledger = s.shop.payments.entries("o-2")
    assert [(e["kind"], e["amount"]) for e in ledger] == [("charge", 4800), ("refund", -4800)]
    assert ledger[1]["charge"] == ledger[0]["id"]
    assert s.shop.inventory.stock("tee") == stock
    assert "o-2" not in s.shop.shipping.parcels()
    assert mail(s, "grace@example.com") == ["Order o-2 cancelled"]
    # The undo steps run newest first: the money back, then the stock.
    assert names(env, run_id) == [
        ("validate-order", "ok"), ("reserve-stock", "ok"), ("charge-payment", "ok"),
        ("ship-order", "error"), ("refund-payment", "ok"), ("release-stock", "ok"),
        ("send-cancellation", "ok")]


def test_an_order_for_more_than_the_stock_charges_nothing(env: WorkflowEnv,
                                                          s: Services) -> None:
    run_id = env.start("process-order", order("o-3", "user-456", poster=5))  # 3 in stock
    env.run_until_idle()
    result = env.result(run_id)
    assert (result["status"], result["failedStep"]) == ("cancelled", "reserve-stock")
    assert s.shop.payments.entries("o-3") == []
    assert s.shop.inventory.stock("poster") == 3
    [message] = s.outbox.messages("alan@example.com")
    assert "refunded" not in message["body"]


# ---- batch-process -------------------------------------------------------------------


BATCH = [{"id": "a", "text": "To be, or not to be: that is the question"},
         {"id": "b", "text": "   "},
         {"id": "c", "text": "The rest is silence"}]


def test_a_batch_aggregates_its_items_and_a_second_run_finishes_only_what_is_left(
        env: WorkflowEnv, s: Services) -> None:
    run_id = env.start("batch-process", {"batchId": "b-1", "items": BATCH, "maxParallel": 2})
    env.run_until_idle()
    assert env.result(run_id) == {"batchId": "b-1", "total": 3, "succeeded": 2, "failed": 1,
                                  "words": 14, "failures": {"b": "item b has no words to count"}}
    results = s.batches.root / "b-1" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["a.json", "c.json"]
    assert json.loads((results / "a.json").read_text())["top"] == ["be", "to", "is"]
    batch = s.batches.read("b-1")
    assert batch["status"] == "completed"
    assert [i["status"] for i in batch["items"]] == ["done", "pending", "done"]

    again = env.start("batch-process", {"batchId": "b-1"})
    env.run_until_idle()
    assert env.result(again)["total"] == 1  # only b, which fails again
    ran = [e["item"] for e in s.batches.worklog.entries(event="start")]
    assert sorted(ran) == ["a", "b", "b", "c"]


class SlowBatches(Batches):
    """Items that take a while, so that the ones running at once overlap."""

    def _work(self, batch_id: str, item: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.1)
        return super()._work(batch_id, item)


def peak(worklog: list[dict[str, Any]]) -> int:
    """How many item bodies ran at once at most, from their own start and end lines."""
    # An end and a start at the same instant: the end first (-1 sorts before +1).
    moves = sorted((e["at"], 1 if e["event"] == "start" else -1) for e in worklog)
    running = most = 0
    for _, move in moves:
        running += move
        most = max(most, running)
    return most


def run_with_workers(emulator: Emulator, tmp_path: Path, wf: Workflow,
                     payload: dict[str, Any]) -> dict[str, Any]:
    """Run `wf` to its end on the real engine with a worker of 8 threads (many calls at
    once, in real time); the run's view."""
    app = FunctionApp(None, title="test")
    app.workflow(wf)
    manifest = ('backends:\n  app: { url: "${APP}" }\n'
                f"workflows:\n  {wf.name}: {{ backend: app }}\n")
    settings = fresh_settings(emulator.url)
    with BackgroundServer(app) as server:
        # The tables and queues straight through the services' APIs: a tenth of a second,
        # where the first CloudFormation stack in a process takes more than one.
        h = Harness.build(settings, manifest, tmp_path, {"APP": server.url},
                          clients=emulator.attach(make_clients(settings)),
                          provision=create_data_resources)
        try:
            h.start_workers(1, threads=8)
            return h.wait(h.start(wf.name, payload), timeout=60)
        finally:
            h.close()


def test_a_batch_never_runs_more_than_max_parallel_items_at_once(
        emulator: Emulator, tmp_path: Path) -> None:
    batches = SlowBatches(tmp_path / "data")
    items = [{"id": f"i{n}", "text": f"item number {n}"} for n in range(8)]
    # 8 threads: room for far more than two at once.
    view = run_with_workers(emulator, tmp_path, batch_process(batches),
                            {"batchId": "wide", "items": items, "maxParallel": 2})
    assert view["status"] == "success", view
    assert view["output"]["succeeded"] == 8
    log = batches.worklog.entries(batch="wide")
    assert sorted(e["item"] for e in log if e["event"] == "start") == [f"i{n}" for n in range(8)]
    assert peak(log) == 2


# ---- document-approval ---------------------------------------------------------------


def hook_url(s: Services, approver: str) -> str:
    [request] = [m for m in s.outbox.messages(approver) if m["subject"].startswith("Please")]
    url: str = request["headers"]["X-Hook"]
    assert f"POST {url} with" in request["body"]
    return url


def test_an_approved_document_is_published_once_through_its_hook(
        env: WorkflowEnv, s: Services) -> None:
    run_id = env.start("document-approval", {"documentId": "doc-1"})
    env.advance("1h")  # mailed, and waiting for the decision
    assert env.view(run_id)["waiting"]["kind"] == "signal"
    url = hook_url(s, "grace@example.com")
    decision = {"approved": True, "by": "Grace", "comment": "ship it"}
    first = env.execute_hook(url, decision)
    # Single-use: another decision is refused, the same one again sends nothing new.
    with pytest.raises(Gone):
        env.execute_hook(url, {"approved": False})
    assert env.execute_hook(url, decision) == {**first, "duplicate": True}
    env.run_until_idle()
    assert env.result(run_id)["published"] is True
    published = s.documents.root / "published" / "doc-1.md"
    text = published.read_text()
    assert text.startswith("# Returns policy, 2027 edition\n")
    assert text.endswith("Approved by Grace: ship it\n")
    assert s.documents.get("doc-1")["status"] == "published"
    assert len(s.documents.publications.entries(document="doc-1")) == 1
    assert mail(s, "ada@example.com") == ["Published: Returns policy, 2027 edition"]
    [signal] = [e for e in env.journal(run_id) if e["kind"] == "signal"]
    assert signal["value"] == {"approved": True, "by": "Grace", "comment": "ship it",
                               "documentId": "doc-1"}


@pytest.mark.parametrize("answer", [{"approved": False, "comment": "too vague"}, None])
def test_a_rejected_or_unanswered_document_is_not_published(
        env: WorkflowEnv, s: Services, answer: dict[str, Any] | None) -> None:
    run_id = env.start("document-approval", {"documentId": "doc-2"})
    before = env.now
    env.advance("1h")
    if answer is not None:
        env.execute_hook(hook_url(s, "grace@example.com"), answer)
    env.run_until_idle()
    reason = "too vague" if answer else "nobody decided within 7d"
    assert env.result(run_id) == {"published": False, "documentId": "doc-2", "reason": reason}
    assert not (s.documents.root / "published" / "doc-2.md").exists()
    assert s.documents.get("doc-2")["status"] == "rejected"
    assert mail(s, "alan@example.com") == ["Not published: Shipping to the islands"]
    if answer is None:
        assert env.now - before == pytest.approx(7 * DAY, abs=5.0)


# ---- trial ---------------------------------------------------------------------------


def account(s: Services, customer: str) -> dict[str, Any]:
    found = s.accounts.get(customer)
    assert found is not None, f"no account for {customer}"
    return found


def test_an_upgrade_ends_its_own_trial_and_the_other_is_downgraded_after_14_days(
        env: WorkflowEnv, s: Services) -> None:
    started = env.now
    [one] = env.emit("trial.started", {"email": "one@example.com"}, key="cust-1")
    [two] = env.emit("trial.started", {"email": "two@example.com"}, key="cust-2")
    env.advance("3d")
    assert env.emit("plan.upgraded", {"plan": "team"}, key="cust-1") == []
    env.run_until_idle()

    assert env.result(one)["upgraded"] is True
    assert env.result(two) == {"customer": "cust-2", "upgraded": False, "plan": "free"}
    assert account(s, "cust-1")["history"] == ["trial", "team"]
    assert account(s, "cust-2")["history"] == ["trial", "free"]
    assert mail(s, "one@example.com") == ["Welcome to team", "Your trial has started"]
    assert mail(s, "two@example.com") == ["Your trial has ended", "Your trial has started"]
    assert names(env, one) == [("start-trial", "ok"), ("welcome-email", "ok"),
                               ("plan.upgraded", "ok"), ("upgrade", "ok"),
                               ("thank-email", "ok")]
    assert names(env, two) == [("start-trial", "ok"), ("welcome-email", "ok"),
                               ("plan.upgraded", "timeout"), ("downgrade", "ok"),
                               ("trial-over-email", "ok")]
    waited = {run: next(e for e in env.journal(run) if e["kind"] == "event")
              for run in (one, two)}
    assert waited[one]["ended"] - waited[one]["started"] == pytest.approx(3 * DAY, abs=5.0)
    assert waited[two]["ended"] - waited[two]["started"] == pytest.approx(14 * DAY, abs=5.0)
    assert env.now - started == pytest.approx(14 * DAY, abs=5.0)


def test_an_upgrade_after_the_deadline_does_not_change_the_branch_taken(
        env: WorkflowEnv, s: Services) -> None:
    [run_id] = env.emit("trial.started", {}, key="cust-3")
    env.run_until_idle()
    env.emit("plan.upgraded", {"plan": "pro"}, key="cust-3")
    env.run_until_idle()
    assert env.result(run_id)["upgraded"] is False
    assert account(s, "cust-3")["plan"] == "free"


# ---- fetch-rates ---------------------------------------------------------------------


def test_fetch_rates_backs_off_2s_then_4s_on_the_fake_clock(env: WorkflowEnv,
                                                          s: Services) -> None:
    run_id = env.start("fetch-rates", {"base": "USD", "outages": 2})

    def attempts() -> list[int]:
        return [e["attempt"] for e in s.rates.requests.entries()]

    env.advance("1.9s")
    assert attempts() == [1]  # failed; the next one is due 2 s after it
    env.advance("0.2s")
    assert attempts() == [1, 2]  # failed; the next one is due 4 s after it
    env.advance("3.8s")
    assert attempts() == [1, 2]
    env.advance("0.2s")
    assert attempts() == [1, 2, 3]
    env.run_until_idle()
    result = env.result(run_id)
    assert [e["outcome"] for e in s.rates.requests.entries()] == ["unavailable"] * 2 + ["ok"]
    assert len({e["key"] for e in s.rates.requests.entries()}) == 1  # one key, 3 attempts
    stored = json.loads(Path(result["path"]).read_text())
    assert stored["base"] == "USD" and stored["rates"]["EUR"] == pytest.approx(1 / 1.0832,
                                                                                 rel=1e-5)
    fetched = env.journal(run_id)[0]
    assert (fetched["name"], fetched["attempts"]) == ("fetch-rates", 3)


def test_an_unknown_currency_is_not_retried(env: WorkflowEnv, s: Services) -> None:
    run_id = env.start("fetch-rates", {"base": "XYZ"})
    env.run_until_idle()
    with pytest.raises(RunFailed, match="no currency 'XYZ'"):
        env.result(run_id)
    assert [e["outcome"] for e in s.rates.requests.entries()] == ["unknown"]


# ---- monthly-revenue -----------------------------------------------------------------


class SlowSales(Sales):
    """One month takes a while to read, so it finishes after the others."""

    def __init__(self, root: Path, slow_month: str) -> None:
        super().__init__(root)
        self.slow_month = slow_month
        self.finished: list[str] = []  # months, in the order their figures were read

    def month(self, month: str) -> dict[str, Any]:
        if month == self.slow_month:
            time.sleep(0.2)
        figures = super().month(month)
        self.finished.append(month)
        return figures


def expected_revenue(month: str) -> str:
    with ORDERS_CSV.open(newline="", encoding="utf-8") as fh:
        total = sum((int(r["quantity"]) * Decimal(r["unit_price"]) for r in csv.DictReader(fh)
                     if r["ordered_at"][:7] == month and r["status"] == "paid"), Decimal(0))
    return f"{total:.2f}"


def test_revenue_comes_back_in_input_order_though_a_month_finished_last(
        emulator: Emulator, tmp_path: Path) -> None:
    # Real worker threads (the months run side by side), so the order they finish in is
    # real too. WorkflowEnv runs one call at a time: branches finish in dispatch order.
    sales = SlowSales(tmp_path, slow_month="2026-08")
    months = ["2026-08", "2026-10", "2026-09"]
    view = run_with_workers(emulator, tmp_path, monthly_revenue(sales), {"months": months})
    assert view["status"] == "success", view
    assert sales.finished[-1] == "2026-08"
    report = json.loads(Path(view["output"]["path"]).read_text())
    assert [m["month"] for m in report["months"]] == months
    assert [m["revenue"] for m in report["months"]] == [expected_revenue(m) for m in months]
    assert report["revenue"] == f"{sum(Decimal(expected_revenue(m)) for m in months):.2f}"


def test_a_month_without_orders_fails_the_run_once_the_others_finish(
        emulator: Emulator, tmp_path: Path) -> None:
    with WorkflowEnv(workflows=[monthly_revenue(Sales(tmp_path))], emulator=emulator) as env:
        run_id = env.start("monthly-revenue", {"months": ["2026-09", "2025-01"]})
        env.run_until_idle()
        with pytest.raises(RunFailed, match="no paid orders in 2025-01"):
            env.result(run_id)
        ran = {e["name"]: e["status"] for e in env.journal(run_id)}
    assert ran["revenue-2026-09"] == "ok"
    assert not (tmp_path / "reports").exists()


# ---- book-trip -----------------------------------------------------------------------


class Crash(BaseException):
    """The functions process dying mid-call: nothing catches it, the orchestrator gets no
    answer for the call, and the effect the step body made stays made."""


class CrashingDesk(Desk):
    """A desk whose process dies once, right after it made one booking or cancel."""

    def __init__(self, root: Path, crash_after: str | None) -> None:
        super().__init__(root)
        self.crash_after = crash_after

    def _maybe_crash(self, what: str) -> None:
        if what == self.crash_after:
            self.crash_after = None
            raise Crash(f"the process died after {what}")

    def book(self, trip: str, kind: str, city: str, *, key: str) -> dict[str, Any]:
        booking = super().book(trip, kind, city, key=key)
        self._maybe_crash(f"book-{kind}")
        return booking

    def cancel(self, booking: dict[str, Any], *, key: str) -> dict[str, Any]:
        cancelled = super().cancel(booking, key=key)
        self._maybe_crash(f"cancel-{booking['kind']}")
        return cancelled


TRIP = {"trip": "t-1", "flight": "LIS", "hotel": "LIS", "car": "LIS"}  # no car in LIS


@pytest.mark.parametrize("crash_after", [None, "book-hotel", "cancel-hotel"])
def test_a_failed_booking_cancels_the_others_newest_first_and_a_replay_books_nothing_again(
        emulator: Emulator, tmp_path: Path, crash_after: str | None) -> None:
    desk = CrashingDesk(tmp_path, crash_after)
    wf = book_trip(desk, Services.at(tmp_path).outbox)
    with WorkflowEnv(workflows=[wf], emulator=emulator) as env:
        run_id = env.start("book-trip", TRIP)
        env.run_until_idle()
        with pytest.raises(RunFailed) as failed:
            env.result(run_id)
        journal = env.journal(run_id)
    assert failed.value.error["code"] == "sold_out"
    assert [(e["name"], e["status"]) for e in journal] == [
        ("book-flight", "ok"), ("book-hotel", "ok"), ("book-car", "error"),
        ("cancel-hotel", "ok"), ("cancel-flight", "ok")]
    # Each booking made once and cancelled once, whatever the crash.
    bookings = {b["kind"]: b for b in desk.bookings("t-1")}
    assert {k: b["status"] for k, b in bookings.items()} == {
        "flight": "cancelled", "hotel": "cancelled"}
    available = desk.records.read()["available"]
    assert (available["flight"]["LIS"], available["hotel"]["LIS"]) == (9, 4)
    requests = desk.requests.entries()
    made = [(r["op"], r["kind"]) for r in requests if not r["repeat"]]
    assert made == [("book", "flight"), ("book", "hotel"), ("book", "car"),
                    ("cancel", "hotel"), ("cancel", "flight")]
    repeats = [f"{r['op']}-{r['kind']}" for r in requests if r["repeat"]]
    assert repeats == ([] if crash_after is None else [crash_after])
    # The body that died ran again with its first key: the desk answered it from its record.
    for op in {(r["op"], r["kind"]) for r in requests}:
        assert len({r["key"] for r in requests if (r["op"], r["kind"]) == op}) == 1

    # Replaying the whole journal (check mode) runs no step body and reaches the same end.
    answer = asyncio.run(advance(wf, {"run": {"run_id": run_id}, "input": TRIP,
                                      "journal": journal, "mode": "check"}))
    assert [op["op"] for op in answer["ops"]] == ["fail"]
    assert answer["ops"][0]["error"]["code"] == "sold_out"
    assert desk.requests.entries() == requests


def test_a_trip_with_a_car_left_is_booked_and_confirmed(env: WorkflowEnv, s: Services) -> None:
    trip = {"trip": "t-2", "traveller": "ada@example.com", "flight": "OPO", "hotel": "OPO",
            "car": "OPO"}
    run_id = env.start("book-trip", trip)
    env.run_until_idle()
    result = env.result(run_id)
    assert sorted(b["id"] for b in s.desk.bookings("t-2")) == sorted(result["bookings"])
    assert {b["status"] for b in s.desk.bookings("t-2")} == {"booked"}
    [confirmation] = s.outbox.messages("ada@example.com")
    assert confirmation["subject"] == "Trip t-2 is booked"
    assert all(booking in confirmation["body"] for booking in result["bookings"])


# ---- the demo: app, manifest, spec ---------------------------------------------------


def test_the_demo_app_serves_every_example_and_the_manifest_declares_and_lints_them(
        tmp_path: Path) -> None:
    app = monthly_report.create_app(work_dir=tmp_path)
    served = set(app.workflows)
    assert served == {wf.name for wf in workflows(Services.at(tmp_path))}
    assert not (tmp_path / "durable").exists()  # nothing is written before a step runs

    report = lint_manifest(ROOT / "orchestrator.yml", {})
    assert report.warnings == []  # every backend has a spec: every route is checked
    declared = {n for n, wf in report.manifest.workflows.items() if wf.durable}
    assert declared == served
    assert [t.event for t in report.manifest.workflows["trial"].on] == ["trial.started"]

    # The spec lint reads lists what the app serves, no more, no less.
    spec_file = ROOT / "functions" / "examples" / "openapi.json"
    live = app.openapi()["paths"]
    expected = {p: {"post": {k: op["post"][k] for k in ("operationId", "summary")}}
                for p, op in live.items()}
    assert json.loads(spec_file.read_text())["paths"] == expected, (
        "functions/examples/openapi.json is out of date; its paths should be:\n"
        + json.dumps(expected, indent=2))
    assert read_spec(str(spec_file), ROOT) == {p for p, op in live.items() if "post" in op}

    # And lint catches a durable workflow the app does not serve.
    text = (ROOT / "orchestrator.yml").read_text().replace(
        "  book-trip:          { backend: api }", "  book-a-trip:        { backend: api }")
    with pytest.raises(Exception, match="durable workflow 'book-a-trip' is not served"):
        lint_text(text, "orchestrator.yml", ROOT, {})
