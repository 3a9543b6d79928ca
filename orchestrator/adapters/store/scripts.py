"""The script workflows stored through the API: one item each in the control table's
`scripts` partition, its document as JSON (services/scripts/registry.py reads it)."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import SCRIPTS, Sk, doc_of, script_sk, sk_of
from orchestrator.strict_json import dumps

__all__ = ["ScriptItems"]


class ScriptItems:
    def __init__(self, control: Control) -> None:
        self.control = control

    def put(self, name: str, doc: dict[str, Any]) -> None:
        """Create or replace script `name`'s item."""
        self.control.update(SCRIPTS, script_sk(name), update="SET doc = :d",
                            values={":d": {"S": dumps(doc)}})

    def get(self, name: str, now: float) -> dict[str, Any] | None:
        item = self.control.get(SCRIPTS, script_sk(name), now=now)
        return None if item is None else dict(doc_of(item))

    def delete(self, name: str) -> bool:
        return self.control.delete(SCRIPTS, script_sk(name), condition="attribute_exists(pk)")

    def all(self, now: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after: Sk | None = None
        while True:
            items = self.control.query(SCRIPTS, now=now, after=after)
            out.extend(dict(doc_of(i)) for i in items)
            if len(items) < 100:
                return out
            after = sk_of(items[-1])
