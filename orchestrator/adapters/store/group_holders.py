"""Concurrency groups in the control table (services/admission/concurrency.py): the run
holding a group (`lock#<group>#<key>`) and the runs waiting for it
(`waiting#<group>#<key>`, one item each, in arrival order). "Lock" in the code names a
user's lock only (`ctx.lock`, `lock:`: store/locks.py); the stored prefixes are the data
format and stay as they are, so items an earlier version wrote are still read."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.adapters.store.control_keys import Pk, Sk, sk_of
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["GroupHolders", "WaitingRun"]


@dataclass(frozen=True)
class WaitingRun:
    """A run waiting for a concurrency group, and its place in line."""

    run_id: str
    sk: Sk


class GroupHolders(ControlTable):
    """A concurrency group's holder and its waiting line."""

    def group_holder(self, pk: Pk, now: float) -> str | None:
        """The run holding a concurrency group (None: it is free)."""
        item = self.get(pk, now=now)
        return None if item is None else str(item["holder"]["S"])

    def take_hold(self, pk: Pk, holder: str, now: float) -> bool:
        """Take a concurrency group (True) unless another run holds it."""
        return self.put_new(pk, now=now, attrs={"holder": {"S": holder}})

    def let_go(self, pk: Pk, holder: str) -> bool:
        """Let a group go, only if `holder` still holds it."""
        return self.delete(pk, condition="holder = :me", values={":me": {"S": holder}})

    def wait_in_line(self, pk: Pk, sk: Sk, run_id: str, now: float) -> bool:
        """Queue a run for a concurrency group at its place `sk` (again: a no-op)."""
        return self.put_new(pk, sk, now=now, attrs={"run_id": {"S": run_id}})

    def waiting_runs(self, pk: Pk, now: float, limit: int) -> list[WaitingRun]:
        """The first `limit` runs waiting for a concurrency group, oldest first."""
        return [WaitingRun(str(i["run_id"]["S"]), sk_of(i))
                for i in self.query(pk, now=now, limit=limit)]
