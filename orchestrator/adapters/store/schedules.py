"""Schedules' cursors in the control table (`schedule#<workflow>`, services/triggers/scheduler.py):
the cadence a cursor was set up for, the next tick it fires at, its pause flag and what
its last fire did; each tick is taken once by a write guarded on the tick it read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import Item, Pk, doc_of
from orchestrator.adapters.store.control_table import ControlTable
from orchestrator.strict_json import dumps

__all__ = ["Schedule", "Schedules"]


@dataclass(frozen=True)
class Schedule:
    """A schedule's cursor: the cadence it was set up for (`describe` of the spec), the
    next tick it fires at, its pause flag and what its last fire did (`doc`)."""

    spec: str | None
    next_fire: float
    paused: bool
    doc: dict[str, Any]


def _schedule(item: Item) -> Schedule:
    spec = item.get("spec", {}).get("S")
    return Schedule(
        spec=None if spec is None else str(spec),
        next_fire=float(item.get("next_fire", {}).get("N", "inf")),
        paused=bool(item.get("paused", {}).get("BOOL", False)),
        doc=doc_of(item) or {},
    )


class Schedules(ControlTable):
    """A schedule's cursor: read, set up, advanced once per tick, paused and resumed."""

    def schedule(self, pk: Pk, now: float) -> Schedule | None:
        """A schedule's cursor (None: not set up yet)."""
        item = self.get(pk, now=now)
        return None if item is None else _schedule(item)

    def reset_schedule(self, pk: Pk, spec: str, first: float, *, old_spec: str | None) -> bool:
        """Create a schedule's cursor, or reset it after its cadence changed from
        `old_spec` (guarded: False if another scheduler did it first)."""
        values: dict[str, Any] = {":spec": {"S": spec}, ":next": num(first),
                                  ":f": {"BOOL": False}}
        if old_spec is None:
            cond = "attribute_not_exists(pk)"
        else:
            cond = "spec = :old"
            values[":old"] = {"S": old_spec}
        return self.update_if(
            pk, "SET spec = :spec, next_fire = :next, paused = if_not_exists(paused, :f)",
            values, cond,
        )

    def advance_schedule(self, pk: Pk, due: float, following: float, doc: Any) -> bool:
        """Move a schedule's cursor from the tick `due` it was read at (guarded: once)."""
        values = {":next": num(following), ":due": num(due), ":doc": {"S": dumps(doc)}}
        return self.update_if(pk, "SET next_fire = :next, doc = :doc", values,
                              "next_fire = :due")

    def record_schedule(self, pk: Pk, doc: Any) -> None:
        """What the last fire did (its runs, misses, error)."""
        self.update(pk, update="SET doc = :doc", values={":doc": {"S": dumps(doc)}})

    def pause_schedule(self, pk: Pk) -> None:
        self.update(pk, update="SET paused = :t", values={":t": {"BOOL": True}})

    def resume_schedule(self, pk: Pk, next_fire: float) -> None:
        self.update(pk, update="SET paused = :f, next_fire = :next",
                    values={":f": {"BOOL": False}, ":next": num(next_fire)})
