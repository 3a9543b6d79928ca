"""The control table's part of the store (`store.control`): `Control` is the generic
reads and writes of its items (control_table.py) with the named writes of the item kinds
that have them, one module each:

- throttles.py: throttle budgets (`throttle#`);
- limit_lines.py: concurrency limits' holders, waiting runs and turns (`lock#`,
  `queue#`, `turns#`);
- schedules.py: schedules' cursors (`schedule#`);
- sweep_shards.py: the sweepers' wake shards and full-sweep turn (`sweep#`);
- hook_spends.py: spending a hook (`hook#`).

Other kinds are parts built on a `Control` (approvals.py, state_cells.py, locks.py,
fanouts.py, bursts.py) or services that use the generic calls. The table's keys, the
codecs of its items and the table of every item kind are in control_keys.py."""

from __future__ import annotations

from orchestrator.adapters.store.hook_spends import HookSpends
from orchestrator.adapters.store.limit_lines import LimitLines
from orchestrator.adapters.store.schedules import Schedules
from orchestrator.adapters.store.sweep_shards import SweepShards
from orchestrator.adapters.store.throttles import Throttles

__all__ = ["Control"]


class Control(Throttles, LimitLines, Schedules, SweepShards, HookSpends):
    """Reads and conditional writes of the control table's items, by keys made in
    control_keys.py."""
