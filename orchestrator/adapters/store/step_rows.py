"""Step rows as whole items: batch and conditional creation, consistent reads of one
row, of a run's rows (optionally states only) and of step outputs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.metering import CODES, PREFIX
from orchestrator.adapters.store.codec import step_from_item, step_to_item
from orchestrator.adapters.store.join_counts import WIDE_JOIN, count_items
from orchestrator.adapters.store.tables import Tables, step_key
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.engine.wakes import step_wake
from orchestrator.errors import ConditionFailed, StoreError

__all__ = ["STATE_PROJECTION", "VIEW_PROJECTION", "StepRows"]

# A row's request counts (adapters/metering.py), as a projection names them.
REQUEST_NAMES = {f"#rq{i}": PREFIX + code for i, code in enumerate(CODES.values())}

STATE_PROJECTION = (
    "run_id, step, #s, backend, route, deps, dependants, attempt, max_attempts, #t,"
    " retry_strategy, retry_delay, retry_max_delay, lease_owner, lease_until, due_at,"
    " ready_at, started_at, finished_at, count_me, stopping, expires_at, wake_at,"
    " resends, waiting, pokes"
)

# What a run's view shows of each step (services/reads/views.py): no histories, payloads or
# edges but the dependencies, which are most of a row's bytes, and most of the emulator's
# work answering a follower that looks every quarter of a second.
VIEW_PROJECTION = (
    "run_id, step, #s, attempt, #o, output_ref, output_size, #e, deps, started_at,"
    " finished_at, waiting, lease_owner, " + ", ".join(REQUEST_NAMES)
)
SHOWN_NAMES = {"#s": "status", "#o": "output", "#e": "error", **REQUEST_NAMES}

# The terminal statuses, as a `live` query's filter names them (:t0 to :t2).
_TERMINAL_VALUES = {f":t{i}": {"S": st.value}
                    for i, st in enumerate(sorted(s for s in StepStatus if s.terminal))}


# Sort keys from here on are not step rows: a durable run's journal entries and
# signals (adapters/store/journal.py). Step names never start with "~".
ITEMS = "~"


class FenceClosed(Exception):
    """A start's batch write was about to be sent past its fence."""


class _Fence:
    """Sets the calling thread's fence for the requests made inside it."""

    def __init__(self, rows: StepRows, fence: float | None, clock: Callable[[], float]) -> None:
        self.rows, self.fence, self.clock = rows, fence, clock

    def __enter__(self) -> None:
        self.rows._fence_local.until = self.fence
        self.rows._fence_local.clock = self.clock

    def __exit__(self, *exc: object) -> None:
        self.rows._fence_local.until = None


class StepRows(Tables):
    """Whole-row writes and reads of the steps table."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fence_local = threading.local()
        # Checked as each attempt is built (retries included), just before it is sent.
        self.ddb.meta.events.register("request-created.dynamodb.BatchWriteItem",
                                      self._check_fence)

    def _item(self, row: StepRecord) -> dict[str, Any]:
        """A whole row as an item, with its wake if the record does not carry one."""
        if row.wake_at is None:
            row = replace(row, wake_at=step_wake(row, self.wake))
        return step_to_item(row)

    def _items(self, row: StepRecord, clock: Callable[[], float]) -> list[dict[str, Any]]:
        """A new row's items: the row, and for a wide join that starts with some
        dependencies done (a rerun reusing them) its count of them (join_counts.py)."""
        items = [self._item(row)]
        if (row.status is StepStatus.BLOCKED and row.satisfied
                and len(row.deps) >= WIDE_JOIN):
            places = {d: i for i, d in enumerate(row.deps)}
            items += count_items(row.run_id, row.step,
                                 [places[d] for d in row.satisfied if d in places],
                                 len(row.deps), clock() + self.step_retention)
        return items

    def put_steps(
        self,
        rows: Sequence[StepRecord],
        *,
        fence: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> bool:
        """Write whole rows of a new run, 25 to a request. True if each request was
        answered at its first sending, every item written (no retry, no item left
        unprocessed, no fence reached): then no copy of a batch can still land later.

        `fence` (a wall time): no batch may reach DynamoDB after it. A sweep rebuilds
        the rows of a run whose start looks dead (`settle` after it began) with
        conditional creates, and workers move them on; a batch write is unconditional,
        so a start that stalled past the fence (its process paused, its request retried)
        must not overwrite them. From the fence on, what is left is created row by row,
        each only if absent. The fence is checked as each request is sent (retries
        included), so only a request already on the wire can land after it."""
        items = [{"PutRequest": {"Item": item}} for r in rows for item in self._items(r, clock)]
        clean = True
        for i in range(0, len(items), 25):
            pending: dict[str, Any] = {self.steps: items[i : i + 25]}
            try:
                for _ in range(10):
                    with _Fence(self, fence, clock), _translate("write steps"):
                        resp = self.ddb.batch_write_item(RequestItems=pending)
                    pending = resp.get("UnprocessedItems") or {}
                    clean = (clean and not pending
                             and not resp.get("ResponseMetadata", {}).get("RetryAttempts"))
                    if not pending:
                        break
                else:
                    raise StoreError("write steps: DynamoDB kept items unprocessed")
            except FenceClosed:
                late = [r["PutRequest"]["Item"] for r in pending.get(self.steps, [])]
                late += [r["PutRequest"]["Item"] for r in items[i + 25 :]]
                for item in late:
                    self._create_if_absent(item)
                return False
        return clean

    def _check_fence(self, **_: Any) -> None:
        """botocore request-created: refuse to send a batch write past its fence."""
        fence = getattr(self._fence_local, "until", None)
        if fence is not None and self._fence_local.clock() > fence:
            raise FenceClosed(f"the start's rows are past their fence ({fence:.3f})")

    def _create_if_absent(self, item: dict[str, Any]) -> None:
        try:
            with _translate(f"step {item['run_id']['S']}/{item['step']['S']}: create"):
                self.ddb.put_item(TableName=self.steps, Item=item,
                                  ConditionExpression="attribute_not_exists(run_id)")
        except ConditionFailed:
            pass  # a sweep made it (and it may have moved on): keep it

    def forget(self, run_id: str) -> int:
        """Delete every item under `run_id` in the steps table (step rows, a durable
        run's journal and signals, join counts): what a run of that id left behind when
        its run row expired before them. How many there were."""
        keys: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.steps, "KeyConditionExpression": "run_id = :r",
            "ExpressionAttributeValues": {":r": {"S": run_id}},
            "ProjectionExpression": "run_id, step", "ConsistentRead": True,
        }
        while True:
            with _translate(f"steps of {run_id}: read"):
                resp = self.ddb.query(**kwargs)
            keys += [{"run_id": i["run_id"], "step": i["step"]} for i in resp.get("Items", [])]
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        for i in range(0, len(keys), 25):
            pending: dict[str, Any] = {self.steps: [{"DeleteRequest": {"Key": k}}
                                                    for k in keys[i:i + 25]]}
            for _ in range(10):
                with _translate(f"steps of {run_id}: delete"):
                    pending = self.ddb.batch_write_item(RequestItems=pending).get(
                        "UnprocessedItems") or {}
                if not pending:
                    break
            else:
                raise StoreError(f"steps of {run_id}: DynamoDB kept deletes unprocessed")
        return len(keys)

    def create_step_if_absent(self, row: StepRecord) -> None:
        with _translate(f"step {row.run_id}/{row.step}: create"):
            self.ddb.put_item(
                TableName=self.steps,
                Item=self._item(row),
                ConditionExpression="attribute_not_exists(run_id)",
            )

    def get_step(self, run_id: str, step: str) -> StepRecord | None:
        with _translate(f"step {run_id}/{step}: read"):
            resp = self.ddb.get_item(
                TableName=self.steps, Key=step_key(run_id, step), ConsistentRead=True
            )
        item = resp.get("Item")
        return step_from_item(item) if item else None

    def query_steps(self, run_id: str, *, states_only: bool = False,
                    shown: bool = False, live: bool = False,
                    span: tuple[str, str] | None = None) -> list[StepRecord]:
        """Every step row of a run. `states_only` leaves out payloads, outputs and
        errors: what a sweep decides on, at a fraction of the bytes. `shown`: only what
        a run's view shows (VIEW_PROJECTION). `live`: only the rows not terminal (the
        others are read, and filtered out before they are sent). `span`: only the rows
        whose step names are between these two, both included."""
        rows: list[StepRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.steps,
            # Below "~": a durable run's journal and signals sort after its rows.
            "KeyConditionExpression": "run_id = :r AND step < :items",
            "ExpressionAttributeValues": {":r": {"S": run_id}, ":items": {"S": ITEMS}},
            "ConsistentRead": True,
        }
        if span is not None and span[1] < ITEMS:
            kwargs["KeyConditionExpression"] = "run_id = :r AND step BETWEEN :lo AND :hi"
            kwargs["ExpressionAttributeValues"] = {
                ":r": {"S": run_id}, ":lo": {"S": span[0]}, ":hi": {"S": span[1]}}
        if states_only:
            kwargs["ProjectionExpression"] = STATE_PROJECTION
            kwargs["ExpressionAttributeNames"] = {"#s": "status", "#t": "timeout"}
        elif shown:
            kwargs["ProjectionExpression"] = VIEW_PROJECTION
            kwargs["ExpressionAttributeNames"] = SHOWN_NAMES
        if live:
            kwargs["FilterExpression"] = "NOT (#s IN (:t0, :t1, :t2))"
            kwargs["ExpressionAttributeNames"] = {**kwargs.get("ExpressionAttributeNames", {}),
                                                  "#s": "status"}
            kwargs["ExpressionAttributeValues"] = {**kwargs["ExpressionAttributeValues"],
                                                   **_TERMINAL_VALUES}
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
        found, _ = self._batch_rows(run_id, names, "run_id, step, #s, #o, output_ref, output_size",
                                    {"#s": "status", "#o": "output"}, "outputs")
        return found

    def get_shown(self, run_id: str, names: Sequence[str]) -> dict[str, StepRecord] | None:
        """The named rows as a run's view shows them (VIEW_PROJECTION), by key; a row not
        written is left out. None if DynamoDB left some keys unread (throttled)."""
        found, whole = self._batch_rows(run_id, names, VIEW_PROJECTION,
                                        SHOWN_NAMES,
                                        "steps shown")
        return found if whole else None

    def _batch_rows(self, run_id: str, names: Sequence[str], proj: str,
                    attr_names: dict[str, str], what: str) -> tuple[dict[str, StepRecord], bool]:
        """The named rows, projected, by BatchGetItem (100 keys a request, unread keys
        asked again up to 10 times); whether every key was read."""
        found: dict[str, StepRecord] = {}
        whole = True
        for i in range(0, len(names), 100):
            keys = [step_key(run_id, n) for n in names[i : i + 100]]
            request: dict[str, Any] = {
                self.steps: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": proj,
                    "ExpressionAttributeNames": attr_names,
                }
            }
            for _ in range(10):
                with _translate(f"{what} of {run_id}"):
                    resp = self.ddb.batch_get_item(RequestItems=request)
                for item in resp.get("Responses", {}).get(self.steps, []):
                    row = step_from_item({"backend": {"S": ""}, "route": {"S": ""}, **item})
                    found[row.step] = row
                request = resp.get("UnprocessedKeys") or {}
                if not request:
                    break
            whole = whole and not request
        return found, whole
