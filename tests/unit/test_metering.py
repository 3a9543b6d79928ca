"""The meter's bookkeeping (orchestrator/adapters/metering.py) and how a write carries its
counts (adapters/store/tables.py: with_requests); the requests themselves are counted
against moto in tests/integration/test_run_cost.py."""

from __future__ import annotations

import uuid

import pytest

from orchestrator.adapters import metering
from orchestrator.adapters.store.tables import with_requests
from orchestrator.prices import PRICES
from orchestrator.services.reads.cost import estimate, price_of


def _sent(op: str) -> None:
    """What botocore's event does for one request."""
    metering._on_request(event_name=f"request-created.{op}")


def test_requests_count_for_the_run_in_scope_only() -> None:
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    _sent("dynamodb.GetItem")  # no run's
    with metering.metered(a):
        _sent("dynamodb.GetItem")
        with metering.metered(b):
            _sent("sqs.SendMessage")
        _sent("dynamodb.GetItem")
    assert metering.pending(a) == {"dynamodb.GetItem": 2}
    assert metering.pending(b) == {"sqs.SendMessage": 1}


def test_a_write_counts_itself_once_and_gives_back_what_it_failed_to_store() -> None:
    run = uuid.uuid4().hex
    with metering.metered(run):
        _sent("dynamodb.GetItem")
        with metering.carry(run, "dynamodb.UpdateItem") as carried:
            _sent("dynamodb.UpdateItem")  # the write itself: in `carried` already
        assert carried == {"dynamodb.GetItem": 1, "dynamodb.UpdateItem": 1}
        assert metering.pending(run) == {}
        _sent("dynamodb.UpdateItem")  # a retry of it, or the next: counted afresh
        assert metering.pending(run) == {"dynamodb.UpdateItem": 1}
        with pytest.raises(RuntimeError), metering.carry(run, "dynamodb.PutItem"):
            _sent("dynamodb.PutItem")
            raise RuntimeError("guard failed")
    # Not stored: back in the meter, the failed write's request with them.
    assert metering.pending(run) == {"dynamodb.UpdateItem": 1, "dynamodb.PutItem": 1}


def test_a_write_made_outside_its_runs_scope() -> None:
    run, other = uuid.uuid4().hex, uuid.uuid4().hex
    metering.charge(run, "sqs.ReceiveMessage")
    # No scope: the handler does not count it, the write does.
    with metering.carry(run, "dynamodb.UpdateItem") as carried:
        _sent("dynamodb.UpdateItem")
    assert carried == {"sqs.ReceiveMessage": 1, "dynamodb.UpdateItem": 1}
    # Another run's scope: that run's request, not this one's.
    metering.charge(run, "sqs.ReceiveMessage")
    with metering.metered(other), metering.carry(run, "dynamodb.UpdateItem") as carried:
        _sent("dynamodb.UpdateItem")
    assert carried == {"sqs.ReceiveMessage": 1}
    assert metering.pending(other) == {"dynamodb.UpdateItem": 1}


def test_stored_names_are_short_and_read_back() -> None:
    counts = {"dynamodb.UpdateItem": 3, "sqs.SendMessageBatch": 1, "s3.GetObject": 0,
              "dynamodb.RestoreTableFromBackup": 2}
    stored = metering.encode(counts)
    assert stored == {"$dU": 3, "$qSB": 1, "$d?": 2}
    item = {k: {"N": str(n)} for k, n in stored.items()} | {"status": {"S": "success"}}
    assert metering.decode(item) == {"dynamodb.UpdateItem": 3, "sqs.SendMessageBatch": 1,
                                     "dynamodb.other": 2}


@pytest.mark.parametrize(("update", "want"), [
    ("SET a = :a", "SET a = :a ADD #rq0 :rq0, #rq1 :rq1"),
    ("ADD remaining :d SET updated_at = :now",
     "ADD #rq0 :rq0, #rq1 :rq1, remaining :d SET updated_at = :now"),
    ("SET x = :x REMOVE y ADD pokes :one", "SET x = :x REMOVE y ADD #rq0 :rq0, #rq1 :rq1,"
     " pokes :one"),
])
def test_counts_join_a_writes_one_add_clause(update: str, want: str) -> None:
    names: dict[str, str] = {}
    values: dict[str, dict[str, str]] = {}
    got = with_requests(update, {"dynamodb.UpdateItem": 2, "dynamodb.GetItem": 1}, names,
                        values)
    assert got == want
    assert names == {"#rq0": "$dG", "#rq1": "$dU"}
    assert values == {":rq0": {"N": "1"}, ":rq1": {"N": "2"}}
    assert with_requests(update, {}, names, values) == update


def test_the_estimate_prices_each_request_from_the_benchmarks_table() -> None:
    cost = estimate({"dynamodb.GetItem": 2, "dynamodb.UpdateItem": 3, "sqs.SendMessage": 1,
                     "dynamodb.TransactWriteItems": 1, "s3.PutObject": 1, "s3.GetObject": 1,
                     "sqs.DeleteMessageBatch": 0})
    assert list(cost["requests"]) == ["dynamodb.UpdateItem", "dynamodb.GetItem",
                                      "dynamodb.TransactWriteItems", "s3.GetObject",
                                      "s3.PutObject", "sqs.SendMessage"]
    assert cost["total_requests"] == 9
    assert cost["dollars"] == pytest.approx(
        2 * PRICES["dynamodb_read_unit"] + 5 * PRICES["dynamodb_write_unit"]
        + PRICES["sqs_request"] + PRICES["s3_put_request"] + PRICES["s3_get_request"])
    assert price_of("cloudformation.DescribeStacks") == 0.0
