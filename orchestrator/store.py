"""DynamoDB rows: every read and every conditional write of run state lives here.

Each write names the state it expects (status, attempt, lease owner). A duplicate,
late or reordered message finds that guard false and the write raises ConditionFailed,
which callers treat as "already done by someone else". `ClientError` never leaves this
module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.aws import translate_errors as _translate
from orchestrator.errors import ConditionFailed, StoreError
from orchestrator.records import (
    RunRecord,
    StepRecord,
    dumps,
    history_entry,
    num,
    run_from_item,
    run_to_item,
    step_from_item,
    step_to_item,
)
from orchestrator.settings import ResourceNames
from orchestrator.states import RunStatus, StepStatus

__all__ = ["Lease", "Store"]

Item = dict[str, Any]


@dataclass(frozen=True)
class Lease:
    """A claim on one attempt. The row's own timeout is added to `base` in the write
    (`lease_until = timeout + base`), so a lease always outlives the HTTP call it covers."""

    owner: str
    base: float


STATE_PROJECTION = (
    "run_id, step, #s, backend, route, deps, dependants, attempt, max_attempts, #t,"
    " retry_strategy, retry_delay, retry_max_delay, lease_owner, lease_until, due_at,"
    " ready_at, started_at, finished_at, count_me"
)


def _names(lease: Lease | None) -> dict[str, str]:
    names = {"#s": "status", "#h": "history"}
    if lease is not None:
        names["#t"] = "timeout"
    return names


HISTORY = "#h = list_append(if_not_exists(#h, :nil), :h)"


def _history(values: dict[str, Any], at: float, kind: str, **fields: Any) -> str:
    """The SET clause that appends one history entry (names need `#h`)."""
    values[":nil"] = {"L": []}
    values[":h"] = {"L": [history_entry(at, kind, **fields)]}
    return HISTORY


def _short(error: dict[str, Any]) -> dict[str, Any]:
    """An error as kept in history: its code and the first 300 characters."""
    message = str(error.get("message") or error.get("reason") or "")
    return {"code": error.get("code"), "message": message[:300]}


def _key(run_id: str, step: str) -> Item:
    return {"run_id": {"S": run_id}, "step": {"S": step}}


class Store:
    def __init__(self, dynamodb: Any, names: ResourceNames) -> None:
        self.ddb = dynamodb
        self.runs = names.runs_table
        self.steps = names.steps_table

    def _guarded(self, what: str, **request: Any) -> Item | None:
        """One conditional UpdateItem on a step row: its attributes, or None when the
        guard did not hold (someone else already moved the row)."""
        try:
            with _translate(what):
                resp = self.ddb.update_item(TableName=self.steps, **request)
        except ConditionFailed:
            return None
        attrs: Item = resp.get("Attributes", {})
        return attrs

    # ---- runs ---------------------------------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        with _translate(f"run {run.run_id}: create"):
            self.ddb.put_item(
                TableName=self.runs,
                Item=run_to_item(run),
                ConditionExpression="attribute_not_exists(run_id)",
            )

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

    def _update_running(
        self,
        run_id: str,
        what: str,
        update: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
        returns: str = "NONE",
    ) -> Item:
        """One UpdateItem on a run row, guarded by `status = running` (raises
        ConditionFailed once the run has finished)."""
        with _translate(f"run {run_id}: {what}"):
            resp = self.ddb.update_item(
                TableName=self.runs,
                Key={"run_id": {"S": run_id}},
                UpdateExpression=update,
                ConditionExpression="#s = :running",
                ExpressionAttributeNames={"#s": "status", **(names or {})},
                ExpressionAttributeValues={
                    **values, ":running": {"S": RunStatus.RUNNING.value}
                },
                ReturnValues=returns,
            )
        attrs: Item = resp.get("Attributes", {})
        return attrs

    def decrement_remaining(self, run_id: str, by: int, now: float) -> int | None:
        """Count `by` steps as terminal. Returns the new count, or None when the run is
        no longer running. The count is a hint that triggers the (verified) finish."""
        try:
            attrs = self._update_running(
                run_id, "count", "ADD remaining :d SET updated_at = :now",
                {":d": {"N": str(-by)}, ":now": num(now)}, returns="UPDATED_NEW",
            )
        except ConditionFailed:
            return None
        return int(attrs["remaining"]["N"])

    def mark_halted(self, run_id: str, error: dict[str, Any], now: float) -> None:
        values = {":t": {"BOOL": True}, ":err": {"S": dumps(error)}, ":now": num(now)}
        hist = _history(values, now, "run.halted", error=_short(error))
        self._update_running(
            run_id, "halt",
            f"SET halted = :t, #e = if_not_exists(#e, :err), updated_at = :now, {hist}",
            values, names={"#e": "error", "#h": "history"},
        )

    def request_kill(self, run_id: str, reason: str, now: float) -> RunRecord:
        values = {":t": {"BOOL": True}, ":r": {"S": reason}, ":now": num(now)}
        hist = _history(values, now, "run.cancel_requested", reason=reason[:300])
        attrs = self._update_running(
            run_id, "kill",
            # The first reason stands: a second cancel is recorded in history only.
            f"SET kill_requested = :t, kill_reason = if_not_exists(kill_reason, :r),"
            f" updated_at = :now, {hist}",
            values, names={"#h": "history"}, returns="ALL_NEW",
        )
        return run_from_item(attrs)

    def _update_queued(
        self, run_id: str, what: str, update: str, values: dict[str, Any],
        names: dict[str, str],
    ) -> RunRecord:
        with _translate(f"run {run_id}: {what}"):
            resp = self.ddb.update_item(
                TableName=self.runs,
                Key={"run_id": {"S": run_id}},
                UpdateExpression=update,
                ConditionExpression="#s = :queued",
                ExpressionAttributeNames={"#s": "status", **names},
                ExpressionAttributeValues={**values, ":queued": {"S": RunStatus.QUEUED.value}},
                ReturnValues="ALL_NEW",
            )
        return run_from_item(resp["Attributes"])

    def admit_run(self, run_id: str, now: float, detail: dict[str, Any]) -> RunRecord:
        """queued -> running: exactly one caller wins (ConditionFailed for the others)."""
        values = {":run": {"S": RunStatus.RUNNING.value}, ":now": num(now)}
        hist = _history(values, now, "run.started", **detail)
        return self._update_queued(
            run_id, "admit",
            f"SET #s = :run, started_at = :now, updated_at = :now, {hist}",
            values, {"#h": "history"},
        )

    def finish_queued(
        self, run_id: str, status: RunStatus, error: dict[str, Any], now: float,
        expires_at: float,
    ) -> RunRecord:
        """queued -> skipped or killed: a run that never started."""
        values = {
            ":st": {"S": status.value}, ":err": {"S": dumps(error)}, ":now": num(now),
            ":exp": num(expires_at),
        }
        hist = _history(values, now, f"run.{status.value}", error=_short(error))
        return self._update_queued(
            run_id, "finish before start",
            "SET #s = :st, #e = :err, finished_at = :now, updated_at = :now,"
            f" expires_at = :exp, {hist} REMOVE active",
            values, {"#e": "error", "#h": "history"},
        )

    def set_admit_at(self, run_id: str, at: float) -> None:
        """Record a queued run's throttle slot."""
        with _translate(f"run {run_id}: throttle slot"):
            self.ddb.update_item(
                TableName=self.runs,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET admit_at = :at",
                ConditionExpression="#s = :queued AND attribute_not_exists(admit_at)",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={
                    ":at": num(at), ":queued": {"S": RunStatus.QUEUED.value},
                },
            )

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        error: dict[str, Any] | None,
        now: float,
        expires_at: float,
    ) -> None:
        values: dict[str, Any] = {
            ":st": {"S": status.value},
            ":now": num(now),
            ":exp": num(expires_at),
        }
        hist = _history(
            values, now, f"run.{status.value}", error=None if error is None else _short(error)
        )
        update = (
            f"SET #s = :st, finished_at = :now, updated_at = :now, expires_at = :exp, {hist}"
        )
        names: dict[str, str] = {"#h": "history"}
        if error is not None:
            update += ", #e = if_not_exists(#e, :err)"
            values[":err"] = {"S": dumps(error)}
            names["#e"] = "error"
        self._update_running(run_id, "finish", update + " REMOVE active", values, names=names)

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

    def list_runs(
        self,
        workflow: str | None,
        now: float,
        *,
        status: str | None = None,
        limit: int = 20,
        start: Item | None = None,
    ) -> tuple[list[RunRecord], Item | None]:
        """Runs newest first (of one workflow, or all), optionally of one status.

        A status filter is applied after the read, so a page may hold fewer than `limit`
        runs while the cursor still leads on; reading continues until the page is full."""
        values: dict[str, Any] = {}
        if workflow is None:
            index, cond = "recent", "listed = :w"
            values[":w"] = {"S": "runs"}
        else:
            index, cond = "by-workflow", "workflow = :w"
            values[":w"] = {"S": workflow}
        kwargs: dict[str, Any] = {
            "TableName": self.runs,
            "IndexName": index,
            "KeyConditionExpression": cond,
            "ScanIndexForward": False,
            "Limit": limit,
            # Only what a listing shows: the definition and input can be large.
            "ProjectionExpression": "run_id, workflow, #s, created_at, finished_at, expires_at,"
            " started_at, #t, rerun_of",
            "ExpressionAttributeNames": {"#s": "status", "#t": "trigger"},
        }
        if status is not None:
            kwargs["FilterExpression"] = "#s = :st"
            values[":st"] = {"S": status}
        kwargs["ExpressionAttributeValues"] = values
        if start:
            kwargs["ExclusiveStartKey"] = start
        runs: list[RunRecord] = []
        last: Item | None = None
        for _ in range(20):  # bounded: a rare status may need several reads per page
            with _translate(f"runs of {workflow or 'all workflows'}"):
                resp = self.ddb.query(**kwargs)
            for item in resp.get("Items", []):
                run = run_from_item(item)
                if run.expires_at is None or run.expires_at > now:
                    runs.append(run)
            last = resp.get("LastEvaluatedKey")
            if last is None or len(runs) >= limit:
                break
            kwargs["ExclusiveStartKey"] = last
            kwargs["Limit"] = limit - len(runs)
        return runs, last

    # ---- steps --------------------------------------------------------------------

    def put_steps(self, rows: Sequence[StepRecord]) -> None:
        """Write whole rows (new runs, and the expiry stamp of a finished run)."""
        items = [{"PutRequest": {"Item": step_to_item(r)}} for r in rows]
        for i in range(0, len(items), 25):
            pending: dict[str, Any] = {self.steps: items[i : i + 25]}
            for _ in range(10):
                with _translate("write steps"):
                    resp = self.ddb.batch_write_item(RequestItems=pending)
                pending = resp.get("UnprocessedItems") or {}
                if not pending:
                    break
            else:
                raise StoreError("write steps: DynamoDB kept items unprocessed")

    def create_step_if_absent(self, row: StepRecord) -> None:
        with _translate(f"step {row.run_id}/{row.step}: create"):
            self.ddb.put_item(
                TableName=self.steps,
                Item=step_to_item(row),
                ConditionExpression="attribute_not_exists(run_id)",
            )

    def get_step(self, run_id: str, step: str) -> StepRecord | None:
        with _translate(f"step {run_id}/{step}: read"):
            resp = self.ddb.get_item(
                TableName=self.steps, Key=_key(run_id, step), ConsistentRead=True
            )
        item = resp.get("Item")
        return step_from_item(item) if item else None

    def query_steps(self, run_id: str, *, states_only: bool = False) -> list[StepRecord]:
        """Every step row of a run. `states_only` leaves out payloads, outputs and
        errors: what a sweep decides on, at a fraction of the bytes."""
        rows: list[StepRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            "KeyConditionExpression": "run_id = :r",
            "ExpressionAttributeValues": {":r": {"S": run_id}},
            "ConsistentRead": True,
        }
        if states_only:
            kwargs["ProjectionExpression"] = STATE_PROJECTION
            kwargs["ExpressionAttributeNames"] = {"#s": "status", "#t": "timeout"}
        while True:
            with _translate(f"steps of {run_id}"):
                resp = self.ddb.query(**kwargs)
            rows.extend(step_from_item(i) for i in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return rows
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]

    def get_outputs(self, run_id: str, names: Sequence[str]) -> dict[str, StepRecord]:
        """The rows (output columns only) of the named steps, in as few requests as
        DynamoDB allows (100 keys per BatchGetItem)."""
        found: dict[str, StepRecord] = {}
        proj = "run_id, step, #s, #o, output_ref, output_size"
        for i in range(0, len(names), 100):
            keys = [_key(run_id, n) for n in names[i : i + 100]]
            request: dict[str, Any] = {
                self.steps: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": proj,
                    "ExpressionAttributeNames": {"#s": "status", "#o": "output"},
                }
            }
            for _ in range(10):
                with _translate(f"outputs of {run_id}"):
                    resp = self.ddb.batch_get_item(RequestItems=request)
                for item in resp.get("Responses", {}).get(self.steps, []):
                    row = step_from_item({"backend": {"S": ""}, "route": {"S": ""}, **item})
                    found[row.step] = row
                request = resp.get("UnprocessedKeys") or {}
                if not request:
                    break
        return found

    def claim(self, run_id: str, step: str, attempt: int, lease: Lease, now: float) -> StepRecord:
        """Take the lease on one attempt. Exactly one caller wins per attempt."""
        with _translate(f"step {run_id}/{step}: claim attempt {attempt}"):
            resp = self.ddb.update_item(
                TableName=self.steps,
                Key=_key(run_id, step),
                UpdateExpression=(
                    "SET #s = :disp, lease_owner = :o, lease_until = #t + :lu,"
                    " started_at = if_not_exists(started_at, :now), attempt_started = :now,"
                    f" {HISTORY} REMOVE due_at"
                ),
                ConditionExpression=(
                    "attempt = :n AND attribute_not_exists(lease_owner) AND #s IN (:ready, :disp)"
                ),
                ExpressionAttributeNames={"#s": "status", "#t": "timeout", "#h": "history"},
                ExpressionAttributeValues={
                    ":disp": {"S": StepStatus.DISPATCHED.value},
                    ":ready": {"S": StepStatus.READY.value},
                    ":o": {"S": lease.owner},
                    ":lu": num(lease.base),
                    ":now": num(now),
                    ":n": num(attempt),
                    ":nil": {"L": []},
                    ":h": {"L": [history_entry(now, "step.started", attempt=attempt)]},
                },
                ReturnValues="ALL_NEW",
            )
        return step_from_item(resp["Attributes"])

    def _promotion(self, lease: Lease | None, now: float) -> tuple[str, dict[str, Any]]:
        values: dict[str, Any] = {":one": num(1), ":now": num(now)}
        if lease is None:
            values[":st"] = {"S": StepStatus.READY.value}
            hist = _history(values, now, "step.ready")
            return f"SET #s = :st, attempt = :one, ready_at = :now, {hist}", values
        hist = _history(values, now, "step.ready")
        # Promoted and claimed in one write: both transitions, in order.
        values[":h"]["L"].append(history_entry(now, "step.started", attempt=1))
        values.update(
            {
                ":st": {"S": StepStatus.DISPATCHED.value},
                ":o": {"S": lease.owner},
                ":lu": num(lease.base),
            }
        )
        return (
            "SET #s = :st, attempt = :one, ready_at = :now, lease_owner = :o,"
            f" lease_until = #t + :lu, started_at = :now, attempt_started = :now, {hist}",
            values,
        )

    def satisfy(
        self, run_id: str, step: str, dep: str, ndeps: int, lease: Lease | None, now: float
    ) -> StepRecord | None:
        """Record that `dep` succeeded. Returns the row if this call promoted the step
        (blocked -> ready, or straight to dispatched under `lease`), else None.

        Adding `dep` to the `satisfied` set is idempotent, so a duplicated completion
        counts once; the promotion is a compare-and-swap, so exactly one caller wins."""
        key = _key(run_id, step)
        blocked = {"S": StepStatus.BLOCKED.value}
        if ndeps == 1:
            # The only dependency: the update that records it is the promotion itself.
            update, values = self._promotion(lease, now)
            values.update({":b": blocked, ":dep": {"SS": [dep]}})
            attrs = self._guarded(
                f"step {run_id}/{step}: promote",
                Key=key,
                UpdateExpression=update + " ADD satisfied :dep",
                ConditionExpression="#s = :b",
                ExpressionAttributeNames=_names(lease),
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
            return None if attrs is None else step_from_item(attrs)
        try:
            with _translate(f"step {run_id}/{step}: satisfy {dep}"):
                resp = self.ddb.update_item(
                    TableName=self.steps,
                    Key=key,
                    UpdateExpression="ADD satisfied :dep",
                    ConditionExpression="#s = :b AND NOT contains(satisfied, :d)",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={
                        ":b": blocked,
                        ":dep": {"SS": [dep]},
                        ":d": {"S": dep},
                    },
                    # A known in-degree needs only the set back, not the whole join row.
                    ReturnValues="UPDATED_NEW" if ndeps else "ALL_NEW",
                )
            attrs = resp["Attributes"]
            count = len(attrs["satisfied"]["SS"])
            if not ndeps:
                ndeps = len(step_from_item(attrs).deps)
        except ConditionFailed:
            # Already counted (a duplicate) or no longer blocked. A crash may have
            # fallen between the count and the promotion: try the promotion anyway.
            count = ndeps
        if count < ndeps:
            return None
        return self.promote(run_id, step, ndeps, lease, now)

    def promote(
        self,
        run_id: str,
        step: str,
        ndeps: int,
        lease: Lease | None,
        now: float,
        *,
        all_deps: Sequence[str] | None = None,
    ) -> StepRecord | None:
        """blocked -> ready (or dispatched under `lease`) once every dependency counted.

        The sweeper passes `all_deps` when it has seen every dependency succeed; the
        set is then completed in the same write."""
        update, values = self._promotion(lease, now)
        values[":b"] = {"S": StepStatus.BLOCKED.value}
        if all_deps is not None:
            cond = "#s = :b"
            update += ", satisfied = :all"
            values[":all"] = {"SS": list(all_deps)}
        else:
            cond = "#s = :b AND size(satisfied) = :nd"
            values[":nd"] = num(ndeps)
        attrs = self._guarded(
            f"step {run_id}/{step}: promote",
            Key=_key(run_id, step),
            UpdateExpression=update,
            ConditionExpression=cond,
            ExpressionAttributeNames=_names(lease),
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return None if attrs is None else step_from_item(attrs)

    def _finish_attempt(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        update: str,
        values: dict[str, Any],
        what: str,
        *,
        expired_before: float | None = None,
        names: dict[str, str] | None = None,
    ) -> StepRecord:
        cond = "#s = :disp AND attempt = :n AND lease_owner = :o"
        values = {
            **values,
            ":disp": {"S": StepStatus.DISPATCHED.value},
            ":n": num(attempt),
            ":o": {"S": owner},
        }
        if expired_before is not None:
            cond += " AND lease_until < :exp"
            values[":exp"] = num(expired_before)
        with _translate(f"step {run_id}/{step}: {what} (attempt {attempt})"):
            resp = self.ddb.update_item(
                TableName=self.steps,
                Key=_key(run_id, step),
                UpdateExpression=update,
                ConditionExpression=cond,
                ExpressionAttributeNames={"#s": "status", **(names or {})},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        return step_from_item(resp["Attributes"])

    def record_success(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        output_json: str | None,
        output_ref: str | None,
        size: int,
        now: float,
    ) -> StepRecord:
        values: dict[str, Any] = {
            ":ok": {"S": StepStatus.SUCCESS.value},
            ":now": num(now),
            ":size": num(size),
        }
        if output_ref is not None:
            sets = "output_ref = :ref"
            values[":ref"] = {"S": output_ref}
        else:
            sets = "#out = :out"
            values[":out"] = {"S": output_json or "null"}
        hist = _history(values, now, "step.succeeded", attempt=attempt, bytes=size)
        update = (
            f"SET #s = :ok, {sets}, output_size = :size, finished_at = :now, {hist}"
            " REMOVE lease_owner, lease_until, #err"
        )
        names = {"#err": "error", "#h": "history"}
        if output_ref is None:
            names["#out"] = "output"
        return self._finish_attempt(
            run_id, step, attempt, owner, update, values, "record success", names=names
        )

    def record_retry(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        next_attempt: int,
        due_at: float,
        error: dict[str, Any],
        now: float,
        expired_before: float | None = None,
    ) -> StepRecord:
        values = {":next": num(next_attempt), ":due": num(due_at), ":err": {"S": dumps(error)}}
        hist = _history(
            values, now, "step.retrying", attempt=attempt, due_at=round(due_at, 3),
            error=_short(error),
        )
        return self._finish_attempt(
            run_id,
            step,
            attempt,
            owner,
            f"SET attempt = :next, due_at = :due, ready_at = :due, #err = :err, {hist}"
            " REMOVE lease_owner, lease_until",
            values,
            "schedule retry",
            expired_before=expired_before,
            names={"#err": "error", "#h": "history"},
        )

    def record_failure(
        self,
        run_id: str,
        step: str,
        attempt: int,
        owner: str,
        *,
        error: dict[str, Any],
        now: float,
        expired_before: float | None = None,
    ) -> StepRecord:
        values = {
            ":failed": {"S": StepStatus.FAILED.value},
            ":err": {"S": dumps(error)},
            ":now": num(now),
        }
        hist = _history(values, now, "step.failed", attempt=attempt, error=_short(error))
        return self._finish_attempt(
            run_id,
            step,
            attempt,
            owner,
            f"SET #s = :failed, #err = :err, finished_at = :now, {hist}"
            " REMOVE lease_owner, lease_until",
            values,
            "record failure",
            expired_before=expired_before,
            names={"#err": "error", "#h": "history"},
        )

    def skip(
        self,
        run_id: str,
        step: str,
        statuses: Sequence[StepStatus],
        reason: str,
        now: float,
    ) -> StepRecord | None:
        """Mark a step that has not started (no lease) as skipped; None if it has."""
        values: dict[str, Any] = {
            ":sk": {"S": StepStatus.SKIPPED.value},
            ":why": {"S": dumps({"code": "skipped", "message": reason})},
            ":now": num(now),
        }
        placeholders = []
        for i, st in enumerate(statuses):
            values[f":f{i}"] = {"S": st.value}
            placeholders.append(f":f{i}")
        hist = _history(values, now, "step.skipped", reason=reason[:300])
        attrs = self._guarded(
            f"step {run_id}/{step}: skip",
            Key=_key(run_id, step),
            UpdateExpression=f"SET #s = :sk, #err = :why, finished_at = :now, {hist}"
            " REMOVE due_at",
            ConditionExpression=f"#s IN ({', '.join(placeholders)})"
            " AND attribute_not_exists(lease_owner)",
            ExpressionAttributeNames={"#s": "status", "#err": "error", "#h": "history"},
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        return None if attrs is None else step_from_item(attrs)

    def flag_counted(self, run_id: str, step: str) -> bool:
        """Mark a step still in flight so that its terminal transition counts (once)."""
        return self._guarded(
            f"step {run_id}/{step}: flag",
            Key=_key(run_id, step),
            UpdateExpression="SET count_me = :t",
            ConditionExpression="attribute_not_exists(count_me) AND #s IN (:b, :r, :d)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":t": {"BOOL": True},
                ":b": {"S": StepStatus.BLOCKED.value},
                ":r": {"S": StepStatus.READY.value},
                ":d": {"S": StepStatus.DISPATCHED.value},
            },
        ) is not None

    def touch_dispatch(self, run_id: str, step: str, attempt: int, now: float) -> bool:
        """Stamp a re-sent dispatch so the next sweep does not send it again at once."""
        values = {
            ":now": num(now),
            ":n": num(attempt),
            ":ready": {"S": StepStatus.READY.value},
            ":disp": {"S": StepStatus.DISPATCHED.value},
        }
        hist = _history(values, now, "step.redispatched", attempt=attempt)
        return self._guarded(
            f"step {run_id}/{step}: redispatch",
            Key=_key(run_id, step),
            UpdateExpression=f"SET ready_at = :now, {hist}",
            ConditionExpression="attempt = :n AND attribute_not_exists(lease_owner)"
            " AND #s IN (:ready, :disp)",
            ExpressionAttributeNames={"#s": "status", "#h": "history"},
            ExpressionAttributeValues=values,
        ) is not None
