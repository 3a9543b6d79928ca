"""Every line `orchestrator show` prints fits a narrow terminal (30, 40 and 60 columns):
the header, the diagram or its dependency list, the legend, a failed run's errors, a
durable run's operations, the timeline and the cost line are wrapped, never cut. A
piece of text is still whole once the wrapping's line breaks and indents are taken out
(`whole`)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rich.cells import cell_len

from orchestrator.cli.diagram import render_diagram
from orchestrator.cli.durable_diagram import render_durable
from orchestrator.cli.runs import render_cost
from orchestrator.cli.timeline import render_timeline
from tests.unit.test_diagram import chain, fan_out, long_edge, monthly_report, waterfall
from tests.unit.test_durable_diagram import approval

WIDTHS = (30, 40, 60)
COST = {"requests": {"dynamodb.UpdateItem": 12, "dynamodb.GetItem": 9, "sqs.SendMessage": 4,
                     "sqs.DeleteMessage": 4},
        "total_requests": 29, "dollars": 0.0000123, "prices_date": "2026-01-15"}


def fits(text: str, width: int) -> None:
    wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}:\n" + "\n".join(wide)


def whole(text: str) -> str:
    """The text without its whitespace: what wrapping may add or move, and nothing else."""
    return "".join(text.split())


def has(text: str, *pieces: str) -> None:
    for piece in pieces:
        assert whole(piece) in whole(text), f"{piece!r} lost:\n{text}"


def report(status: str) -> dict[str, Any]:
    view = monthly_report(status)
    view.update(run_id="monthly-report-1796526102287-7bebb0",
                rerun_of="monthly-report-1796526000000-a1b2c3",
                trigger={"source": "event", "event": "orders.month-closed"})
    return view


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("status", ["running", "failed"])
def test_a_runs_header_steps_dependencies_and_legend_fit_and_are_whole(
        width: int, status: str) -> None:
    view = report(status)
    for ascii_only in (False, True):
        text = render_diagram(view, width=width, now=1161.0, ascii_only=ascii_only)
        fits(text, width)
        has(text, "monthly-report", status, view["run_id"], "elapsed", "trigger event",
            "orders.month-closed", f"rerun of {view['rerun_of']}")
        for s in view["steps"]:
            has(text, s["step"])
    text = render_diagram(view, width=width, now=1161.0)
    if width < 60:  # the dependency list: each step's other dependencies named
        has(text, "◐ transform running…" if status == "running" else "⊘ transform",
            "(after extract-users)")
    if status == "running":
        has(text, "✔ success", "✖ failed", "◐ running", "○ blocked", "⊘ skipped")
    else:
        has(text, 'error: {"code":"step_failed","step":"extract-orders"}',
            'extract-orders: {"code":503,"reason":"upstream 503"}')


@pytest.mark.parametrize("width", WIDTHS)
def test_wider_graphs_fit_too(width: int) -> None:
    for view in (long_edge(), fan_out(12), chain(9)):
        text = render_diagram(view, width=width, now=1161.0)
        fits(text, width)
        for s in view["steps"]:
            has(text, s["step"])


def test_a_deep_chain_keeps_every_dependency_in_a_narrow_list() -> None:
    view = chain(30)  # deeper than 30 columns can indent
    text = render_diagram(view, width=30)
    fits(text, 30)
    lines = text.splitlines()
    for i in range(1, 30):  # each step's dependency: by its place in the tree, or named
        at = next(n for n, x in enumerate(lines) if f"✔ s{i:02d}" in x)
        entry = [lines[at], *itertools.takewhile(lambda x: "✔" not in x and x.strip(),
                                                 lines[at + 1:])]
        depth = (len(entry[0]) - len(entry[0].lstrip())) // 2
        assert depth == i or whole(f"(after s{i - 1:02d})") in whole("".join(entry)), entry


@pytest.mark.parametrize("width", WIDTHS)
def test_a_durable_run_fits(width: int) -> None:
    view = approval()
    text = render_durable(view, width=width, now=1_800_000_075.0)
    fits(text, width)
    has(text, "approve", "running", view["run_id"], "step fetch-order", "sleep cool-off",
        "parallel charge-and-ship", "3 branches", "step reserve-stock", "step pick",
        "step charge-card \u00d73", "step notify mailer 503",
        "signal manager-ok until 2027-01-15 08:10:00Z",
        "waiting for signal manager-ok until 2027-01-15 08:10:00Z")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_timeline_fits(width: int) -> None:
    view, history = waterfall()
    text = render_timeline(view, history, width=width, now=10.0)
    fits(text, width)
    has(text, "monthly-report", "running", "report-2026-09", "in the queue", "calling",
        "waiting to retry", "a column)")
    for s in view["steps"]:
        has(text, s["step"])


@pytest.mark.parametrize("width", WIDTHS)
def test_the_cost_line_fits_and_keeps_its_figures(width: int) -> None:
    text = render_cost(COST, width=width)
    fits(text, width)
    has(text, "cost: 29 AWS requests", "~$0.0000123", "at the prices of 2026-01-15",
        "dynamodb.UpdateItem 12", "dynamodb.GetItem 9", "sqs.SendMessage 4", "1 more")
