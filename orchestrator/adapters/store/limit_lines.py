"""Concurrency limits of N in the control table (services/admission/concurrency.py).

- A limit's holders: `lock#<group>#<key>` holds the ids of the runs it admitted in a
  string set, `holders`, added to under `size(holders) < limit` (a run already in it
  adds nothing), so a take is one conditional write and taking again is a no-op. A run
  with several limits takes them all in one transaction. An item an earlier version
  wrote holds one run in `holder`; a take waits until that run lets it go.
- Its waiting runs: one partition per turns key (`queue#...`), sorted by place, each
  item holding the run's gate (its limits), so admission reads no run row to take them.
- Its turns: `turns#<line>` holds each waiting turns key's round and the place of its
  first waiting run (`k#<key>`: `round`, `best`), and the keys in turn order
  (`r#<round>#<key>`, with `best` too), which admission reads first."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import (
    ROUNDS_FROM,
    Pk,
    Sk,
    holder_key,
    queue_key,
    round_sk,
    sk_of,
    turn_sk,
    turns_key,
)
from orchestrator.adapters.store.control_table import ControlTable
from orchestrator.errors import ConditionFailed

__all__ = ["Holders", "LimitLines", "Turn", "Waiting"]

_ROOM = "(attribute_not_exists(holders) OR size(holders) < :n OR contains(holders, :me))" \
        " AND attribute_not_exists(holder)"
# A take for a run nobody holds it for yet: one another process took for it fails.
_FRESH = "(attribute_not_exists(holders) OR size(holders) < :n)" \
         " AND NOT contains(holders, :me) AND attribute_not_exists(holder)"
# The best place of a key whose first waiting run is not known: after every place.
LAST = Sk("~")


@dataclass(frozen=True)
class Holders:
    """The runs holding a limit; `legacy` is one an earlier version's lock names."""

    runs: frozenset[str]
    legacy: str | None = None

    def all(self) -> list[str]:
        return sorted(self.runs | ({self.legacy} if self.legacy else set()))

    def count(self) -> int:
        return len(self.all())


@dataclass(frozen=True)
class Turn:
    """A turns key with runs waiting: its round, and the place of its first run."""

    round: int
    turns: str
    best: Sk = LAST


@dataclass(frozen=True)
class Waiting:
    """A run waiting for a limit: its id, its place, and its gate as JSON."""

    run_id: str
    place: Sk
    gate: str


class LimitLines(ControlTable):
    """Holders, waiting runs and turns of concurrency limits."""

    # ---- holders ------------------------------------------------------------------------

    def holders(self, line_id: str, now: float) -> Holders:
        item = self.get(holder_key(line_id), now=now) or {}
        legacy = item.get("holder", {}).get("S")
        return Holders(frozenset(item.get("holders", {}).get("SS", ())), legacy)

    def take_limits(self, limits: list[tuple[str, int]], run_id: str, *,
                    fresh: bool = False) -> list[str]:
        """Add `run_id` to the holders of every (line, limit) if each has room (`[]`),
        or to none: the lines that had no room. Taking again is a no-op that holds,
        unless `fresh`: then it fails (another process took them for the run)."""
        def update(line_id: str, limit: int) -> dict[str, Any]:
            return {"TableName": self.table, "Key": self.key(holder_key(line_id)),
                    "UpdateExpression": "ADD holders :r",
                    "ConditionExpression": _FRESH if fresh else _ROOM,
                    "ExpressionAttributeValues": {":r": {"SS": [run_id]}, ":n": num(limit),
                                                  ":me": {"S": run_id}}}

        try:
            if len(limits) == 1:
                with _translate(f"limit {limits[0][0]}: take for {run_id}"):
                    self.ddb.update_item(**update(*limits[0]))
            else:
                with _translate(f"limits of {run_id}: take"):
                    self.ddb.transact_write_items(
                        TransactItems=[{"Update": update(*lim)} for lim in limits])
        except ConditionFailed as exc:
            if fresh and len(limits) == 1 and \
                    run_id in self.holders(limits[0][0], time.time()).runs:
                # Its first send landed and botocore sent it again (the answer timed
                # out): the run holds the limit, as another process's take for it
                # would also leave it; starting it is guarded either way. A
                # transaction's resend carries its first send's token: it holds.
                return []
            return _refused([line for line, _ in limits], exc)
        return []

    def let_go_of(self, line_id: str, run_ids: list[str]) -> tuple[bool, Holders]:
        """Remove runs from a limit's holders (absent ones: a no-op), and an earlier
        version's lock they name: whether any held it, and the holders left."""
        pk = holder_key(line_id)
        gone = set(run_ids)
        request = self._request(pk, Sk("-"), None, {":r": {"SS": sorted(gone)}}, None,
                                UpdateExpression="DELETE holders :r", ReturnValues="ALL_OLD")
        with _translate(f"control {pk}: let go"):
            attrs = self.ddb.update_item(**request).get("Attributes", {})
        before = frozenset(attrs.get("holders", {}).get("SS", ()))
        legacy = attrs.get("holder", {}).get("S")
        freed = bool(before & gone)
        if legacy in gone:
            freed = self.update_if(pk, "REMOVE holder", {":me": {"S": legacy}},
                                   "holder = :me") or freed
            legacy = None
        return freed, Holders(before - gone, legacy)

    # ---- waiting runs -------------------------------------------------------------------

    def wait_for_limit(self, line_id: str, turns: str, place: Sk, run_id: str,
                       gate: str) -> None:
        """Queue a run for a limit at its place (again: a no-op)."""
        with _translate(f"limit {line_id}: queue {run_id}"):
            self.ddb.put_item(TableName=self.table, Item={
                **self.key(queue_key(line_id, turns), place), "run_id": {"S": run_id},
                "gate": {"S": gate}})

    def stop_waiting(self, line_id: str, turns: str, place: Sk) -> None:
        self.delete(queue_key(line_id, turns), place)

    def first_waiting(self, line_id: str, turns: str, now: float,
                      limit: int) -> list[Waiting]:
        """The first runs waiting for a limit with this turns key, by place."""
        return [Waiting(str(i["run_id"]["S"]), sk_of(i), str(i.get("gate", {}).get("S", "{}")))
                for i in self.query(queue_key(line_id, turns), now=now, limit=limit)]

    # ---- turns --------------------------------------------------------------------------

    def turn_of(self, line_id: str, turns: str, now: float) -> Turn | None:
        item = self.get(turns_key(line_id), turn_sk(turns), now=now)
        return None if item is None else _turn(item, turns)

    def next_turns(self, line_id: str, now: float, limit: int,
                   after: Sk | None = None) -> list[Turn]:
        """Turns keys in turn order (lowest round first), from `after`."""
        out = []
        for item in self.query(turns_key(line_id), now=now, limit=limit,
                               after=after or ROUNDS_FROM):
            _, rnd, turns = str(item["sk"]["S"]).split("#", 2)
            out.append(Turn(int(rnd), turns, Sk(str(item.get("best", {}).get("S", LAST)))))
        return out

    def join_turns(self, line_id: str, turns: str, place: Sk, now: float, *,
                   repair: bool = False) -> Turn:
        """A run of `turns` waits at `place`: the key joins the turns at the current
        (lowest) round unless it is in them; its best place is kept. With `repair`, its
        index entry is written again, which mends one a crash or a race left out."""
        pk = turns_key(line_id)
        held = self.turn_of(line_id, turns, now)
        if held is None:
            first = self.next_turns(line_id, now, 1)
            round_ = first[0].round if first else 0
            if not self.put_new(pk, turn_sk(turns), now=now,
                                attrs={"round": num(round_), "best": {"S": place}}):
                return self.join_turns(line_id, turns, place, now, repair=repair)
            held = Turn(round_, turns, place)
            self._index(pk, held.round, turns, held.best)
            return held
        else:
            if place < held.best:
                better = self._better(pk, turns, held, place)
                if better is None:
                    return held  # its turn moved meanwhile: its index is the mover's
                held = better
            elif not repair:
                return held
        self._index(pk, held.round, turns, held.best)
        return held

    def _better(self, pk: Pk, turns: str, held: Turn, place: Sk) -> Turn | None:
        """A run waiting at a better place than the key's best: it is the best now
        (None: the key's turn moved meanwhile; its next admission reads afresh)."""
        try:
            self.update(pk, turn_sk(turns), update="SET best = :p", names={"#r": "round"},
                        condition="#r = :r AND best > :p",
                        values={":p": {"S": place}, ":r": num(held.round)})
        except ConditionFailed:
            return None
        return Turn(held.round, turns, place)

    def advance_turns(self, line_id: str, turn: Turn, best: Sk) -> bool:
        """The key had its turn: its round goes up one and its best place is `best`
        (False: it had moved already)."""
        pk = turns_key(line_id)
        try:
            self.update(pk, turn_sk(turn.turns), update="SET #r = :next, best = :b",
                        names={"#r": "round"}, condition="#r = :r",
                        values={":r": num(turn.round), ":next": num(turn.round + 1),
                                ":b": {"S": best}})
        except ConditionFailed:
            self.delete(pk, round_sk(turn.round, turn.turns))  # a stale index entry
            return False
        self._index(pk, turn.round + 1, turn.turns, best)
        self.delete(pk, round_sk(turn.round, turn.turns))
        return True

    def leave_turns(self, line_id: str, turn: Turn) -> None:
        """The key has no run waiting: it leaves the turns (a run that arrives
        meanwhile rejoins when it or the sweeper comes back to it)."""
        pk = turns_key(line_id)
        self.delete(pk, turn_sk(turn.turns), condition="#r = :r", names={"#r": "round"},
                    values={":r": num(turn.round)})
        self.delete(pk, round_sk(turn.round, turn.turns))

    def _index(self, pk: Pk, round_: int, turns: str, best: Sk) -> None:
        with _translate(f"control {pk}: index"):
            self.ddb.put_item(TableName=self.table, Item={
                **self.key(pk, round_sk(round_, turns)), "best": {"S": best}})


def _refused(lines: list[str], exc: ConditionFailed) -> list[str]:
    """The lines whose guard failed, from the transaction's cancellation reasons (its
    ClientError is the cause `translate_errors` chains); all of them when unknown."""
    reasons = getattr(exc.__cause__, "response", {}).get("CancellationReasons") or []
    failed = [line for line, r in zip(lines, reasons, strict=False)
              if r.get("Code") == "ConditionalCheckFailed"]
    return failed or lines


def _turn(item: dict[str, Any], turns: str) -> Turn:
    return Turn(int(item["round"]["N"]), turns, Sk(str(item.get("best", {}).get("S", LAST))))
