"""Run rows: reading and the guarded writes that start, count down and finish a run
(listing runs: run_listing.py). Each write names the status it expects (`queued` or
`running`); a late or duplicate caller finds that guard false and gets ConditionFailed."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import carry, summed
from orchestrator.adapters.store.codec import history_entry, num, run_from_item, run_to_item
from orchestrator.adapters.store.run_search import RunSearch
from orchestrator.adapters.store.tables import (
    Item,
    history_clause,
    short_error,
    status_guard,
    status_set,
    with_requests,
)
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RUN_MOVES, Move, RunStatus
from orchestrator.engine.wakes import run_wake
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["RunRows"]

# The move that finishes a running run with each terminal status.
# A debounced burst takes triggers until its run's start has come (`:now`: the trigger's).
BURST_OPEN = "admit_at > :now"
_FINISH = {RunStatus.SUCCESS: "succeed", RunStatus.FAILED: "fail", RunStatus.KILLED: "kill"}


class RunRows(RunSearch):
    """Reads and conditional writes of the runs table (and its listing: RunListing; its
    search index: RunSearch, whose terms a creation and a finish write first)."""

    def _index_created(self, run: RunRecord) -> None:
        trigger = None if run.trigger is None else run.trigger.to_json()
        self.index_run(run.run_id, run.created_at, {"input": run.input, "trigger": trigger},
                       run.created_at + self.step_retention)

    def _index_ended(self, run_id: str, created_at: float | None, error: Any,
                     output: Any, expires_at: float) -> None:
        if created_at is not None:
            self.index_run(run_id, created_at, {"error": error, "output": output}, expires_at)

    def create_run(self, run: RunRecord) -> None:
        self._index_created(run)
        if run.wake_at is None:
            run = replace(run, wake_at=run_wake(run, self.wake))
        # The start's request counts so far ride on the row (adapters/metering.py).
        with carry(run.run_id, "dynamodb.PutItem") as counts, _translate(
                f"run {run.run_id}: create"):
            self.ddb.put_item(
                TableName=self.runs,
                Item=run_to_item(replace(run, requests=summed(run.requests, counts))),
                ConditionExpression="attribute_not_exists(run_id)",
            )
        self.tallies.run_started(run.workflow)

    def create_run_with(self, run: RunRecord, also: list[dict[str, Any]]) -> None:
        """Create the run row together with the writes `also` (items of other tables),
        in one transaction; ConditionFailed if any guard fails (nothing is written)."""
        self._index_created(run)
        if run.wake_at is None:
            run = replace(run, wake_at=run_wake(run, self.wake))
        with _translate(f"run {run.run_id}: create with {len(also)} more"):
            self.ddb.transact_write_items(TransactItems=[
                {"Put": {"TableName": self.runs, "Item": run_to_item(run),
                         "ConditionExpression": "attribute_not_exists(run_id)"}},
                *also])
        self.tallies.run_started(run.workflow)

    def index_input(self, run_id: str, input: Any, created_at: float | None = None) -> None:
        """A queued run's new input (a debounce's, or what a batch's event adds to it),
        indexed before the write that takes it. Its creation time is the terms' sort
        key: `created_at` if the caller read it, else read first (one read)."""
        if not self.search:
            return
        if created_at is None:
            with _translate(f"run {run_id}: its creation time"):
                item = self.ddb.get_item(TableName=self.runs, Key={"run_id": {"S": run_id}},
                                         ProjectionExpression="created_at",
                                         ConsistentRead=True).get("Item")
            if not item:
                return
            created_at = int(item["created_at"]["N"]) / 1000.0  # whole milliseconds (codec)
        self.index_run(run_id, created_at, {"input": input},
                       created_at + self.step_retention)

    def debounce(self, run_id: str, input: Any, admit_at: float, now: float) -> RunRecord:
        """A later trigger of a debounced burst: the queued run takes its input and
        starts no earlier than `admit_at`. ConditionFailed once the burst is over: the
        run has left the queue, or its start has come (it may still wait for a
        concurrency limit's place, and a trigger then begins a new burst)."""
        self.index_input(run_id, input)
        move = RUN_MOVES["debounce"]
        values: dict[str, Any] = {":in": {"S": dumps(input)}, ":at": num(admit_at),
                                  ":wk": num(admit_at + self.wake.settle), ":now": num(now)}
        return self._update_queued(
            run_id, move, "SET #in = :in, admit_at = :at, wake_at = :wk, updated_at = :now",
            values, {"#in": "input"}, also=BURST_OPEN,
        )

    def debounce_with(self, run_id: str, input: Any, admit_at: float, now: float,
                      also: list[dict[str, Any]]) -> None:
        """`debounce`, together with the writes `also` in one transaction (a trigger's
        record: adapters/store/bursts.py); ConditionFailed if the run has left the queue
        or a guard of `also` fails (nothing is written)."""
        self.index_input(run_id, input)
        move = RUN_MOVES["debounce"]
        values: dict[str, Any] = {":in": {"S": dumps(input)}, ":at": num(admit_at),
                                  ":wk": num(admit_at + self.wake.settle), ":now": num(now)}
        guard = f"{status_guard(move, values)} AND {BURST_OPEN}"
        with _translate(f"run {run_id}: {move.name} with {len(also)} more"):
            self.ddb.transact_write_items(TransactItems=[
                {"Update": {"TableName": self.runs, "Key": {"run_id": {"S": run_id}},
                            "UpdateExpression": "SET #in = :in, admit_at = :at,"
                                                " wake_at = :wk, updated_at = :now",
                            "ConditionExpression": guard,
                            "ExpressionAttributeNames": {"#s": "status", "#in": "input"},
                            "ExpressionAttributeValues": values}},
                *also])

    def get_run(self, run_id: str, now: float, *, consistent: bool = True) -> RunRecord | None:
        with _translate(f"run {run_id}: read"):
            resp = self.ddb.get_item(
                TableName=self.runs, Key={"run_id": {"S": run_id}}, ConsistentRead=consistent
            )
        item = resp.get("Item")
        if not item:
            return None
        run = run_from_item(item)
        # DynamoDB deletes expired rows lazily: an expired row is gone as far as we care.
        if run.expires_at is not None and run.expires_at <= now:
            return None
        return run

    def run_flags(self, run_id: str, now: float) -> tuple[bool, float, str | None] | None:
        """(whether the run is cancelled, halted or halting; when it was created; its
        version), read now (strongly consistent): a step's start check. Its flags alone,
        not the definition and input a whole read decodes; its creation time tells it
        from an earlier run of the same id; a migration moves its version. None if the
        run is gone (or expired)."""
        with _translate(f"run {run_id}: read its stop flags"):
            resp = self.ddb.get_item(
                TableName=self.runs, Key={"run_id": {"S": run_id}}, ConsistentRead=True,
                ProjectionExpression="kill_requested, halted, stop_at, expires_at, created_at,"
                                     " version",
            )
        item = resp.get("Item")
        if item is None:
            return None
        expires = item.get("expires_at")
        if expires is not None and float(expires["N"]) <= now:
            return None
        stopping = "stop_at" in item or any(
            item.get(k, {}).get("BOOL", False) for k in ("kill_requested", "halted"))
        # Stored in integer milliseconds (it is a listing index's sort key), as the
        # codec decodes it.
        return (stopping, int(item.get("created_at", {}).get("N", "0")) / 1000.0,
                item.get("version", {}).get("S"))

    def _update_running(
        self,
        run_id: str,
        move: Move,
        update: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
        returns: str = "NONE",
        also: str = "",
        mine: Item | None = None,
    ) -> Item:
        """One UpdateItem on a run row, guarded by its move's statuses (and `also`):
        raises ConditionFailed once the run is in another state, unless what the guard
        found is this write's own effect (`mine`: see tables.landed)."""
        values = dict(values)
        guard = status_guard(move, values)
        extra = {} if mine is None else {"ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        names = {"#s": "status", **(names or {})}
        # Every write of a run's row carries the run's request counts made in this
        # process since its last write (adapters/metering.py).
        with carry(run_id, "dynamodb.UpdateItem") as counts:
            update = with_requests(update, counts, names, values)
            try:
                with _translate(f"run {run_id}: {move.name}"):
                    resp = self.ddb.update_item(
                        TableName=self.runs,
                        Key={"run_id": {"S": run_id}},
                        UpdateExpression=update,
                        ConditionExpression=guard + (f" AND {also}" if also else ""),
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=values,
                        ReturnValues=returns,
                        **extra,
                    )
            except ConditionFailed as exc:
                if mine is None:
                    raise
                return self.landed(exc, move, mine, self.runs, {"run_id": {"S": run_id}})
        attrs: Item = resp.get("Attributes", {})
        return attrs

    def decrement_remaining(self, run_id: str, by: int, now: float) -> int | None:
        """Count `by` steps as terminal. Returns the new count, or None when the run is
        no longer running. The count is a hint that triggers the (verified) finish."""
        try:
            attrs = self._update_running(
                run_id, RUN_MOVES["count"], "ADD remaining :d SET updated_at = :now",
                {":d": {"N": str(-by)}, ":now": num(now)}, returns="UPDATED_NEW",
            )
        except ConditionFailed:
            return None
        return int(attrs["remaining"]["N"])

    def mark_halted(self, run_id: str, error: dict[str, Any], now: float, *,
                    created_at: float | None = None) -> None:
        """Flag the run halted (once: a second halter gets ConditionFailed). Written after
        the stop pass, so no step starts after this entry in the run's history. With
        `created_at` (the run's), its error is indexed first (run_search.py)."""
        self._index_ended(run_id, created_at, error, None, now + self.step_retention)
        values = {":t": {"BOOL": True}, ":err": {"S": dumps(error)}, ":now": num(now)}
        hist = history_clause(values, now, "run.halted", error=short_error(error))
        self._update_running(
            run_id, RUN_MOVES["halt"],
            f"SET halted = :t, #e = if_not_exists(#e, :err), updated_at = :now, {hist}",
            values, names={"#e": "error", "#h": "history"}, also="halted <> :t",
        )

    def pause_run(self, run_id: str, error: dict[str, Any], now: float) -> None:
        """Flag a durable run paused (a replay mismatch), with what was found."""
        values = {":p": {"S": dumps(error)}, ":now": num(now)}
        hist = history_clause(values, now, "run.paused", error=short_error(error))
        try:
            self._update_running(run_id, RUN_MOVES["pause"],
                                 f"SET paused = :p, updated_at = :now, {hist}", values,
                                 names={"#h": "history"})
        except ConditionFailed:
            pass  # it ended or stopped meanwhile

    def unpause_run(self, run_id: str, now: float, **detail: Any) -> bool:
        """Clear a run's pause (resume, reset). False if it is not paused."""
        values = {":now": num(now)}
        hist = history_clause(values, now, "run.resumed", **detail)
        try:
            self._update_running(run_id, RUN_MOVES["pause"],
                                 f"SET updated_at = :now, {hist} REMOVE paused", values,
                                 names={"#h": "history"}, also="attribute_exists(paused)")
        except ConditionFailed:
            return False
        return True

    def note_run(self, run_id: str, now: float, event: str, **detail: Any) -> bool:
        """Add an event to a running run's history (an operator's reset of a run that
        was not paused). False if the run is not running."""
        values = {":now": num(now)}
        hist = history_clause(values, now, event, **detail)
        try:
            self._update_running(run_id, RUN_MOVES["note"], f"SET updated_at = :now, {hist}",
                                 values, names={"#h": "history"})
        except ConditionFailed:
            return False
        return True

    def request_kill(self, run_id: str, reason: str, now: float) -> RunRecord:
        values = {":t": {"BOOL": True}, ":r": {"S": reason}, ":now": num(now),
                  ":wk": num(now + self.wake.settle)}
        hist = history_clause(values, now, "run.cancel_requested", reason=reason[:300])
        attrs = self._update_running(
            run_id, RUN_MOVES["request-kill"],
            # The first reason stands: a second cancel is recorded in history only.
            # The run's stop instant is this write's (the first cancel's, or a halt's
            # before it): no step whose start check follows it is called.
            f"SET kill_requested = :t, kill_reason = if_not_exists(kill_reason, :r),"
            f" stop_at = if_not_exists(stop_at, :now), updated_at = :now, wake_at = :wk,"
            f" {hist}",
            values, names={"#h": "history"}, returns="ALL_NEW",
        )
        return run_from_item(attrs)

    def _update_queued(
        self, run_id: str, move: Move, update: str, values: dict[str, Any],
        names: dict[str, str], *, also: str = "",
    ) -> RunRecord:
        """A queued run's move (admit, refuse, cancel): the row after it."""
        return run_from_item(self._update_running(run_id, move, update, values, names=names,
                                                  returns="ALL_NEW", also=also))

    def admit_run(self, run_id: str, now: float, detail: dict[str, Any]) -> RunRecord:
        """queued -> running: exactly one caller wins (ConditionFailed for the others)."""
        move = RUN_MOVES["admit"]
        values: dict[str, Any] = {":now": num(now), ":wk": num(now + self.wake.settle)}
        hist = history_clause(values, now, "run.started", **detail)
        return self._update_queued(
            run_id, move,
            f"SET {status_set(move, values)}, started_at = :now, updated_at = :now,"
            f" wake_at = :wk, {hist}",
            values, {"#h": "history"},
        )

    def finish_queued(
        self, run_id: str, status: RunStatus, error: dict[str, Any], now: float,
        expires_at: float, *, kill_reason: str | None = None, created_at: float | None = None,
    ) -> RunRecord:
        """queued -> skipped or killed: a run that never started. A cancel keeps its
        reason as `kill_reason` and in history, as it does for a running run. With
        `created_at` (the run's), its error is indexed first (run_search.py)."""
        self._index_ended(run_id, created_at, error, None, expires_at)
        move = RUN_MOVES["skip-queued" if status is RunStatus.SKIPPED else "kill-queued"]
        values: dict[str, Any] = {
            ":err": {"S": dumps(error)}, ":now": num(now), ":exp": num(expires_at),
        }
        sets = ""
        if kill_reason is not None:
            values[":r"] = {"S": kill_reason}
            values[":t"] = {"BOOL": True}
            sets = " kill_requested = :t, kill_reason = :r,"
        hist = history_clause(
            values, now, f"run.{status.value}", error=short_error(error),
            reason=None if kill_reason is None else kill_reason[:300],
        )
        done = self._update_queued(
            run_id, move,
            f"SET {status_set(move, values)}, #e = :err,{sets} finished_at = :now,"
            f" updated_at = :now, expires_at = :exp, wake_at = :now, {hist} REMOVE active",
            values, {"#e": "error", "#h": "history"},
        )
        self.tallies.run_finished(done.workflow, status.value)
        return done

    def set_admit_at(self, run_id: str, at: float) -> None:
        """Record a queued run's throttle slot."""
        values: dict[str, Any] = {":at": num(at), ":wk": num(at + self.wake.settle)}
        guard = status_guard(RUN_MOVES["throttle-slot"], values)
        with _translate(f"run {run_id}: throttle slot"):
            self.ddb.update_item(
                TableName=self.runs,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET admit_at = :at, wake_at = :wk",
                ConditionExpression=f"{guard} AND attribute_not_exists(admit_at)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=values,
            )

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: float,
        expires_at: float,
        *,
        halted: bool = False,
        unstopped: bool = False,
        wake: bool = True,
        created_at: float | None = None,
        output: Any = None,
        workflow: str = "",
    ) -> None:
        """Finish a running run. `halted`: record its halt too, first (a failed step's
        halt that had not been recorded when the last step in flight landed), only if
        no halt is recorded: ConditionFailed if one was meanwhile. `unstopped`: only if
        neither a cancel nor a halt is recorded, nor a stop instant (ConditionFailed
        otherwise). `wake`: move its wake to now, for the sweeper to check its
        follow-ups (RunRecord.follow_ups); without any, its wake stays where it is (the
        sweeper finds it finished there, with nothing to do), which spares the wake
        index two writes. With `created_at` (the run's), its error and `output` (what it
        returned) are indexed first (run_search.py). `workflow`: the run's, for the
        stack's count of finished runs (adapters/tallies.py)."""
        self._index_ended(run_id, created_at, error, output, expires_at)
        move = RUN_MOVES[_FINISH[status]]
        # `finished_by` names this write apart from a rival finisher's in the same
        # millisecond, so only its own landed copy is taken for its own (tables.landed).
        values: dict[str, Any] = {":now": num(now), ":exp": num(expires_at),
                                  ":by": {"S": uuid.uuid4().hex[:12]}}
        short = None if error is None else short_error(error)
        hist = history_clause(values, now, f"run.{status.value}", error=short)
        update = (
            f"SET {status_set(move, values)}, finished_at = :now, updated_at = :now,"
            f" expires_at = :exp,{' wake_at = :now,' if wake else ''} finished_by = :by,"
            f" {hist}"
        )
        if halted:
            values[":h"]["L"].insert(0, history_entry(now, "run.halted", error=short))
            values[":t"] = {"BOOL": True}
            update += ", halted = :t"
        names: dict[str, str] = {"#h": "history"}
        if error is not None:
            # A halt's error stands (it names the step that failed first), but a cancel
            # is what ended a killed run, whatever failed meanwhile.
            keep = status is not RunStatus.KILLED
            update += ", #e = if_not_exists(#e, :err)" if keep else ", #e = :err"
            values[":err"] = {"S": dumps(error)}
            names["#e"] = "error"
        also = "halted <> :t" if halted else ""
        if unstopped:
            values[":t"] = {"BOOL": True}
            also = "kill_requested <> :t AND halted <> :t AND attribute_not_exists(stop_at)"
        self._update_running(run_id, move, update + " REMOVE active", values, names=names,
                             also=also,
                             mine={"finished_at": values[":now"], "finished_by": values[":by"]})
        self.tallies.run_finished(workflow, status.value)

    def arm_run(self, run_id: str, at: float, now: float) -> bool:
        """Wake a running run at `at`, unless it already wakes between now and then."""
        values: dict[str, Any] = {":at": num(at), ":now": num(now)}
        guard = status_guard(RUN_MOVES["count"], values)
        try:
            with _translate(f"run {run_id}: wake"):
                self.ddb.update_item(
                    TableName=self.runs,
                    Key={"run_id": {"S": run_id}},
                    UpdateExpression="SET wake_at = :at",
                    ConditionExpression=f"{guard} AND (attribute_not_exists(wake_at)"
                    " OR wake_at <= :now OR wake_at > :at)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues=values,
                )
        except ConditionFailed:
            return False
        return True

    def get_runs(self, run_ids: list[str], now: float) -> dict[str, RunRecord]:
        """Several runs (consistent reads, 100 per request); missing or expired ones are
        left out."""
        found: dict[str, RunRecord] = {}
        for i in range(0, len(run_ids), 100):
            request: dict[str, Any] = {self.runs: {
                "Keys": [{"run_id": {"S": r}} for r in run_ids[i : i + 100]],
                "ConsistentRead": True,
            }}
            for _ in self.batch_rounds():
                with _translate("read runs"):
                    resp = self.ddb.batch_get_item(RequestItems=request)
                for item in resp.get("Responses", {}).get(self.runs, []):
                    run = run_from_item(item)
                    if run.expires_at is None or run.expires_at > now:
                        found[run.run_id] = run
                request = resp.get("UnprocessedKeys") or {}
                if not request:
                    break
        return found

    def any_active(self) -> bool:
        """Whether any run is in flight (queued or running): one read of the sparse
        `active` index, at most one key."""
        with _translate("active runs"):
            resp = self.ddb.query(
                TableName=self.runs, IndexName="active", Limit=1,
                KeyConditionExpression="active = :one",
                ExpressionAttributeValues={":one": {"S": "1"}},
            )
        return bool(resp.get("Items"))

    def open_runs(self, workflow: str, now: float) -> list[RunRecord]:
        """The runs of `workflow` in flight (queued or running), oldest first: the
        `active` index's keys (every run in flight, keys only), their workflow and
        status read projected (the listing's read), then the workflow's runs whole. It
        reads the runs in flight, not the workflow's retained history."""
        shown = self._shown(self.active_run_ids())
        mine = [run_id for run_id, item in shown.items()
                if item.get("workflow", {}).get("S") == workflow]
        runs = [r for r in self.get_runs(mine, now).values() if not r.status.terminal]
        return sorted(runs, key=lambda r: (r.created_at, r.run_id))

    def active_run_ids(self) -> list[str]:
        ids: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self.runs,
            "IndexName": "active",
            "KeyConditionExpression": "active = :one",
            "ExpressionAttributeValues": {":one": {"S": "1"}},
        }
        while True:
            with _translate("active runs"):
                resp = self.ddb.query(**kwargs)
            ids.extend(i["run_id"]["S"] for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return ids
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
