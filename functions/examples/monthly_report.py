"""The monthly-report workflow's five functions, doing real work on local files.

    extract-orders ─┐
                    ├─▶ transform ─┬─▶ notify    (/postSlack)
    extract-users  ─┘  (/buildReport) └─▶ archive (/archiveReport)

The roots read the sample CSVs in `data/` and write the month's rows as JSON extracts
under ``<work_dir>/<run_id>/``; `/buildReport` joins them into ``report.json`` and
``report.md``; `/postSlack` appends the summary to ``<work_dir>/outbox/slack.jsonl`` (the
local stand-in for Slack); `/archiveReport` gzips the Markdown into
``<work_dir>/archive/<month>.md.gz``. Step outputs stay small: ids, paths and totals.

Every step may run more than once (execution is at-least-once). Files are written
atomically with deterministic content, so a re-run rewrites the same bytes; the one
non-repeatable effect, posting to Slack, is keyed on the idempotency key.

`create_app` also serves the durable examples of `functions/examples/durable/` (at
POST /durable/<name>, their files under ``<work_dir>/durable/``): it is the app
`orchestrator dev` serves for the demo manifest, with the flow-control recipes'
routes of `functions/examples/flow.py` (their logs under ``<work_dir>/flow/``).
"""

from __future__ import annotations

import csv
import fcntl
import gzip
import hashlib
import json
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from functions.examples import durable, flow
from functions.sdk import FunctionApp, StepRequest, TerminalError

__all__ = ["DATA_DIR", "ORDERS_STEP", "REPORT_STEP", "USERS_STEP", "create_app"]

DATA_DIR = Path(__file__).resolve().parent / "data"
# Step names of the workflow (see the diagram above): whose output each route reads.
ORDERS_STEP = "extract-orders"
USERS_STEP = "extract-users"
REPORT_STEP = "transform"

CURRENCY = "EUR"
ORDER_COLUMNS = (
    "order_id",
    "user_id",
    "ordered_at",
    "sku",
    "product",
    "quantity",
    "unit_price",
    "status",
)
USER_COLUMNS = ("user_id", "name", "email", "country", "signed_up_on")
ORDER_STATUSES = frozenset({"paid", "refunded"})
DEFAULT_TOP = 5
DEFAULT_CHANNEL = "#reports"

_MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
_RUN_DIR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")
_CENT = Decimal("0.01")


def create_app(
    data_dir: Path | None = None,
    work_dir: Path = Path(".orchestrator/work"),
    secret: str | Sequence[str] | None = None,
) -> FunctionApp:
    """The five monthly-report routes, reading CSVs from `data_dir` (default: the bundled
    sample data) and writing every artefact under `work_dir`; and the durable examples."""
    files = _Files(data=(data_dir or DATA_DIR).resolve(), work=work_dir.resolve())
    app = FunctionApp(secret, title="monthly-report")

    @app.step("/exportOrders", summary="Extract one month of orders to a JSON file.")
    def export_orders(req: StepRequest) -> dict[str, Any]:
        orders = files.read_orders()
        month = _month_of(req.input, default=max(o["ordered_at"][:7] for o in orders))
        rows = [o for o in orders if o["ordered_at"].startswith(month)]
        extract = {"kind": "orders", "month": month, "count": len(rows), "rows": rows}
        path, file_id = files.write_extract(req.run_id, f"orders-{month}.json", extract)
        return {"fileId": file_id, "path": str(path), "month": month, "count": len(rows)}

    @app.step("/exportUsers", summary="Extract the users known at the end of a month.")
    def export_users(req: StepRequest) -> dict[str, Any]:
        users = files.read_users()
        orders_default = max(o["ordered_at"][:7] for o in files.read_orders())
        month = _month_of(req.input, default=orders_default)
        first, last = _month_bounds(month)
        rows = [u for u in users if date.fromisoformat(u["signed_up_on"]) <= last]
        new = sum(1 for u in rows if date.fromisoformat(u["signed_up_on"]) >= first)
        extract = {"kind": "users", "month": month, "count": len(rows), "rows": rows}
        path, file_id = files.write_extract(req.run_id, f"users-{month}.json", extract)
        return {
            "fileId": file_id,
            "path": str(path),
            "month": month,
            "count": len(rows),
            "newUsers": new,
        }

    @app.step("/buildReport", summary="Join the extracts into report.json and report.md.")
    def build_report(req: StepRequest) -> dict[str, Any]:
        orders_out, users_out = req.output_of(ORDERS_STEP), req.output_of(USERS_STEP)
        orders = files.read_extract(orders_out, ORDERS_STEP, "orders")
        users = files.read_extract(users_out, USERS_STEP, "users")
        if orders.month != users.month:
            raise TerminalError(
                f"extracts disagree on the month: {ORDERS_STEP} has {orders.month}, "
                f"{USERS_STEP} has {users.month}",
                code="month_mismatch",
            )
        top = _top_of(req.payload)
        report_id = "report-{}-{}".format(
            orders.month, _sha256(f"{orders.file_id}|{users.file_id}|{top}".encode())[:12]
        )
        report = compute_report(orders.month, orders.rows, users.rows, top=top)
        report = {"reportId": report_id, "sources": [orders.file_id, users.file_id], **report}
        run_dir = files.run_dir(req.run_id)
        json_path = run_dir / "report.json"
        md_path = run_dir / "report.md"
        _write_atomic(json_path, _json_bytes(report))
        _write_atomic(md_path, render_markdown(report).encode())
        leader = report["topCustomers"][0] if report["topCustomers"] else None
        return {
            "reportId": report_id,
            "month": orders.month,
            "path": str(json_path),
            "markdownPath": str(md_path),
            "totals": report["totals"],
            "topCustomer": leader,
        }

    @app.step("/postSlack", summary="Post the report summary to the (local) Slack outbox.")
    def post_slack(req: StepRequest) -> dict[str, Any]:
        report = files.read_report(req.output_of(REPORT_STEP))
        channel = req.payload.get("channel", DEFAULT_CHANNEL)
        if not isinstance(channel, str) or not re.fullmatch(r"#[a-z0-9_-]{1,80}", channel):
            raise TerminalError(
                f"payload.channel must look like '#reports', got {channel!r}",
                code="invalid_payload",
            )
        message = {
            "channel": channel,
            "text": slack_text(report),
            "reportId": report["reportId"],
            "idempotencyKey": req.idempotency_key,
        }
        line, stored = files.post_once(message)
        return {
            "posted": True,
            "channel": stored["channel"],
            "text": stored["text"],
            "outbox": str(files.outbox),
            "line": line,
        }

    @app.step("/archiveReport", summary="Gzip the Markdown report into the archive.")
    def archive_report(req: StepRequest) -> dict[str, Any]:
        produced = req.output_of(REPORT_STEP)
        report = files.read_report(produced)
        markdown = files.inside_work(produced.get("markdownPath"), REPORT_STEP, "markdownPath")
        # mtime=0 and no file name in the header: the same report always gzips to the same
        # bytes, so a retried archive is identical and its checksum stable.
        packed = gzip.compress(markdown.read_bytes(), compresslevel=9, mtime=0)
        target = files.work / "archive" / f"{report['month']}.md.gz"
        _write_atomic(target, packed)
        return {
            "reportId": report["reportId"],
            "path": str(target),
            "sha256": _sha256(packed),
            "bytes": len(packed),
        }

    app.workflow(*durable.workflows(durable.Services.at(work_dir / "durable")))
    flow.register(app, work_dir / "flow")
    return app


# -- the report itself (pure) ---------------------------------------------------------


def compute_report(
    month: str,
    orders: list[dict[str, Any]],
    users: list[dict[str, Any]],
    *,
    top: int = DEFAULT_TOP,
) -> dict[str, Any]:
    """Revenue of a month from its orders and the users known at its end. Revenue counts
    paid orders; refunded orders are reported separately. Amounts are decimal strings."""
    by_id = {u["user_id"]: u for u in users}
    unknown = sorted({o["user_id"] for o in orders} - by_id.keys())
    if unknown:
        raise TerminalError(
            f"{len(unknown)} ordering user(s) missing from the users extract: "
            f"{', '.join(unknown[:10])}",
            code="unknown_users",
        )
    first, _ = _month_bounds(month)
    revenue = refunds = Decimal(0)
    units = paid_orders = 0
    per_user: dict[str, Decimal] = defaultdict(Decimal)
    per_user_orders: dict[str, int] = defaultdict(int)
    per_country: dict[str, Decimal] = defaultdict(Decimal)
    per_country_orders: dict[str, int] = defaultdict(int)
    per_product: dict[str, dict[str, Any]] = {}
    for order in orders:
        amount = order["quantity"] * Decimal(order["unit_price"])
        if order["status"] == "refunded":
            refunds += amount
            continue
        user = by_id[order["user_id"]]
        paid_orders += 1
        revenue += amount
        units += order["quantity"]
        per_user[user["user_id"]] += amount
        per_user_orders[user["user_id"]] += 1
        per_country[user["country"]] += amount
        per_country_orders[user["country"]] += 1
        product = per_product.setdefault(
            order["sku"],
            {"sku": order["sku"], "product": order["product"], "units": 0, "revenue": Decimal(0)},
        )
        product["units"] += order["quantity"]
        product["revenue"] += amount

    ranked = sorted(per_user.items(), key=lambda kv: (-kv[1], kv[0]))
    average = (revenue / paid_orders) if paid_orders else Decimal(0)
    new_users = [u for u in users if date.fromisoformat(u["signed_up_on"]) >= first]
    return {
        "month": month,
        "currency": CURRENCY,
        "totals": {
            "orders": len(orders),
            "paidOrders": paid_orders,
            "refundedOrders": len(orders) - paid_orders,
            "units": units,
            "revenue": _money(revenue),
            "refunds": _money(refunds),
            "averageOrderValue": _money(average),
            "customers": len(per_user),
            "newUsers": len(new_users),
            "newCustomers": sum(1 for u in new_users if u["user_id"] in per_user),
        },
        "topCustomers": [
            {
                "userId": user_id,
                "name": by_id[user_id]["name"],
                "country": by_id[user_id]["country"],
                "orders": per_user_orders[user_id],
                "revenue": _money(amount),
            }
            for user_id, amount in ranked[:top]
        ],
        "byCountry": [
            {"country": c, "orders": per_country_orders[c], "revenue": _money(amount)}
            for c, amount in sorted(per_country.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "byProduct": [
            {**p, "revenue": _money(p["revenue"])}
            for p in sorted(per_product.values(), key=lambda p: (-p["revenue"], p["sku"]))
        ],
    }


def render_markdown(report: dict[str, Any]) -> str:
    t = report["totals"]
    lines = [
        f"# Monthly report {report['month']}",
        "",
        f"Revenue **{_eur(t['revenue'])}** from {t['paidOrders']} paid orders "
        f"({t['units']} units, {t['customers']} customers, "
        f"average {_eur(t['averageOrderValue'])}).",
        f"Refunded orders: {t['refundedOrders']} ({_eur(t['refunds'])}). "
        f"New users: {t['newUsers']}, of whom {t['newCustomers']} ordered.",
        "",
        "## Top customers",
        "",
        "| # | Customer | Country | Orders | Revenue |",
        "|---|---|---|---:|---:|",
    ]
    for rank, c in enumerate(report["topCustomers"], 1):
        lines.append(
            f"| {rank} | {c['name']} | {c['country']} | {c['orders']} | {_eur(c['revenue'])} |"
        )
    lines += ["", "## By country", "", "| Country | Orders | Revenue |", "|---|---:|---:|"]
    for c in report["byCountry"]:
        lines.append(f"| {c['country']} | {c['orders']} | {_eur(c['revenue'])} |")
    lines += ["", "## By product", "", "| SKU | Product | Units | Revenue |", "|---|---|---:|---:|"]
    for p in report["byProduct"]:
        lines.append(f"| {p['sku']} | {p['product']} | {p['units']} | {_eur(p['revenue'])} |")
    lines += ["", f"Report `{report['reportId']}` from {', '.join(report['sources'])}.", ""]
    return "\n".join(lines)


def slack_text(report: dict[str, Any]) -> str:
    t = report["totals"]
    text = (
        f"Monthly report {report['month']}: {_eur(t['revenue'])} revenue from "
        f"{t['paidOrders']} orders by {t['customers']} customers"
    )
    if t["refundedOrders"]:
        text += f" ({t['refundedOrders']} refunded, {_eur(t['refunds'])})"
    text += "."
    if report["topCustomers"]:
        best = report["topCustomers"][0]
        text += f" Top customer: {best['name']} ({best['country']}, {_eur(best['revenue'])})."
    return text


# -- files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Extract:
    month: str
    file_id: str
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class _Files:
    """Where the example reads and writes; every path a request names must be inside
    `work`, so a step output cannot point the functions at arbitrary files."""

    data: Path
    work: Path

    @property
    def outbox(self) -> Path:
        return self.work / "outbox" / "slack.jsonl"

    def run_dir(self, run_id: str) -> Path:
        if not _RUN_DIR.fullmatch(run_id) or run_id.strip(".") == "":
            raise TerminalError(
                f"run_id {run_id!r} cannot name a directory (use letters, digits, ._:@-)",
                code="invalid_run_id",
            )
        return self.work / run_id

    def read_orders(self) -> list[dict[str, Any]]:
        rows = []
        for where, row in _read_csv(self.data / "orders.csv", ORDER_COLUMNS):
            if row["status"] not in ORDER_STATUSES:
                raise _invalid_data(f"{where}: status {row['status']!r} is not paid/refunded")
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", row["ordered_at"]):
                raise _invalid_data(f"{where}: ordered_at {row['ordered_at']!r} is not UTC ISO")
            try:
                quantity = int(row["quantity"])
                price = Decimal(row["unit_price"])
            except (ValueError, InvalidOperation) as exc:
                raise _invalid_data(f"{where}: quantity/unit_price not numbers: {exc}") from exc
            if quantity <= 0 or price < 0 or price != price.quantize(_CENT):
                raise _invalid_data(f"{where}: quantity must be > 0, unit_price in cents")
            rows.append({**row, "quantity": quantity, "unit_price": str(price)})
        if not rows:
            raise _invalid_data(f"{self.data / 'orders.csv'} has no orders")
        return rows

    def read_users(self) -> list[dict[str, Any]]:
        rows = []
        for where, row in _read_csv(self.data / "users.csv", USER_COLUMNS):
            try:
                date.fromisoformat(row["signed_up_on"])
            except ValueError as exc:
                raise _invalid_data(f"{where}: signed_up_on: {exc}") from exc
            rows.append(dict(row))
        return rows

    def write_extract(self, run_id: str, name: str, extract: dict[str, Any]) -> tuple[Path, str]:
        content = _json_bytes(extract)
        path = self.run_dir(run_id) / name
        _write_atomic(path, content)
        return path, f"{extract['kind']}-{extract['month']}-{_sha256(content)[:12]}"

    def read_extract(self, produced: Any, step: str, kind: str) -> _Extract:
        path = self.inside_work(_field(produced, step, "path"), step, "path")
        file_id = _field(produced, step, "fileId")
        if not isinstance(file_id, str):
            raise TerminalError(f"steps.{step}.fileId must be a string, got {file_id!r}")
        content = path.read_bytes()
        if not file_id.endswith("-" + _sha256(content)[:12]):
            raise TerminalError(
                f"{path} no longer matches {step}'s fileId {file_id!r}: it was rewritten",
                code="extract_changed",
            )
        data = json.loads(content)
        if data.get("kind") != kind:
            raise TerminalError(f"{path} holds {data.get('kind')!r} rows, expected {kind!r}")
        return _Extract(month=data["month"], file_id=file_id, rows=data["rows"])

    def read_report(self, produced: Any) -> dict[str, Any]:
        path = self.inside_work(_field(produced, REPORT_STEP, "path"), REPORT_STEP, "path")
        report: dict[str, Any] = json.loads(path.read_bytes())
        if report.get("reportId") != _field(produced, REPORT_STEP, "reportId"):
            raise TerminalError(
                f"{path} holds report {report.get('reportId')!r}, not the one "
                f"{REPORT_STEP} produced",
                code="report_changed",
            )
        return report

    def inside_work(self, raw: Any, step: str, key: str) -> Path:
        if not isinstance(raw, str):
            raise TerminalError(f"steps.{step}.{key} must be a path string, got {raw!r}")
        path = Path(raw).resolve()
        if not path.is_relative_to(self.work):
            raise TerminalError(f"steps.{step}.{key} {raw!r} is outside {self.work}")
        if not path.is_file():
            raise TerminalError(f"steps.{step}.{key}: {path} does not exist")
        return path

    def post_once(self, message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Append `message` to the outbox unless a message with the same idempotency key
        is already there; return its line number and the stored message either way.

        The outbox itself is the record of what was sent, checked and appended under an
        exclusive lock, so there is no window in which a crash leaves the two disagreeing."""
        self.outbox.parent.mkdir(parents=True, exist_ok=True)
        key = message.get("idempotencyKey")
        with self.outbox.open("a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed
            fh.seek(0)
            count = 0
            for count, line in enumerate(fh, 1):
                stored = json.loads(line)
                if key is not None and stored.get("idempotencyKey") == key:
                    return count, stored
            fh.write(json.dumps(message, ensure_ascii=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            return count + 1, message


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[tuple[str, dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if tuple(reader.fieldnames or ()) != columns:
                raise _invalid_data(
                    f"{path}:1: columns are {reader.fieldnames}, expected {list(columns)}"
                )
            rows = []
            for row in reader:
                where = f"{path}:{reader.line_num}"
                if None in row or any(v is None or v == "" for v in row.values()):
                    raise _invalid_data(f"{where}: expected {len(columns)} non-empty fields")
                rows.append((where, row))
            return rows
    except FileNotFoundError as exc:
        raise TerminalError(f"data file {path} does not exist", code="missing_data") from exc


# -- small helpers --------------------------------------------------------------------


def _month_of(raw_input: Any, *, default: str) -> str:
    if raw_input is None:
        return default
    if not isinstance(raw_input, dict):
        raise TerminalError(
            f'input must be an object like {{"month": "2026-10"}}, got {raw_input!r}',
            code="invalid_input",
        )
    month = raw_input.get("month")
    if month is None:
        return default
    if not isinstance(month, str) or not _MONTH.fullmatch(month):
        raise TerminalError(
            f"input.month must be a month as YYYY-MM (e.g. 2026-10), got {month!r}",
            code="invalid_month",
        )
    return month


def _month_bounds(month: str) -> tuple[date, date]:
    year, mon = int(month[:4]), int(month[5:7])
    first = date(year, mon, 1)
    following = date(year + mon // 12, mon % 12 + 1, 1)
    return first, date.fromordinal(following.toordinal() - 1)


def _top_of(payload: dict[str, Any]) -> int:
    top = payload.get("top", DEFAULT_TOP)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 50:
        raise TerminalError(
            f"payload.top must be an integer from 1 to 50, got {top!r}", code="invalid_payload"
        )
    return top


def _field(produced: Any, step: str, key: str) -> Any:
    if not isinstance(produced, dict) or key not in produced:
        raise TerminalError(
            f"the output of {step} has no {key!r}; got {produced!r}", code="bad_dependency_output"
        )
    return produced[key]


def _invalid_data(message: str) -> TerminalError:
    return TerminalError(message, code="invalid_data")


def _money(amount: Decimal) -> str:
    return str(amount.quantize(_CENT, rounding=ROUND_HALF_UP))


def _eur(amount: str) -> str:
    return f"€{Decimal(amount):,.2f}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()


def _write_atomic(path: Path, content: bytes) -> None:
    """Readers see the old file or the new one, never half of it (rename is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
