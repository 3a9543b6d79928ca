"""`monthly-revenue` (fan-out and collect; README, "Durable examples"): sum each month's sales side
by side, one step per month, and collect the figures in the order they were asked for.

    orchestrator trigger monthly-revenue --wait --input '{"months": ["2026-10", "2026-08"]}'

Every month is a step with retries of its own (3, 5 s apart and growing), run in a
branch of `ctx.parallel`; the results come back in input order, whatever order the
months finished in. A month without orders fails its step for good, and once every
other month has finished, that failure fails the run (catch `StepFailed` around
`ctx.parallel` to carry on without it). The figures come from the sample orders in
`functions/examples/data/orders.csv`; the collected report goes to
`reports/revenue-<first>-<last>.json`."""

from __future__ import annotations

import csv
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.store import write_atomic
from functions.sdk.failures import TerminalError

__all__ = ["ORDERS_CSV", "Sales", "monthly_revenue"]

ORDERS_CSV = Path(__file__).resolve().parents[1] / "data" / "orders.csv"
_MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")


class Sales:
    def __init__(self, root: Path, orders_csv: Path = ORDERS_CSV) -> None:
        self.orders_csv = orders_csv
        self.reports = root / "reports"

    def months(self) -> list[str]:
        """Every month with orders, oldest first."""
        with self.orders_csv.open(newline="", encoding="utf-8") as fh:
            return sorted({row["ordered_at"][:7] for row in csv.DictReader(fh)})

    def month(self, month: str) -> dict[str, Any]:
        """One month's paid orders, units and revenue (a decimal string, in euros)."""
        if not _MONTH.fullmatch(month):
            raise TerminalError(f"{month!r} is not a month (YYYY-MM)", code="invalid_input")
        orders = units = 0
        revenue = Decimal(0)
        with self.orders_csv.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row["ordered_at"].startswith(month) and row["status"] == "paid":
                    orders += 1
                    units += int(row["quantity"])
                    revenue += int(row["quantity"]) * Decimal(row["unit_price"])
        if not orders:
            raise TerminalError(f"no paid orders in {month}", code="no_orders")
        return {"month": month, "orders": orders, "units": units, "revenue": f"{revenue:.2f}"}

    def save(self, figures: list[dict[str, Any]]) -> dict[str, Any]:
        first, last = figures[0]["month"], figures[-1]["month"]
        total = sum(Decimal(f["revenue"]) for f in figures)
        report = {"months": figures, "revenue": f"{total:.2f}"}
        path = self.reports / f"revenue-{first}-{last}.json"
        write_atomic(path, (json.dumps(report, indent=2) + "\n").encode())
        return {"path": str(path), "revenue": report["revenue"]}


def monthly_revenue(sales: Sales) -> Workflow:
    """The workflow, on `sales`."""

    @workflow("monthly-revenue", max_steps=200, execution_timeout="1h")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        months = (payload or {}).get("months")
        if months is None:
            months = await step("list-months", sales.months)
        if (not isinstance(months, list) or not 1 <= len(months) <= 60
                or not all(isinstance(m, str) and _MONTH.fullmatch(m) for m in months)):
            raise TerminalError("input.months must be a list of 1 to 60 months (YYYY-MM)",
                                code="invalid_input")
        figures = await ctx.parallel(
            [step(f"revenue-{m}", sales.month, m, retries=3, delay="5s") for m in months],
            max_parallel=4)
        saved = await step("save-report", sales.save, figures)
        return {"months": [f["month"] for f in figures], **saved}

    return run
