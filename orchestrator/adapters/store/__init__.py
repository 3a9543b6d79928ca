"""DynamoDB rows: every read and every conditional write of run state goes through `Store`.

Each write names the state it expects (status, attempt, lease owner). A duplicate,
late or reordered message finds that guard false and the write raises ConditionFailed,
which callers treat as "already done by someone else". `ClientError` never leaves the
store.

`Store` is one facade over its row classes, one module each:

- `run_rows.RunRows`: run rows (create, read, admit, count down, halt, finish);
- `run_listing.RunListing`: runs listed newest first, from the listing indexes' keys;
- `step_rows.StepRows`: step rows as whole items (batch writes, reads, outputs);
- `step_writes.StepTransitions`: guarded step moves (claim, promote, record an
  attempt's outcome, skip), and the `Lease` a claim carries;
- `join_counts.JoinCounts`: a wide join's count, kept in small items apart from its row;
- `tables.Tables`: the client and table names they share;
- `codec`: the item encoding of rows; `control.Control`: the control table's items.

- `journal.JournalRows`: a durable run's journal entries, signals and driver writes."""

from __future__ import annotations

from orchestrator.adapters.store.join_counts import JoinCounts
from orchestrator.adapters.store.journal import JournalRows
from orchestrator.adapters.store.run_listing import RunListing
from orchestrator.adapters.store.run_rows import RunRows
from orchestrator.adapters.store.step_rows import StepRows
from orchestrator.adapters.store.step_writes import Lease

__all__ = ["Lease", "Store"]


class Store(RunRows, RunListing, StepRows, JoinCounts, JournalRows):
    """Reads and conditional writes of the runs and steps tables (one DynamoDB client)."""
