"""A run's AWS requests priced: the estimate `show`, the API and the dashboard give, at the
on-demand prices of the benchmark's dated table (orchestrator/prices.py, which
tests/bench/bill.py prices the benchmarks with: one table).

How a request is priced (an estimate from counts, not a bill):
- DynamoDB: a write request (PutItem, UpdateItem, DeleteItem, BatchWriteItem) as one
  write request unit, TransactWriteItems as two (a transactional write of one item); a
  read request (GetItem, Query, Scan, BatchGetItem) as one read request unit (a
  strongly consistent read of up to 4 KB: the orchestrator's reads are consistent),
  TransactGetItems as two. Items over 1 KB (writes) or 4 KB (reads) and batches or
  transactions of several items cost more: the estimate is a floor.
- SQS: one request each (a message over 64 KB counts as more on AWS).
- S3: PutObject, CopyObject and listings at the PUT class, every other request at the
  GET class.
An operation outside these (a count stored under a service's "other") is priced as its
service's dearer kind (a DynamoDB write, an S3 PUT)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.prices import PRICES, PRICES_DATE

__all__ = ["PRICES_DATE", "estimate", "price_of"]

_DDB_WRITES = {"PutItem": 1, "UpdateItem": 1, "DeleteItem": 1, "BatchWriteItem": 1,
               "TransactWriteItems": 2}
_DDB_READS = {"GetItem": 1, "Query": 1, "Scan": 1, "BatchGetItem": 1, "TransactGetItems": 2}
_S3_PUT_CLASS = {"PutObject", "CopyObject", "ListObjectsV2", "ListObjects",
                 "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"}


def price_of(op: str) -> float:
    """Dollars for one request of `op` ("service.Operation")."""
    service, _, name = op.partition(".")
    if service == "dynamodb":
        if name in _DDB_READS:
            return _DDB_READS[name] * PRICES["dynamodb_read_unit"]
        return _DDB_WRITES.get(name, 1) * PRICES["dynamodb_write_unit"]
    if service == "sqs":
        return PRICES["sqs_request"]
    if service == "s3":
        get = name not in _S3_PUT_CLASS and name != "other"
        return PRICES["s3_get_request" if get else "s3_put_request"]
    return 0.0


def estimate(requests: Mapping[str, int]) -> dict[str, Any]:
    """A run's `cost` as its view shows it: its requests by operation (most first), their
    total, the dollars they come to and the date of the prices."""
    ordered = dict(sorted(((op, n) for op, n in requests.items() if n),
                          key=lambda kv: (-kv[1], kv[0])))
    return {
        "requests": ordered,
        "total_requests": sum(ordered.values()),
        "dollars": round(sum(n * price_of(op) for op, n in ordered.items()), 10),
        "prices_date": PRICES_DATE,
    }
