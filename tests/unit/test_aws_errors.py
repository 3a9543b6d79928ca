"""How the adapters read AWS's errors (orchestrator/adapters/aws.py): a write refused
because a transaction on its item was in flight, and a transaction cancelled for a
conflict, had no effect and may be sent again (Throttled, which the record of an
attempt resends while its lease lasts); a transaction cancelled by a guard is a guard
that failed. The errors are built as botocore builds them from AWS's answers
(documented shapes; the emulator does not play transaction conflicts)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from orchestrator.adapters.aws import translate_errors
from orchestrator.errors import ConditionFailed, StoreError, Throttled


def aws_error(code: str, operation: str, reasons: list[str] | None = None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": code},
                                "ResponseMetadata": {"HTTPStatusCode": 400}}
    if reasons is not None:
        response["CancellationReasons"] = [{"Code": r} for r in reasons]
    return ClientError(response, operation)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [
    aws_error("TransactionConflictException", "UpdateItem"),
    aws_error("TransactionCanceledException", "TransactWriteItems",
              ["None", "TransactionConflict"]),
    aws_error("TransactionCanceledException", "TransactWriteItems",
              ["ThrottlingError", "TransactionConflict"]),
])
def test_a_write_that_met_a_transaction_in_flight_is_sent_again(error: ClientError) -> None:
    with pytest.raises(Throttled, match="limit lock#x"), translate_errors("limit lock#x"):
        raise error


def test_a_guard_that_failed_in_a_transaction_is_a_guard_not_a_conflict() -> None:
    error = aws_error("TransactionCanceledException", "TransactWriteItems",
                      ["ConditionalCheckFailed", "TransactionConflict"])
    with pytest.raises(ConditionFailed), translate_errors("take"):
        raise error


def test_another_cancellation_is_a_store_error() -> None:
    error = aws_error("TransactionCanceledException", "TransactWriteItems",
                      ["ValidationError"])
    with pytest.raises(StoreError) as caught, translate_errors("take"):
        raise error
    assert not isinstance(caught.value, Throttled | ConditionFailed)
