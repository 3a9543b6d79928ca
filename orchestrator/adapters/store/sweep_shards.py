"""The sweepers' turns in the control table (orchestrator/sweeper.py): each wake shard's
item (`sweep#wake`, sort key the shard: the sweeper holding it, until when, and its two
cursors) and the full sweep's (`sweep#full`: when the last one ran), so that sweepers
running side by side share the shards and take each full sweep once."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import SWEEP_FULL, SWEEP_WAKE, Sk
from orchestrator.adapters.store.control_table import ControlTable
from orchestrator.errors import ConditionFailed

__all__ = ["SweepShards"]


class SweepShards(ControlTable):
    """The wake shards' holds and cursors, and the full sweep's turn."""

    def take_shard(
        self, shard: int, owner: str, until: float, now: float
    ) -> tuple[float, float] | None:
        """Hold a wake shard for one sweep until `until`, unless another sweeper holds
        it: the shard's two cursors (the wakes up to each are done, read promptly and
        read again late; 0 for a new shard), or None."""
        try:
            attrs = self.update(
                SWEEP_WAKE, Sk(str(shard)),
                update="SET #o = :o, held_until = :u",
                values={":o": {"S": owner}, ":u": num(until), ":now": num(now)},
                names={"#o": "owner"},
                condition="attribute_not_exists(#o) OR held_until < :now OR #o = :o",
            )
        except ConditionFailed:
            return None
        return (float(attrs.get("cursor", {}).get("N", 0)),
                float(attrs.get("trail", {}).get("N", 0)))

    def release_shard(self, shard: int, owner: str, cursors: tuple[float, float] | None) -> bool:
        """Give a wake shard back, its wakes up to `cursors` done (None: not advanced).
        False if the hold had lapsed and another sweeper took the shard."""
        values: dict[str, Any] = {":o": {"S": owner}, ":zero": num(0)}
        names = {"#o": "owner"}
        update = "SET held_until = :zero"
        if cursors is not None:
            update += ", #c = :c, trail = :t"
            values[":c"] = num(cursors[0])
            values[":t"] = num(cursors[1])
            names["#c"] = "cursor"
        try:
            self.update(SWEEP_WAKE, Sk(str(shard)), update=update, values=values, names=names,
                        condition="#o = :o")
        except ConditionFailed:
            return False
        return True

    def take_full_sweep(self, owner: str, now: float, every: float) -> bool:
        """Take the turn of a full sweep (every running run), due `every` seconds after
        the last one: one sweeper takes it, the others find the guard false."""
        return self.update_if(
            SWEEP_FULL, "SET #o = :o, last_full = :now",
            {":o": {"S": owner}, ":now": num(now), ":due": num(now - every)},
            "attribute_not_exists(last_full) OR last_full <= :due",
            names={"#o": "owner"},
        )
