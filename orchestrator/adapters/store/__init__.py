"""DynamoDB rows: every read and every conditional write of run state goes through `Store`,
composed by table, so that a call site shows what it touches:

- `store.runs` (`run_rows.RunRows`): run rows (create, read, admit, count down, halt,
  finish), and their listing (`run_listing.RunListing`: the listing indexes' keys,
  then the rows);
- `store.steps` (`Steps`): step rows, as whole items (`step_rows.StepRows`: batch
  writes, reads, outputs) and by guarded moves (`step_writes.StepWrites`: claim,
  redispatch, with the `Lease` a claim carries; `step_promotions.StepPromotions`:
  promote; `step_outcomes.StepOutcomes`: record a success or a retry;
  `step_stops.StepStops`: a final failure, a skip, a stop's flags, an attempt given up
  at its start check); a wide join's count, kept in small items apart from its row
  (`join_counts.JoinCounts`, which promotes);
- `store.journal` (`journal.Journal`): a durable run's journal entries and run events;
- `store.signals` (`signals.SignalStore`): a durable run's queued signals;
- `store.drivers` (`drivers.Drivers`): a durable run's driver rows and parallels;
- `store.control` (`control.Control`): the control table's items (locks, throttles,
  schedules, idempotency keys, hooks, deliveries, event waits): the generic reads and
  writes (`control_table.ControlTable`) with the named writes of each item kind
  (`throttles`, `limit_lines`, `schedules`, `sweep_shards`, `hook_spends`); the
  table's keys and codecs are `control_keys`;
- `store.approvals` (`approvals.ApprovalStore`): approval gates and the inbox, in the
  control table;
- `store.state` (`state_cells.StateCells`): durable state cells, in the control table;
- `store.locks` (`locks.LockStore`): locks, their waiting lines and who holds what;
- `store.fanouts` (`fanouts.FanOutItems`): the outcomes of a fan_out step's items;
- `store.bursts` (`bursts.Bursts`): debounced bursts and the triggers they took;
- `store.batches` (`batches.BatchRows`): open batches of events, the events they took,
  and the guarded joins of a batch's queued run;
- `store.versions` (`versions.VersionRows`): the live versions of each backend's code
  and the current one;
- `store.bulk` (`bulk_jobs.BulkJobs`): bulk actions' jobs and what each did to a run,
  in the control table;
- `store.copies` (`run_copies.RunCopies`): a run read whole for an export, and one
  imported from another stack (inert: nothing here advances it);
- `store.heartbeats` (`heartbeats.Heartbeats`): the processes' heartbeats, and
  `store.counts` (`stack_counts.StackCounts`): the stack's counters for `/metrics`,
  and `store.hourly` (`hourly_counts.HourlyCounts`): the same hour by hour, for a
  workflow's page, all in the control table; `store.tallies` (adapters/tallies.py) holds what this
  process's writes counted (runs started and finished) until its heartbeat adds it.

Each part shares `tables.Tables` (the client, the table names, the wake times and
retention); `codec` holds the item encoding of rows.

Each write names the state it expects (status, attempt, lease owner). A duplicate,
late or reordered message finds that guard false and the write raises ConditionFailed,
which callers treat as "already done by someone else". `ClientError` never leaves the
store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store.approvals import ApprovalStore
from orchestrator.adapters.store.batches import BatchRows
from orchestrator.adapters.store.bulk_jobs import BulkJobs
from orchestrator.adapters.store.bursts import Bursts
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.drivers import Drivers
from orchestrator.adapters.store.fanouts import FanOutItems
from orchestrator.adapters.store.heartbeats import Heartbeats
from orchestrator.adapters.store.hourly_counts import HourlyCounts
from orchestrator.adapters.store.join_counts import JoinCounts
from orchestrator.adapters.store.journal import Journal
from orchestrator.adapters.store.locks import LockStore
from orchestrator.adapters.store.run_copies import RunCopies
from orchestrator.adapters.store.run_rows import RunRows
from orchestrator.adapters.store.signals import SignalStore
from orchestrator.adapters.store.stack_counts import StackCounts
from orchestrator.adapters.store.state_cells import StateCells
from orchestrator.adapters.store.step_outcomes import StepOutcomes
from orchestrator.adapters.store.step_rows import StepRows
from orchestrator.adapters.store.step_stops import StepStops
from orchestrator.adapters.store.step_writes import Lease
from orchestrator.adapters.store.versions import VersionRows
from orchestrator.adapters.tallies import Tallies
from orchestrator.engine.wakes import WakeTimes
from orchestrator.settings import ResourceNames

__all__ = ["Lease", "Steps", "Store"]


class Steps(StepRows, JoinCounts, StepOutcomes, StepStops):
    """The step rows of the steps table: whole-item reads and writes, and guarded moves
    (JoinCounts, StepOutcomes and StepStops are StepWrites: promotions with a wide
    join's count, an attempt's success or retry, and the writes that end a step without
    its success)."""


class Store:
    """Reads and conditional writes of the tables (one DynamoDB client), one part a table
    (or a kind of item in the steps table)."""

    def __init__(
        self,
        dynamodb: Any,
        names: ResourceNames,
        *,
        step_retention: float = 30 * 24 * 3600.0,
        wake: WakeTimes | None = None,
        blobs: Any = None,
        inline_limit: int = 32 * 1024,
        search: bool = True,
        declared: Callable[[str], bool] | None = None,
    ) -> None:
        self.tallies = Tallies()
        shared: dict[str, Any] = {"step_retention": step_retention, "wake": wake or WakeTimes(),
                                  "blobs": blobs, "inline_limit": inline_limit,
                                  "tallies": self.tallies}
        self.runs = RunRows(dynamodb, names, **shared)
        self.runs.search = search  # the search index (run_search.py): written and read
        self.steps = Steps(dynamodb, names, **shared)
        self.journal = Journal(dynamodb, names, **shared)
        self.signals = SignalStore(dynamodb, names, **shared)
        self.drivers = Drivers(dynamodb, names, **shared)
        self.control = Control(dynamodb, names.control_table)
        self.approvals = ApprovalStore(self.control)
        self.state = StateCells(self.control)
        self.locks = LockStore(self.control, names.runs_table)
        self.fanouts = FanOutItems(self.control, step_retention)
        self.bursts = Bursts(self.control)
        self.batches = BatchRows(self.runs, self.control)
        self.versions = VersionRows(self.control, names.runs_table, names.steps_table)
        self.copies = RunCopies(dynamodb, names, **shared)
        self.heartbeats = Heartbeats(self.control)
        # `declared`: whether a workflow is the stack's (not an ad-hoc script's), for
        # the counters' labels (stack_counts.py).
        self.counts = StackCounts(self.control, declared)
        self.hourly = HourlyCounts(self.control)
        self.bulk = BulkJobs(self.control)
        self.names = names
        # What every part was built with: a row's retention and the wake times.
        self.step_retention = step_retention
        self.wake = self.runs.wake
