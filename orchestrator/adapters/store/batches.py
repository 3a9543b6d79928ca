"""A batched workflow's batches (services/admission/batch.py): the control items, kept
as a debounced burst's are (bursts.py), and the guarded writes of the batch's queued run.

- the open batch of one key (`batch#<wf>#<key>`): the queued run the batch will start,
  and when its first event came; written with the run's creation in one transaction;
- the events a batch has taken, by their trigger id (`batched#<wf>#<id>`): each written
  with the event's own write in one transaction, so an event delivered twice joins once;
- on the run row, `batched`: how many events its input holds (absent: one, as created).
  Every join names the count it read, so two events racing for a batch's last place
  make one join each, in turn, or one join and one new batch."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.bursts import Bursts
from orchestrator.adapters.store.codec import num, run_from_item
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Pk
from orchestrator.adapters.store.run_rows import RunRows
from orchestrator.adapters.store.tables import status_guard
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RUN_MOVES
from orchestrator.strict_json import dumps

__all__ = ["BatchRows", "batch_key", "member_key"]


def batch_key(workflow: str, key: str) -> Pk:
    """A batched workflow's open batch for one key: the run the batch will start."""
    return Pk(f"batch#{workflow}#{key}")


def member_key(workflow: str, trigger_id: str) -> Pk:
    """An event a batch of `workflow` took: the run it joined."""
    return Pk(f"batched#{workflow}#{trigger_id}")


class BatchRows(Bursts):
    """The open batch and the events taken are a burst's items under their own keys
    (`open`/`begin`/`taken`/`take`, from Bursts); the run's writes are here."""

    def __init__(self, runs: RunRows, control: Control) -> None:
        super().__init__(control)
        self.rows = runs

    def open(self, pk: Pk, now: float) -> tuple[str, float] | None:
        """The open batch: (its queued run, when its first event came), or None."""
        return self.burst(pk, now)

    def run(self, run_id: str, now: float) -> tuple[RunRecord, int] | None:
        """A batch's run and how many events it holds (strongly consistent); None if
        it is gone or expired."""
        with _translate(f"run {run_id}: read its batch"):
            resp = self.rows.ddb.get_item(TableName=self.rows.runs,
                                          Key={"run_id": {"S": run_id}}, ConsistentRead=True)
        item = resp.get("Item")
        if not item:
            return None
        run = run_from_item(item)
        if run.expires_at is not None and run.expires_at <= now:
            return None
        count = item.get("batched")
        return run, 1 if count is None else int(count["N"])

    def join(self, run_id: str, input: Any, count: int, now: float, *, full: bool,
             also: list[dict[str, Any]], added: Any = None,
             created_at: float | None = None) -> None:
        """Write the batch's input with one more event: guarded by the run being
        queued, its batch holding `count` events (as read) and its timeout not passed.
        `full`: this event fills the batch, which starts now (its start moves to now;
        the caller admits it, the sweeper if the caller dies). With `also` (an event's
        record) in one transaction. ConditionFailed if a guard fails: nothing is
        written to the run (a search checks the row: run_search.py).

        `added`: the input of the event alone (`{"events": [E]}`), whose terms are
        indexed first, as a debounce's are (the whole input's first MAX_TERMS would
        hold the first events' only), under the run's `created_at` (as read)."""
        if added is not None:
            self.rows.index_input(run_id, added, created_at)
        values: dict[str, Any] = {":in": {"S": dumps(input)}, ":n1": num(count + 1),
                                  ":now": num(now)}
        guard = status_guard(RUN_MOVES["batch"], values) + " AND admit_at > :now"
        if count == 1:
            guard += " AND attribute_not_exists(batched)"
        else:
            values[":n"] = num(count)
            guard += " AND batched = :n"
        update = "SET #in = :in, batched = :n1, updated_at = :now"
        if full:
            values[":wk"] = num(now + self.rows.wake.settle)
            update += ", admit_at = :now, wake_at = :wk"
        write = {"TableName": self.rows.runs, "Key": {"run_id": {"S": run_id}},
                 "UpdateExpression": update, "ConditionExpression": guard,
                 "ExpressionAttributeNames": {"#s": "status", "#in": "input"},
                 "ExpressionAttributeValues": values}
        with _translate(f"run {run_id}: batch with {len(also)} more"):
            if also:
                self.rows.ddb.transact_write_items(TransactItems=[{"Update": write}, *also])
            else:
                self.rows.ddb.update_item(**write)
