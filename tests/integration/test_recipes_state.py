"""Reference 002's recipes that keep state between runs, as the durable examples declare
them (functions/examples/durable/: handle_once, poll, reindex), each reproducing the
recipe's stated outcome on the real engine with a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from functions.examples.durable import Services, create_app
from infra.emulator import Emulator
from orchestrator.testing import WorkflowEnv

OPTIONS = {"handle-order": {"on": {"event": "order.placed"}},
           "reindex": {"on": {"event": "customer.updated"}},
           "ticket-poll": {"schedule": {"every": "5m"}}}


@pytest.fixture
def s(tmp_path: Path) -> Services:
    return Services.at(tmp_path)


@pytest.fixture
def env(emulator: Emulator, tmp_path: Path) -> Iterator[WorkflowEnv]:
    with WorkflowEnv(create_app(tmp_path), emulator=emulator, options=OPTIONS) as e:
        yield e


# ---- handle each event once --------------------------------------------------------------


def test_each_order_is_charged_once_through_three_layers_of_dedupe(
        env: WorkflowEnv, s: Services) -> None:
    # Layer 1: the same event delivered twice (one event id) is one run.
    first = env.emit("order.placed", {"order": "1042"}, event_id="evt-1")
    assert env.emit("order.placed", {"order": "1042"}, event_id="evt-1") == first
    # Layer 2: another event about the same order is caught by the state claim.
    second = env.emit("order.placed", {"order": "1042"}, event_id="evt-2")
    env.run_until_idle()
    assert env.result(first[0])["handled"] is True
    assert env.result(second[0]) == {"order": "1042", "handled": False,
                                     "message": "order 1042 already handled"}
    [charge] = s.orders.payments.entries()
    assert charge["order"] == "1042"
    assert [e["order"] for e in s.orders.shipments.entries()] == ["1042"]
    # Layer 3: a charge step run again (its worker died before the result was recorded)
    # carries the same idempotency key, and the payment service charges once.
    again = s.orders.charge("1042", key=charge["key"])
    assert again["again"] is True and len(s.orders.payments.entries()) == 1
    assert env.result(first[0])["key"] == charge["key"]


# ---- poll with a cursor on a schedule -----------------------------------------------------


def test_three_ticks_move_the_cursor_and_a_failed_tick_does_not(
        env: WorkflowEnv, s: Services) -> None:
    def tick(fail: bool = False) -> str:
        if fail:  # a tick whose processing fails (the scheduler's input is fixed)
            run_id = env.start("ticket-poll", {"fail": True})
        else:
            env.advance("5m")
            [run_id] = env.rt.scheduler.tick()
        env.run_until_idle()
        return run_id

    assert env.rt.scheduler.tick() == []  # the schedule's first fire is 5 minutes away
    runs = [tick(), tick(), tick()]
    assert [env.result(r)["line"] for r in runs] == [
        "processed tickets 0..10", "processed tickets 10..20", "processed tickets 20..30"]
    failed = tick(fail=True)
    assert env.status(failed) == "failed"
    assert env.rt.state.get("tickets", "cursor")["value"] == 30  # not moved
    after = tick()
    assert env.result(after)["line"] == "processed tickets 30..40"  # the same range again
    assert [e["line"] for e in s.tickets.processed.entries()][-1] == "processed tickets 30..40"


# ---- debounce with tickets ------------------------------------------------------------


def test_five_updates_in_a_burst_cause_one_reindex_on_the_last(
        env: WorkflowEnv, s: Services) -> None:
    runs = []
    for _ in range(5):
        runs += env.emit("customer.updated", {}, key="acme")
        env.advance("500ms")
    other = env.emit("customer.updated", {}, key="globex")
    env.run_until_idle()
    lines = [env.result(r)["line"] for r in runs]
    assert lines == ["ticket 1 superseded", "ticket 2 superseded", "ticket 3 superseded",
                     "ticket 4 superseded", "reindexing acme (ticket 5)"]
    assert env.result(other[0])["line"] == "reindexing globex (ticket 1)"
    assert [e["line"] for e in s.indexer.log.entries()] == [
        "reindexing acme (ticket 5)", "reindexing globex (ticket 1)"]
