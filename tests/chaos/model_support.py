"""The parts the state-machine test (test_model.py) drives the real system with, none of
them a mock: a clock the test moves, a function server that keeps an effect ledger, the
queues' messages held in a pool the test delivers from, and processes ("actors") that
can die or freeze at any write.

**Actors.** Every operation of the system under test (a worker handling one message, a
sweep, a cancel, a start) runs on a thread of its own, and control passes back and forth
explicitly: the test waits until the actor has finished or is frozen at its pause point,
so exactly one thread runs at any time and every interleaving replays exactly. The
points of an actor are its writes (DynamoDB puts, updates, deletes, batch and
transaction writes, through boto3; queue sends, through `Queues.tamper`), each before it
is made and after it returned. At its fault's point an actor dies (`Crash`: what it wrote
stays, it writes nothing more) or freezes, as a SIGSTOPped process does, until the test
lets it go on or kills it where it stands. Reads are no points: dying after a read is
dying before the next write, and freezing before a write keeps everything read so far.
"""

from __future__ import annotations

import json
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator.adapters.messages import AdmitRun, Dispatch
from orchestrator.engine.states import RUN_TRANSITIONS, STEP_TRANSITIONS, RunStatus, StepStatus
from orchestrator.settings import ResourceNames

__all__ = [
    "Actor",
    "Call",
    "Crash",
    "FakeClock",
    "Fault",
    "Ledger",
    "Pending",
    "Pool",
    "Step",
    "Workflow",
    "install_points",
    "ledger_app",
    "manifest_text",
    "run_path",
    "runs_written",
    "scan",
    "step_path",
    "tamper_into",
    "wipe_tables",
]

Message = Dispatch | AdmitRun


# ---- time -------------------------------------------------------------------------------


class FakeClock:
    """Time as the system under test sees it: moved on by the test (`advance`), by a
    worker's wait (`sleep`) and by one millisecond at every reading, so that every
    history entry (kept to the millisecond) has an instant of its own and "started
    after the halt" is exact."""

    def __init__(self, start: float) -> None:
        self._ms = int(start * 1000)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self._ms += 1
            return self._ms / 1000

    @property
    def now(self) -> float:
        """The time, without moving it (the test's own reads)."""
        return self._ms / 1000

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ms += max(0, int(seconds * 1000))

    def advance_to(self, when: float) -> None:
        with self._lock:
            self._ms = max(self._ms, math.ceil(when * 1000))

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


# ---- the workflows and their functions -----------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step and the script of its function: the first `fail` calls (per idempotency
    key) answer `code`, the later ones 200."""

    deps: tuple[str, ...] = ()
    fail: int = 0
    code: int = 503
    retries: int = 3  # retry.max
    delay: float = 1.0  # retry.delay (linear)

    @property
    def attempts(self) -> int:
        return self.retries + 1

    @property
    def fails_for_good(self) -> bool:
        """Does the script alone make the step fail (a permanent answer, or more
        retryable ones than it has attempts)?"""
        return self.fail > 0 and (self.code == 422 or self.fail >= self.attempts)


@dataclass(frozen=True)
class Workflow:
    on_failure: str  # halt | continue-independent
    steps: dict[str, Step]

    def succeeds(self, name: str) -> bool:
        """Would the step succeed on its script alone (it runs, and does not fail)?"""
        s = self.steps[name]
        return all(self.succeeds(d) for d in s.deps) and not s.fails_for_good

    def fails(self) -> bool:
        """Does the script make the run fail (a step runs and fails for good)?"""
        return any(
            s.fails_for_good and all(self.succeeds(d) for d in s.deps)
            for s in self.steps.values()
        )


def manifest_text(workflows: dict[str, Workflow]) -> str:
    """The manifest of `workflows`, every step a POST to the ledger's /step with its
    script in the payload."""
    # A long timeout: under load a call is slow, never lost (a timeout is not scripted).
    lines = ['backends:', '  fn: { url: "${FN}", timeout: 30s }', "workflows:"]
    for name, wf in workflows.items():
        lines += [f"  {name}:", f"    onFailure: {wf.on_failure}", "    steps:"]
        for step, s in wf.steps.items():
            parts = ["backend: fn", "route: /step"]
            if s.deps:
                parts.append(f"dependsOn: [{', '.join(s.deps)}]")
            if s.fail:
                parts.append(f"payload: {{ fail: {s.fail}, code: {s.code} }}")
            parts.append(f"retry: {{ max: {s.retries}, delay: {s.delay:g}s }}")
            lines.append(f"      {step}: {{ {', '.join(parts)} }}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Call:
    """One call the function received, and what it answered."""

    seq: int  # its place in the ledger
    run_id: str
    step: str
    attempt: int
    key: str  # the Idempotency-Key header
    n: int  # the how-manieth call with this key
    steps: Any  # the dependencies' outputs it was given
    status: int
    answer: Any  # the JSON body it answered


@dataclass
class Ledger:
    """Every call of the function server, with its answer (the effect ledger)."""

    calls: list[Call] = field(default_factory=list)
    per_key: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.per_key.clear()

    def of(self, run_id: str, step: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.run_id == run_id and c.step == step]


def ledger_app(ledger: Ledger) -> Starlette:
    async def step(request: Request) -> Response:
        body = json.loads(await request.body())
        run = body["run"]
        key = request.headers.get("idempotency-key", "")
        with ledger.lock:
            ledger.per_key[key] += 1
            n = ledger.per_key[key]
        answer: dict[str, Any]
        if n <= int(body.get("fail", 0)):
            status, answer = int(body.get("code", 503)), {"error": f"scripted failure {n}"}
        else:
            # Unique per call: a committed output names the call that produced it.
            status, answer = 200, {"step": run["step"], "call": n, "attempt": run["attempt"]}
        with ledger.lock:
            ledger.calls.append(Call(len(ledger.calls), run["run_id"], run["step"],
                                     int(run["attempt"]), key, n, body.get("steps"), status,
                                     answer))
        return JSONResponse(answer, status_code=status)

    return Starlette(routes=[Route("/step", step, methods=["POST"])])


# ---- messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    seq: int
    message: Message
    visible_at: float


class Pool:
    """The queues, held by the test: every message the system sends lands here (through
    `Queues.tamper`, so nothing reaches SQS) and becomes visible when SQS would deliver
    it (a timer after its delay, rounded down and at most 900 s, as `Queues.timer`
    asks for)."""

    def __init__(self) -> None:
        self.items: list[Pending] = []
        self._seq = 0

    def add(self, message: Message, now: float, *, after: float = 0.0) -> None:
        delay = 0.0 if message.due_at is None else math.floor(max(0.0, message.due_at - now))
        self._seq += 1
        self.items.append(Pending(self._seq, message, now + max(after, min(900.0, delay))))

    def visible(self, now: float) -> list[Pending]:
        return [p for p in self.items if p.visible_at <= now]

    def take(self, pending: Pending) -> None:
        self.items.remove(pending)


# ---- processes that die and freeze ------------------------------------------------------------


class Crash(BaseException):
    """The process died here. A BaseException, so that no `except Exception` of the code
    under test can catch it (a dead process runs no handler either)."""


@dataclass(frozen=True)
class Fault:
    kind: str  # crash | pause
    point: int  # 2i: before the actor's i-th write, 2i + 1: after it returned


_current = threading.local()


class Actor:
    """One operation of one process, on a thread of its own (see the module docstring)."""

    WAIT = 60.0  # a wait this long for an actor to yield is a hang: the test fails

    def __init__(self, name: str, fn: Callable[[], Any], fault: Fault | None = None) -> None:
        self.name = name
        self.fn = fn
        self.fault = fault
        self.points = 0
        self.state = "new"  # running | paused | done | crashed | failed
        self.result: Any = None
        self.error: BaseException | None = None
        self.fired = False  # the fault happened (a crash or a pause)
        # The runs whose rows it wrote (None: some write it made names no run).
        self.wrote: set[str] | None = set()
        self._dead = False
        self._kill = False
        self._turn = threading.Event()
        self._back = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"actor-{name}", daemon=True)

    def run(self) -> Actor:
        """Start it; returns once it has finished, died or frozen."""
        self.state = "running"
        self._thread.start()
        self._wait()
        return self

    def resume(self, *, kill: bool = False) -> Actor:
        """Let a frozen actor go on (or die where it stands); returns as `run` does."""
        assert self.state == "paused", self.state
        self._kill = kill
        self.state = "running"
        self._turn.set()
        self._wait()
        return self

    def _wait(self) -> None:
        if not self._back.wait(self.WAIT):
            raise AssertionError(f"actor {self.name} neither finished nor paused in"
                                 f" {self.WAIT:g}s (at point {self.points})")
        self._back.clear()
        if self.state != "paused":
            self._thread.join(self.WAIT)

    def _main(self) -> None:
        _current.actor = self
        try:
            self.result = self.fn()
            self.state = "done"
        except Crash:
            self.state = "crashed"
        except BaseException as exc:  # reported to the test, which fails on it
            self.state, self.error = "failed", exc
        finally:
            self._back.set()

    def point(self) -> None:
        """A point of this actor (called on its thread, before and after each write)."""
        if self._dead:
            raise Crash
        i, self.points = self.points, self.points + 1
        if self.fault is None or i != self.fault.point:
            return
        self.fired = True
        if self.fault.kind == "crash":
            self._dead = True
            raise Crash
        self.state = "paused"
        self._back.set()
        self._turn.wait()
        self._turn.clear()
        if self._kill:
            self._dead = True
            raise Crash


def current_actor() -> Actor | None:
    actor: Actor | None = getattr(_current, "actor", None)
    return actor


# The calls that write (the others only read).
WRITES = frozenset({
    "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems",
    "SendMessage", "SendMessageBatch", "DeleteMessage", "DeleteMessageBatch",
    "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "PutObject", "DeleteObject",
})


def _at_point(**_: Any) -> None:
    actor = current_actor()
    if actor is not None:
        actor.point()


def _at_call(model: Any = None, **_: Any) -> None:
    if model is not None and model.name in WRITES:
        _at_point()


def _note_write(params: Any = None, model: Any = None, **_: Any) -> None:
    actor = current_actor()
    if actor is None or model is None or model.name not in WRITES:
        return
    runs = runs_written(model.name, params or {})
    if runs is None or actor.wrote is None:
        actor.wrote = None
    else:
        actor.wrote |= runs


def runs_written(operation: str, params: dict[str, Any]) -> set[str] | None:
    """The run ids of the rows a DynamoDB write names (None: it names something else,
    such as a control item, or is no DynamoDB write: the test then reads everything)."""
    if operation in ("SendMessage", "SendMessageBatch", "DeleteMessage", "DeleteMessageBatch",
                     "ChangeMessageVisibility", "ChangeMessageVisibilityBatch"):
        return set()  # the queues hold no rows
    items: list[Any] = [params.get("Key"), params.get("Item")]
    for requests in (params.get("RequestItems") or {}).values():
        for r in requests:
            items += [r.get("PutRequest", {}).get("Item"), r.get("DeleteRequest", {}).get("Key")]
    for t in params.get("TransactItems") or []:
        items += [w.get("Key") or w.get("Item") for w in t.values()]
    runs: set[str] = set()
    for item in filter(None, items):
        run_id = item.get("run_id", {}).get("S")
        if run_id is None:
            return None
        runs.add(run_id)
    return runs if runs else None


def install_points(clients: Sequence[Any]) -> None:
    """Make every write of these boto3 clients two points of the actor making it, and
    note the runs it writes (the test's own calls, on its main thread, are no actor's)."""
    for client in clients:
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-parameter-build.{service}", _note_write)
        client.meta.events.register(f"before-call.{service}", _at_call)
        client.meta.events.register(f"after-call.{service}", _at_call)


def tamper_into(pool: Pool, clock: FakeClock) -> Callable[[list[Any]], list[Any]]:
    """A `Queues.tamper` that moves every message into `pool` (a send: two points)."""

    def tamper(messages: list[Any]) -> list[Any]:
        _at_point()
        for m in messages:
            pool.add(m, clock.now)
        _at_point()
        return []

    return tamper


# ---- reading rows' histories ----------------------------------------------------------------

# What each history entry makes of a step row's status (None: the status stays).
_STEP_ENTRY: dict[str, StepStatus | None] = {
    "step.ready": StepStatus.READY,
    "step.started": StepStatus.DISPATCHED,
    "step.retrying": StepStatus.DISPATCHED,
    "step.succeeded": StepStatus.SUCCESS,
    "step.failed": StepStatus.FAILED,
    "step.skipped": StepStatus.SKIPPED,
    "step.reused": StepStatus.SUCCESS,
    "step.stopping": None,
    "step.redispatched": None,
}
_RUN_ENTRY: dict[str, RunStatus | None] = {
    "run.started": RunStatus.RUNNING,
    **{f"run.{s.value}": s for s in RunStatus if s.terminal},
    "run.halted": None,
    "run.cancel_requested": None,
}


def step_path(history: Sequence[dict[str, Any]]) -> tuple[list[StepStatus], str | None]:
    """The statuses a step row went through by its history (from `blocked`), and the
    first illegal move, if any."""
    return _walk(StepStatus.BLOCKED, history, _STEP_ENTRY, STEP_TRANSITIONS)


def run_path(history: Sequence[dict[str, Any]]) -> tuple[list[RunStatus], str | None]:
    """The statuses a run row went through by its history, and the first illegal move."""
    if not history:
        return [], "no history"
    first = history[0].get("type", "")
    start = {"run.queued": RunStatus.QUEUED, "run.running": RunStatus.RUNNING}.get(first)
    if start is None:
        return [], f"first entry {first}"
    return _walk(start, history[1:], _RUN_ENTRY, RUN_TRANSITIONS)


def _walk(status: Any, history: Sequence[dict[str, Any]], entry: Mapping[str, Any],
          table: Mapping[Any, Any]) -> tuple[list[Any], str | None]:
    """Follow `history` from `status` through the transition `table` (an entry's type
    maps to the status it moves to): the statuses passed, and the first illegal move."""
    path = [status]
    for e in history:
        kind = e.get("type", "")
        if status.terminal:
            return path, f"{kind} after {status.value}"
        to = entry.get(kind)
        if to is None:
            continue
        if to not in table[status]:
            return path, f"{status.value} -> {to.value} ({kind})"
        status = to
        path.append(status)
    return path, None


# ---- tables -------------------------------------------------------------------------------


def scan(dynamodb: Any, table: str, *, op: str = "scan", **kwargs: Any) -> list[dict[str, Any]]:
    """Every item of a table, or of a query (`op="query"`), read consistently."""
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": table, "ConsistentRead": True, **kwargs}
    while True:
        resp = getattr(dynamodb, op)(**request)
        items.extend(resp.get("Items", []))
        if "LastEvaluatedKey" not in resp:
            return items
        request["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def wipe_tables(dynamodb: Any, names: ResourceNames) -> None:
    """Delete every item of every table of these names: a clean slate."""
    for table in [getattr(names, a) for a in dir(names) if a.endswith("_table")]:
        keys = [k["AttributeName"]
                for k in dynamodb.describe_table(TableName=table)["Table"]["KeySchema"]]
        attrs = {f"#k{i}": k for i, k in enumerate(keys)}
        items = scan(dynamodb, table, ProjectionExpression=", ".join(attrs),
                     ExpressionAttributeNames=attrs)
        for i in range(0, len(items), 25):
            pending: dict[str, Any] = {
                table: [{"DeleteRequest": {"Key": item}} for item in items[i : i + 25]]
            }
            while pending:
                pending = dynamodb.batch_write_item(RequestItems=pending).get(
                    "UnprocessedItems") or {}
