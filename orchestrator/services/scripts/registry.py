"""Script workflows stored through the API (`orchestrator handler set`, `orchestrator
schedule create`, PUT /scripts/{name}): one control item each in the `scripts`
partition, `{name, sha256, on, schedule, updated_at}`, its text in the blob store
(texts.py). Putting a name again replaces what it starts; runs already started keep
the text they started on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.scripts import ScriptItems

__all__ = ["ScriptEntry", "ScriptRegistry"]


@dataclass(frozen=True)
class ScriptEntry:
    name: str
    sha256: str
    # `on:` entries ({event, if?}) and a `schedule:` ({every} or {cron, timezone?}), as
    # a manifest would write them.
    on: tuple[dict[str, Any], ...] = ()
    schedule: dict[str, Any] | None = None
    updated_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "on": list(self.on),
                "schedule": self.schedule, "updated_at": round(self.updated_at, 3)}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> ScriptEntry:
        return cls(str(doc["name"]), str(doc["sha256"]), tuple(doc.get("on") or ()),
                   doc.get("schedule"), float(doc.get("updated_at") or 0.0))


class ScriptRegistry:
    def __init__(self, control: Control, clock: Callable[[], float]) -> None:
        self.items = ScriptItems(control)
        self.clock = clock

    def put(self, entry: ScriptEntry) -> ScriptEntry:
        entry = ScriptEntry(entry.name, entry.sha256, entry.on, entry.schedule, self.clock())
        self.items.put(entry.name, entry.doc())
        return entry

    def get(self, name: str) -> ScriptEntry | None:
        doc = self.items.get(name, self.clock())
        return None if doc is None else ScriptEntry.from_doc(doc)

    def delete(self, name: str) -> bool:
        return self.items.delete(name)

    def all(self) -> list[ScriptEntry]:
        return [ScriptEntry.from_doc(d) for d in self.items.all(self.clock())]
