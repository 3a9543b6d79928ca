"""Durable state cells: values scoped by entity that outlive runs (`ctx.state` in a durable
workflow; `orchestrator state` and `/state` to inspect and repair them).

A durable run's operation is performed by the orchestrator and recorded in one
transaction with its journal entry (`perform`): the cell changes exactly when the
answer is recorded. So

- `add` claims a key once for the whole project: one run wins, and a replay of the
  winner still sees that it won (its recorded answer);
- `incr` is applied once per operation, whatever crashes: the answer it recorded is the
  number it drew (a read-modify-write guarded by the version it read, retried on
  contention);
- `get` is a live, strongly consistent read, and what it saw is recorded;
- `set` and `delete` happen once, with the entry.

Names follow the rule of names (services/values.py); values the 256 KiB cap."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.engine.durable_waits import Waiting, wait_entry
from orchestrator.errors import Code, ConditionFailed, NotFound, StoreError, UsageError
from orchestrator.services.values import check_value, checked_name

__all__ = ["MAX_KEY", "StateService"]

MAX_KEY = 512
# The longest TTL a cell takes (100 years): an expiry past it is no expiry to speak of.
MAX_TTL = 100 * 365 * 86400.0
# Read-modify-write rounds before a contended cell is reported (each loses only to
# another writer's success).
ROUNDS = 50


def _checked(entity: Any, key: Any) -> tuple[str, str]:
    if not isinstance(entity, str) or not isinstance(key, str):
        raise UsageError("state: entity and key are strings")
    entity = checked_name("state entity", entity)
    if not key or len(key) > MAX_KEY or any(ord(c) < 32 for c in key):
        raise UsageError(f"state key {key!r}: 1 to {MAX_KEY} printable characters")
    return entity, key


def _ttl(ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) \
            or not 0 < ttl <= MAX_TTL:
        raise UsageError(f"ttl: a number of seconds above 0 and at most {MAX_TTL:g} (100"
                         f" years), got {ttl!r}")
    return float(ttl)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class StateService:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    # ---- inspecting and repairing --------------------------------------------------------

    def get(self, entity: str, key: str) -> dict[str, Any]:
        entity, key = _checked(entity, key)
        cell = self.store.state.get(entity, key, self.clock())
        if cell is None:
            raise NotFound(f"no state cell {key!r} in entity {entity!r}")
        return cell.doc()

    def list(self, entity: str, after: str | None = None, limit: int = 100) -> dict[str, Any]:
        entity = checked_name("state entity", entity)
        cells = self.store.state.list(entity, self.clock(), after=after, limit=limit)
        return {"entity": entity, "cells": [c.doc() for c in cells],
                "next": cells[-1].key if len(cells) == limit else None}

    def set(self, entity: str, key: str, value: Any, ttl: Any = None) -> dict[str, Any]:
        entity, key = _checked(entity, key)
        check_value("a state cell's value", value)
        life, now = _ttl(ttl), self.clock()
        for _ in range(ROUNDS):
            cell = self.store.state.get(entity, key, now)
            try:
                self.store.state.write(self.store.state.put_item(
                    entity, key, value, now, expect=cell, ttl=life), what=f"{entity}/{key}: set")
            except ConditionFailed:
                continue
            return self.get(entity, key)
        raise StoreError(f"state cell {entity}/{key} is contended: try again")

    def delete(self, entity: str, key: str) -> dict[str, Any]:
        entity, key = _checked(entity, key)
        if not self.store.state.delete(entity, key):
            raise NotFound(f"no state cell {key!r} in entity {entity!r}")
        return {"entity": entity, "key": key, "deleted": True}

    # ---- a durable run's operation -------------------------------------------------------

    def perform(self, run_id: str, waiting: Waiting, now: float) -> dict[str, Any]:
        """Carry out the `state` operation `waiting` names for a run, and record its
        answer in the same transaction; the recorded entry (another holder's, if it
        recorded the operation first: nothing is then applied twice)."""
        d = waiting.detail
        action = str(d.get("action"))
        entity, key = _checked(d.get("entity"), d.get("key"))
        state = self.store.state
        for _ in range(ROUNDS):
            cell = state.get(entity, key, now)
            writes: list[dict[str, Any]] = []
            answer: Any = None
            if action == "get":
                answer = None if cell is None else cell.value
            elif action == "add":
                answer = cell is None
                if answer:
                    value = True if d.get("value") is None else d.get("value")
                    check_value("a state cell's value", value)
                    writes.append(state.put_item(entity, key, value, now, expect=None,
                                                 ttl=_ttl(d.get("ttl")),
                                                 claimer=f"{run_id}/{waiting.id}"))
            elif action == "incr":
                old = 0 if cell is None else cell.value
                by = d.get("by", 1)
                if not _number(old) or not _number(by):
                    return self._failed(run_id, waiting, now, f"state {entity}/{key}: incr "
                                        f"needs numbers, the cell holds {old!r}")
                answer = old + by
                writes.append(state.put_item(entity, key, answer, now, expect=cell,
                                             ttl=_ttl(d.get("ttl")) if cell is None else None))
            elif action == "set":
                check_value("a state cell's value", d.get("value"))
                writes.append(state.put_item(entity, key, d.get("value"), now, expect=cell,
                                             ttl=_ttl(d.get("ttl"))))
            elif action == "delete":
                answer = cell is not None
                if cell is not None:
                    writes.append(state.delete_item(entity, key))
            else:
                raise UsageError(f"state: unknown action {action!r}")
            entry = wait_entry(waiting, now, value=answer)
            try:
                if writes:
                    return self.store.journal.put_entry_with(run_id, entry, now, writes)
                return self.store.journal.put_entry(run_id, entry, now)
            except ConditionFailed:
                continue  # the cell moved since it was read: read it again
        raise StoreError(f"state cell {entity}/{key} is contended: the run tries again")

    def _failed(self, run_id: str, waiting: Waiting, now: float, message: str
                ) -> dict[str, Any]:
        entry = wait_entry(waiting, now, status="error",
                           error={"code": Code.INVALID_VALUE.value, "message": message})
        return self.store.journal.put_entry(run_id, entry, now)
