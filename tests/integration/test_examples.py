"""The monthly-report example functions over real HTTP, checked against the real files
they produce and an independent recomputation from the sample CSVs."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.examples import monthly_report, noop
from tests.support.servers import post_step, running, step_body

SECRET = "example-secret"
RUN = "monthly-report-1790000000000-abc123"
MONTH = "2026-10"


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


@pytest.fixture(scope="module")
def url(work_dir: Path) -> Iterator[str]:
    with running(monthly_report.create_app(work_dir=work_dir, secret=SECRET)) as server:
        yield server.url


def call(
    url: str,
    route: str,
    input: Any = None,
    *,
    steps: dict[str, Any] | None = None,
    step: str,
    run_id: str = RUN,
    key: str | None = None,
    payload: dict[str, Any] | None = None,
) -> httpx.Response:
    body = step_body(
        input, steps=steps, payload=payload, run_id=run_id, workflow="monthly-report", step=step
    )
    return post_step(url + route, body, secret=SECRET, idempotency_key=key or f"{run_id}/{step}")


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()
    return out


def csv_rows(name: str) -> list[dict[str, str]]:
    with (monthly_report.DATA_DIR / name).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def expected_figures(month: str) -> dict[str, Any]:
    """The month's numbers, recomputed straight from the CSVs."""
    users = {u["user_id"]: u for u in csv_rows("users.csv")}
    orders = [o for o in csv_rows("orders.csv") if o["ordered_at"][:7] == month]
    paid = [o for o in orders if o["status"] == "paid"]

    def amount(o: dict[str, str]) -> Decimal:
        return int(o["quantity"]) * Decimal(o["unit_price"])

    per_user: dict[str, Decimal] = defaultdict(Decimal)
    per_country: dict[str, Decimal] = defaultdict(Decimal)
    for o in paid:
        per_user[o["user_id"]] += amount(o)
        per_country[users[o["user_id"]]["country"]] += amount(o)
    best = min(per_user, key=lambda u: (-per_user[u], u))  # ties: lowest user id
    return {
        "orders": len(orders),
        "paid": len(paid),
        "revenue": sum((amount(o) for o in paid), Decimal(0)),
        "refunds": sum((amount(o) for o in orders if o["status"] == "refunded"), Decimal(0)),
        "customers": len(per_user),
        "per_country": dict(per_country),
        "best": (users[best]["name"], per_user[best]),
        "users_known": sum(1 for u in users.values() if u["signed_up_on"] <= f"{month}-31"),
    }


def test_the_sample_data_is_realistic_in_size() -> None:
    orders, users = csv_rows("orders.csv"), csv_rows("users.csv")
    assert 180 <= len(orders) <= 220
    assert 35 <= len(users) <= 45
    assert {o["ordered_at"][:7] for o in orders} == {"2026-08", "2026-09", "2026-10"}


def test_the_whole_workflow_in_dependency_order(url: str, work_dir: Path) -> None:
    want = expected_figures(MONTH)

    # Roots: both extracts (they would run in parallel; order does not matter).
    orders_out = ok(call(url, "/exportOrders", {"month": MONTH}, step="extract-orders"))
    users_out = ok(call(url, "/exportUsers", {"month": MONTH}, step="extract-users"))
    assert orders_out["count"] == want["orders"]
    assert users_out["count"] == want["users_known"]
    for out in (orders_out, users_out):
        path = Path(out["path"])
        assert path.parent == work_dir.resolve() / RUN
        extract = json.loads(path.read_text())
        assert extract["month"] == MONTH
        assert len(extract["rows"]) == extract["count"] == out["count"]
    assert all(
        r["ordered_at"].startswith(MONTH)
        for r in json.loads(Path(orders_out["path"]).read_text())["rows"]
    )

    # The join.
    deps = {"extract-orders": orders_out, "extract-users": users_out}
    report_out = ok(
        call(
            url, "/buildReport", {"month": MONTH}, steps=deps, step="transform", payload={"top": 3}
        )
    )
    totals = report_out["totals"]
    assert Decimal(totals["revenue"]) == want["revenue"]
    assert Decimal(totals["refunds"]) == want["refunds"]
    assert totals["orders"] == want["orders"]
    assert totals["paidOrders"] == want["paid"]
    assert totals["customers"] == want["customers"]
    assert (report_out["topCustomer"]["name"], Decimal(report_out["topCustomer"]["revenue"])) == (
        want["best"]
    )

    report = json.loads(Path(report_out["path"]).read_text())
    assert report["reportId"] == report_out["reportId"]
    assert len(report["topCustomers"]) == 3
    assert {c["country"]: Decimal(c["revenue"]) for c in report["byCountry"]} == (
        want["per_country"]
    )
    assert sum(Decimal(p["revenue"]) for p in report["byProduct"]) == want["revenue"]
    markdown = Path(report_out["markdownPath"]).read_text()
    assert markdown.startswith(f"# Monthly report {MONTH}")
    assert f"€{want['revenue']:,.2f}" in markdown
    assert want["best"][0] in markdown

    # The two leaves.
    after = {"transform": report_out}
    slack = ok(call(url, "/postSlack", {"month": MONTH}, steps=after, step="notify"))
    assert slack["posted"] is True
    assert f"€{want['revenue']:,.2f}" in slack["text"]
    outbox = work_dir / "outbox" / "slack.jsonl"
    lines = [json.loads(line) for line in outbox.read_text().splitlines()]
    assert [(m["text"], m["idempotencyKey"]) for m in lines] == [(slack["text"], f"{RUN}/notify")]

    archived = ok(call(url, "/archiveReport", {"month": MONTH}, steps=after, step="archive"))
    packed = Path(archived["path"]).read_bytes()
    assert Path(archived["path"]) == work_dir.resolve() / "archive" / f"{MONTH}.md.gz"
    assert gzip.decompress(packed).decode() == markdown
    assert archived["sha256"] == hashlib.sha256(packed).hexdigest()
    # A retried archive writes the same bytes.
    again = ok(call(url, "/archiveReport", {"month": MONTH}, steps=after, step="archive"))
    assert again == archived


def build_report_for(url: str, run_id: str, month: str | None = None) -> dict[str, Any]:
    input = {"month": month} if month else None
    deps = {
        "extract-orders": ok(
            call(url, "/exportOrders", input, step="extract-orders", run_id=run_id)
        ),
        "extract-users": ok(call(url, "/exportUsers", input, step="extract-users", run_id=run_id)),
    }
    return ok(call(url, "/buildReport", input, steps=deps, step="transform", run_id=run_id))


def outbox_lines(work_dir: Path, key: str) -> int:
    outbox = work_dir / "outbox" / "slack.jsonl"
    return sum(
        1 for line in outbox.read_text().splitlines() if json.loads(line)["idempotencyKey"] == key
    )


def test_slack_is_posted_once_per_idempotency_key(url: str, work_dir: Path) -> None:
    run = "run-slack-once"
    after = {"transform": build_report_for(url, run, "2026-09")}
    first = ok(call(url, "/postSlack", steps=after, step="notify", run_id=run, key="k-1"))
    second = ok(call(url, "/postSlack", steps=after, step="notify", run_id=run, key="k-1"))
    assert second == first
    assert outbox_lines(work_dir, "k-1") == 1
    # A different key is a different message.
    ok(call(url, "/postSlack", steps=after, step="notify", run_id=run, key="k-2"))
    assert outbox_lines(work_dir, "k-2") == 1
    assert outbox_lines(work_dir, "k-1") == 1


def test_concurrent_duplicates_still_post_once(url: str, work_dir: Path) -> None:
    run = "run-slack-race"
    after = {"transform": build_report_for(url, run, "2026-08")}
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(
            pool.map(
                lambda _: call(
                    url, "/postSlack", steps=after, step="notify", run_id=run, key="race"
                ),
                range(6),
            )
        )
    assert {ok(a)["line"] for a in answers} == {answers[0].json()["line"]}
    assert outbox_lines(work_dir, "race") == 1


def test_the_month_defaults_to_the_latest_in_the_data(url: str) -> None:
    out = ok(call(url, "/exportOrders", None, step="extract-orders", run_id="run-default"))
    assert out["month"] == MONTH
    report = build_report_for(url, "run-default")
    assert report["month"] == MONTH
    assert Decimal(report["totals"]["revenue"]) == expected_figures(MONTH)["revenue"]


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "October", 202610])
def test_a_bad_month_is_a_terminal_error(url: str, month: Any) -> None:
    r = call(url, "/exportOrders", {"month": month}, step="extract-orders")
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "invalid_month"
    assert error["retryable"] is False
    assert "YYYY-MM" in error["message"]
    assert repr(month) in error["message"]


def test_a_month_without_orders_is_an_empty_report(url: str) -> None:
    report = build_report_for(url, "run-empty", "2025-03")
    assert report["totals"]["orders"] == 0
    assert report["totals"]["revenue"] == "0.00"
    assert report["topCustomer"] is None


def test_extract_paths_outside_the_work_dir_are_refused(url: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "orders.json"
    elsewhere.write_text("{}")
    deps = {
        "extract-orders": {"fileId": "orders-2026-10-x", "path": str(elsewhere)},
        "extract-users": {"fileId": "users-2026-10-x", "path": str(elsewhere)},
    }
    r = call(url, "/buildReport", steps=deps, step="transform")
    assert r.status_code == 422
    assert "is outside" in r.json()["error"]["message"]


def test_a_missing_dependency_is_named(url: str) -> None:
    r = call(url, "/buildReport", steps={"extract-orders": {}}, step="transform")
    assert r.status_code == 422
    assert "'extract-users'" in r.json()["error"]["message"]


def test_unsafe_run_ids_do_not_become_paths(url: str) -> None:
    r = call(url, "/exportOrders", step="extract-orders", run_id="../../etc")
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_run_id"


def test_noop_answers_ok() -> None:
    with running(noop.create_app(secret=SECRET)) as server:
        r = post_step(server.url + "/noop", step_body(), secret=SECRET)
        assert (r.status_code, r.json()) == (200, {"ok": True})
        assert post_step(server.url + "/noop", step_body()).status_code == 401
