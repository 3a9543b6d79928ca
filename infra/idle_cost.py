"""What a deployed stack costs standing idle (`orchestrator deploy --dry-run` prints it),
at the prices of orchestrator/prices.py.

Idle is not quite zero: the sweeper's schedule invokes it once a minute, and an idle
invocation makes one pass (per wake shard: take it, read the two wake indexes, give it
back; then one read of the `active` index) before it stops (orchestrator/
lambda_handlers.py), and the dead-letter queue's alarm is billed by the month."""

from __future__ import annotations

from orchestrator.engine.wakes import WAKE_SHARDS
from orchestrator.prices import PRICES

__all__ = ["idle_month"]

MINUTES_PER_MONTH = 30 * 24 * 60
# What one idle pass does, by the sweeper's code: per shard a take and a release
# (writes) and one query per table's wake index (reads); then the `active` index's read.
IDLE_PASS_WRITES = 2 * WAKE_SHARDS
IDLE_PASS_READS = 2 * WAKE_SHARDS + 1
# An idle invocation's billed time (a warm container's pass, measured locally at about
# 70 ms; rounded up) at the template's 512 MB, and its log lines (START, END, REPORT).
IDLE_INVOCATION_SECONDS = 0.15
SWEEPER_MEMORY_GB = 0.5
IDLE_LOG_BYTES = 350


def idle_month() -> dict[str, float]:
    """Dollars a month for a deployed stack that runs nothing, by item, and the total."""
    n = MINUTES_PER_MONTH
    out = {
        f"sweeper invocations ({n:,} a month)": n * PRICES["lambda_request"],
        f"sweeper compute ({IDLE_INVOCATION_SECONDS:g} s at {SWEEPER_MEMORY_GB:g} GB each)":
            n * IDLE_INVOCATION_SECONDS * SWEEPER_MEMORY_GB * PRICES["lambda_gb_second"],
        f"DynamoDB writes of idle passes ({IDLE_PASS_WRITES} each)":
            n * IDLE_PASS_WRITES * PRICES["dynamodb_write_unit"],
        f"DynamoDB reads of idle passes ({IDLE_PASS_READS} each, at most 1 unit)":
            n * IDLE_PASS_READS * PRICES["dynamodb_read_unit"],
        "sweeper logs": n * IDLE_LOG_BYTES / 1e9 * PRICES["logs_ingest_gb"],
        "dead-letter alarm": PRICES["cloudwatch_alarm_month"],
    }
    out["total"] = sum(out.values())
    return out
