"""Throttle budgets in the control table (`throttle#<workflow>#<key>`): one item per key
holding `tat`, the theoretical arrival time of the next run, moved forward by each
admitted run under a guard on the time it was read at (services/admission/gate.py)."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import Pk
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["Throttles"]


class Throttles(ControlTable):
    """A throttle budget read, and moved under a guard on the time it was read at."""

    def throttle_tat(self, pk: Pk, now: float) -> float | None:
        """A throttle budget's theoretical arrival time (None: no live budget yet)."""
        item = self.get(pk, now=now)
        return None if item is None else float(item["tat"]["N"])

    def move_throttle(
        self, pk: Pk, old: float | None, new: float, *, expires_at: float, now: float
    ) -> bool:
        """Move a throttle budget from the `old` time it was read at to `new` (guarded:
        False if another arrival moved it first)."""
        values: dict[str, Any] = {":new": num(new), ":exp": num(expires_at)}
        if old is None:
            cond = "attribute_not_exists(tat) OR expires_at <= :now"
            values[":now"] = num(now)
        else:
            cond = "tat = :old"
            values[":old"] = num(old)
        return self.update_if(pk, "SET tat = :new, expires_at = :exp", values, cond)
