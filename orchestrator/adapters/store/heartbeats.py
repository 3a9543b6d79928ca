"""The processes' heartbeats in the control table (`procs`, one item a process): a worker,
a sweeper or an API process (a Lambda container's, too) writes its own every beat
(services/health/heartbeat.py), and one query lists them all.

An item expires by TTL `GONE_AFTER` after its last beat: the list holds the processes
alive (seen within three of their beats) and those gone recently (silent longer, or
stopped: a process that stops cleanly says so in its last beat)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import PROCESSES, Item, Sk, process_sk, sk_of
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["GONE_AFTER", "MISSED_BEATS", "Heartbeat", "Heartbeats"]

# How long a process's item outlives its last beat (seconds): it is shown as gone till then.
GONE_AFTER = 300.0
# A process silent for this many of its beats is taken for gone.
MISSED_BEATS = 3
PAGE = 100


@dataclass(frozen=True)
class Heartbeat:
    """A process's last beat: what it is and what it did since it started."""

    kind: str  # worker, sweeper, api
    id: str  # host:pid:nonce (a Lambda container's: lambda:host:pid:nonce)
    started_at: float
    last_seen: float
    every: float  # its beat's period (seconds)
    version: str
    # What it handled since it started (a worker's messages and attempts, a sweeper's
    # passes and repairs).
    handled: Mapping[str, int] = field(default_factory=dict)
    # A worker's attempts running at its beat, by backend.
    in_flight: Mapping[str, int] = field(default_factory=dict)
    stopped: bool = False  # its last beat, written as it stopped

    def alive(self, now: float) -> bool:
        return not self.stopped and now - self.last_seen <= MISSED_BEATS * self.every

    def as_json(self, now: float) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "started_at": self.started_at,
                "last_seen": self.last_seen, "seconds_since": round(now - self.last_seen, 3),
                "every": self.every, "version": self.version, "handled": dict(self.handled),
                "in_flight": dict(self.in_flight), "stopped": self.stopped,
                "alive": self.alive(now)}


def _heartbeat(item: Item) -> Heartbeat:
    doc = json.loads(item.get("doc", {}).get("S", "{}"))
    kind, _, pid = sk_of(item).partition("#")
    return Heartbeat(kind, pid, float(item["started_at"]["N"]), float(item["last_seen"]["N"]),
                     float(item["every"]["N"]), item.get("version", {}).get("S", ""),
                     doc.get("handled", {}), doc.get("in_flight", {}),
                     bool(item.get("stopped", {}).get("BOOL", False)))


class Heartbeats:
    def __init__(self, control: ControlTable) -> None:
        self.control = control

    def beat(self, hb: Heartbeat) -> None:
        """Write `hb` over the process's item, in one request."""
        doc = json.dumps({"handled": dict(hb.handled), "in_flight": dict(hb.in_flight)})
        self.control.update(
            PROCESSES, process_sk(hb.kind, hb.id),
            # Every name through a placeholder: none can clash with a reserved word.
            update="SET #s = :s, #l = :l, #e = :e, #v = :v, #d = :d, #x = :x, #exp = :exp",
            names={"#s": "started_at", "#l": "last_seen", "#e": "every", "#v": "version",
                   "#d": "doc", "#x": "stopped", "#exp": "expires_at"},
            values={":s": num(hb.started_at), ":l": num(hb.last_seen), ":e": num(hb.every),
                    ":v": {"S": hb.version}, ":d": {"S": doc}, ":x": {"BOOL": hb.stopped},
                    ":exp": num(hb.last_seen + GONE_AFTER)})

    def processes(self, now: float) -> list[Heartbeat]:
        """Every process with a live item (alive or gone recently), newest beat first."""
        out: list[Heartbeat] = []
        after: Sk | None = None
        while True:
            items = self.control.query(PROCESSES, now=now, limit=PAGE, after=after,
                                       with_expired=True)
            out += [_heartbeat(i) for i in items
                    if float(i.get("expires_at", {}).get("N", "inf")) > now]
            if len(items) < PAGE:
                return sorted(out, key=lambda h: h.last_seen, reverse=True)
            after = sk_of(items[-1])
