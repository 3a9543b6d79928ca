"""Reference 002's recipes as durable shell scripts, run as written (with `orchestrator`
for `spool` and ORCHESTRATOR_* for SPOOL_*) on a live stack through the CLI and the
API, each printing what the recipe says it prints."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import BuildHarness
from tests.support.scripts import RECIPES, ScriptStack, log_of, poll, script_stack


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_saga_cancels_what_it_booked_newest_first(stack: ScriptStack) -> None:
    res = stack.cli("run", stack.recipe("saga.sh"))
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    run_id = lines[0].removeprefix("  run: ")
    assert lines[0].startswith("  run: ") and run_id
    assert lines[1:] == ["no cars left", "cancelled HT-2207", "cancelled FL-881",
                         f"  {run_id} failed: script exited 1"]
    assert stack.steps(run_id) == ["book-flight", "book-hotel", "book-car", "cancel", "cancel"]


def _live(stack: ScriptStack, workflow: str) -> list[dict[str, Any]]:
    """Every run of `workflow` now, ended or not, as views."""
    rt = stack.h.rt
    listed, _ = rt.store.runs.list_runs(workflow, rt.clock(), limit=100)
    return [rt.runs.view(r.run_id) for r in listed]



def _customer(view: dict[str, Any]) -> str:
    return str(json.dumps(view.get("input")))


def test_trial_upgrade_thanks_and_timeout_downgrades(stack: ScriptStack) -> None:
    # The reference says to shorten the 14d wait to try the recipe: 3s here.
    text = (RECIPES / "trial.sh").read_text()
    assert "--timeout 14d" in text
    path = stack.recipe("trial.sh", text.replace("--timeout 14d", "--timeout 3s"))
    res = stack.cli("handler", "set", "trials", path, "--on", "trial.started")
    assert res.exit_code == 0, res.output
    for n in (1, 2):
        res = stack.cli("event", "emit", "trial.started", "--key", f"cust-{n}",
                        "--payload", json.dumps({"customer": f"cust-{n}"}))
        assert res.exit_code == 0, res.output

    def cust1_waiting() -> bool:
        views = _live(stack, "trials")
        failed = [v for v in views if v["status"] == "failed"]
        assert not failed, failed  # fail fast rather than wait out the deadline
        return any("cust-1" in _customer(v) and v.get("waiting") for v in views)

    poll("cust-1's run to wait", cust1_waiting)
    res = stack.cli("event", "emit", "plan.upgraded", "--key", "cust-1")
    assert res.exit_code == 0, res.output
    runs = stack.runs_of("trials", 2)
    by = {("cust-1" if "cust-1" in _customer(v) else "cust-2"): v for v in runs}
    assert set(by) == {"cust-1", "cust-2"}
    assert all(v["status"] == "success" for v in runs), runs
    assert "trial started for cust-1" in log_of(by["cust-1"])
    assert "cust-1 upgraded" in log_of(by["cust-1"])
    assert stack.steps(by["cust-1"]["run_id"])[-1] == "thank"
    assert "trial over for cust-2" in log_of(by["cust-2"])
    assert stack.steps(by["cust-2"]["run_id"])[-1] == "downgrade"


def test_on_order_handles_each_event_once(stack: ScriptStack) -> None:
    path = stack.recipe("on-order.sh")
    res = stack.cli("handler", "set", "orders", path, "--on", "order.placed")
    assert res.exit_code == 0, res.output
    for _ in range(2):
        res = stack.cli("event", "emit", "order.placed", "--payload", '{"order":1042}')
        assert res.exit_code == 0, res.output
    runs = stack.runs_of("orders", 2)
    assert all(v["status"] == "success" for v in runs), runs
    logs = sorted((log_of(v) for v in runs), key=lambda s: "already" in s)
    charged = re.search(r"charged order 1042, key (\S+)", logs[0])
    assert charged and charged.group(1), logs
    assert "shipped order 1042" in logs[0]
    assert "already handled" not in logs[0]
    assert "order 1042 already handled" in logs[1]
    assert "charged" not in logs[1]


def test_probe_fans_out_and_waits_in_order(stack: ScriptStack) -> None:
    res = stack.cli("run", stack.recipe("probe.sh"))
    assert res.exit_code == 0, res.output
    (view,) = stack.runs_of("probe", 1)
    body = log_of(view).splitlines()
    assert len(body) == 3, body
    for pattern, line in zip([r"eu-north: \d+ms", r"us-east: \d+ms", r"ap-south: \d+ms"],
                             body, strict=True):
        assert re.fullmatch(pattern, line), body
    children = stack.runs_of("activity.shell", 3)
    assert len(children) == 3 and all(c["status"] == "success" for c in children), children


def test_lock_serialises_the_locked_sections(stack: ScriptStack) -> None:
    path = stack.recipe("lock.sh")
    for _ in range(3):
        res = stack.cli("submit", path)
        assert res.exit_code == 0, res.output
    runs = stack.runs_of("lock", 3, timeout=90)
    assert all(v["status"] == "success" for v in runs), runs
    spans = []
    for v in runs:
        log = log_of(v)
        start = re.search(r"start (\d\d:\d\d:\d\d)", log)
        end = re.search(r"end (\d\d:\d\d:\d\d)", log)
        assert start and end, log
        assert "fetched for acme" in log
        spans.append((start.group(1), end.group(1)))
    spans.sort()
    for (_, prev_end), (start, _) in itertools.pairwise(spans):
        assert start >= prev_end, spans


def test_reindex_debounces_to_the_last_ticket(stack: ScriptStack) -> None:
    path = stack.recipe("reindex.sh")
    res = stack.cli("handler", "set", "reindex", path, "--on", "customer.updated")
    assert res.exit_code == 0, res.output
    for _ in range(5):
        res = stack.cli("event", "emit", "customer.updated", "--payload", '{"customer":"acme"}')
        assert res.exit_code == 0, res.output
    runs = stack.runs_of("reindex", 5)
    assert all(v["status"] == "success" for v in runs), runs
    logs = [log_of(v) for v in runs]
    assert sum("reindexing acme (ticket 5)" in s for s in logs) == 1, logs
    superseded = sorted(m for s in logs for m in re.findall(r"ticket (\d+) superseded", s))
    assert superseded == ["1", "2", "3", "4"], logs


def test_poll_advances_its_cursor_each_tick(stack: ScriptStack) -> None:
    res = stack.cli("schedule", "create", "--every", "5m", "--name", "ticket-poll",
                    stack.recipe("poll.sh"))
    assert res.exit_code == 0, res.output
    for n in (1, 2, 3):
        res = stack.cli("schedules", "trigger", "ticket-poll")
        assert res.exit_code == 0, res.output
        runs = stack.runs_of("ticket-poll", n)
    assert all(v["status"] == "success" for v in runs), runs
    logs = [log_of(v) for v in runs]
    assert [re.search(r"processed tickets \S+", s).group(0) for s in logs] == [  # type: ignore[union-attr]
        "processed tickets 0..10", "processed tickets 10..20", "processed tickets 20..30"], logs


CURL = "curl -fsS https://api.example.com/rates"


def _rates(stack: ScriptStack, tmp_path: Path, code: int, replace: str = CURL) -> str:
    """rates.sh with `replace` (curl: no network here) replaced by a command that exits
    `code` on its first two tries, then prints EUR 1.08; tries counted in tmp/tries."""
    text = (RECIPES / "rates.sh").read_text()
    assert replace in text
    fake = tmp_path / "fake-curl.sh"
    fake.write_text(f'n=$(cat {tmp_path}/tries 2>/dev/null || echo 0); n=$((n + 1))\n'
                    f'echo $n > {tmp_path}/tries\n'
                    f'[ $n -gt 2 ] || exit {code}\n'
                    'echo "EUR 1.08"\n')
    return stack.recipe("rates.sh", text.replace(replace, f"sh {fake}"))


def test_rates_retries_on_exit_75(stack: ScriptStack, tmp_path: Path) -> None:
    res = stack.cli("run", _rates(stack, tmp_path, 75))
    assert res.exit_code == 0, res.output
    (view,) = stack.runs_of("rates", 1)
    assert log_of(view) == "stored EUR 1.08\n", view
    assert stack.steps(view["run_id"]) == ["store"]
    assert (tmp_path / "tries").read_text().strip() == "3"
    # Three attempts with a 2s then a 4s backoff between them: 6s at least.
    (child,) = [c for c in stack.h.rt.store.runs.list_runs(None, stack.h.rt.clock(), limit=100)[0]
                if c.run_id.startswith(view["run_id"] + "-")]
    assert child.finished_at is not None and child.started_at is not None
    assert child.finished_at - child.started_at >= 6.0, child


def test_rates_fails_at_once_on_another_exit_code(stack: ScriptStack, tmp_path: Path) -> None:
    # The recipe's `|| exit 75` turns any curl failure into 75: the fake replaces it too,
    # so that its 64 reaches the activity.
    path = _rates(stack, tmp_path, 64, replace=CURL + " || exit 75")
    res = stack.cli("run", path)
    assert res.exit_code == 1, res.output
    (view,) = stack.runs_of("rates", 1)
    assert view["status"] == "failed", view
    assert "stored" not in log_of(view)
    assert (tmp_path / "tries").read_text().strip() == "1"


def test_run_prints_a_successful_scripts_log(stack: ScriptStack) -> None:
    res = stack.cli("run", stack.recipe("approve.sh", "echo hello\n"))
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1:2] == ["hello"], res.output


def test_approve_refunds_on_the_signal(stack: ScriptStack) -> None:
    res = stack.cli("submit", stack.recipe("approve.sh"))
    assert res.exit_code == 0, res.output
    run_id = poll("the approve run", lambda: _live(stack, "approve"))[0]["run_id"]
    res = stack.cli("signal", run_id, "approve")
    assert res.exit_code == 0, res.output
    (view,) = stack.runs_of("approve", 1)
    assert view["status"] == "success", view
    assert "refunded order 1042" in log_of(view)
    assert stack.steps(run_id) == ["refund"]
