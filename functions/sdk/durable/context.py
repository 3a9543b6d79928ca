"""`Context`: what a durable workflow is given besides its input.

Waiting operations (`sleep`, `sleep_until`, `wait_for_signal`) hold nothing while they
wait: the call ends, and the orchestrator calls again once the wait is over. Their
outcome is recorded the first time it resolves, and replay sees that record (a signal
landing after a timeout does not change a branch already taken).

The deterministic helpers are the same on every replay: `now()` is when the previous
operation ended (the run's start before any), `uuid(name)` and `random(name)` derive
from the run id, the scope, the name and how often it was asked for, and
`patched(id)` records which side of a code change a run took."""

from __future__ import annotations

import hashlib
import logging
import uuid as uuid_mod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from functions.sdk.durable.call import Call, current, named, sent
from functions.sdk.durable.durations import Duration, seconds
from functions.sdk.durable.errors import WorkflowError
from functions.sdk.durable.locks import Lock
from functions.sdk.durable.parallel import run_parallel
from functions.sdk.durable.state import State
from functions.sdk.durable.steps import current_step
from functions.sdk.protocol import DurableCode

__all__ = ["Context", "Hook"]

_log = logging.getLogger("functions.durable.workflow")


class _ReplayFilter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger that stays silent while the workflow replays recorded operations, so a
    line is logged once, by the call that ran it first. Each line names its operation and
    attempt (record attributes `run_id`, `workflow`, `operation`, `operation_name`,
    `attempt`; a JSON formatter groups on them): inside a step body, that step's; between
    operations, the next operation's place in its scope (`<scope>@<pos>`, attempt 1)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(_log, {})
        self._ctx = ctx

    def isEnabledFor(self, level: int) -> bool:
        return not self._ctx.replaying and super().isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        info = current_step()
        if info is not None:
            op, name, attempt = info.place.id, info.place.name, info.attempt
        else:
            _, scope = current()
            op, name, attempt = f"{scope.id}@{scope.pos}", "", 1
        fields = {"run_id": self._ctx.run_id, "workflow": self._ctx.workflow,
                  "operation": op, "operation_name": name, "attempt": attempt}
        kwargs["extra"] = {**fields, **(kwargs.get("extra") or {})}
        where = f"{name or op} #{attempt}"
        return f"[{self._ctx.workflow} {self._ctx.run_id} {where}] {msg}", kwargs


@dataclass(frozen=True)
class Hook:
    ctx: Context = field(repr=False)
    token: str = field(repr=False)
    url: str
    signal: str
    expires_at: float
    metadata: Any = None

    async def wait(self, *, timeout: Duration | None = None) -> Any:
        """The payload the hook delivers (None if `timeout` passes first)."""
        return await self.ctx.wait_for_signal(self.signal, timeout=timeout)


class Context:
    def __init__(self, call: Call) -> None:
        self._call = call
        self.logger: logging.LoggerAdapter = _ReplayFilter(self)  # type: ignore[type-arg]
        # Durable state cells: ctx.state.add / incr / get / set / delete.
        self.state = State(self)

    # -- facts ---------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self._call.run_id

    @property
    def workflow(self) -> str:
        return self._call.workflow

    @property
    def subject(self) -> str | None:
        """The subject (key) of the event that started the run, if one did."""
        return self._call.subject

    @property
    def replaying(self) -> bool:
        """Whether the code is re-running operations the journal already records."""
        call, scope = current()
        return call.replaying(scope)

    @property
    def attempt(self) -> int:
        """The attempt of the step whose body is running (1 outside a step body)."""
        info = current_step()
        return 1 if info is None else info.attempt

    @property
    def idempotency_key(self) -> str:
        """The running step's key: the same on every attempt of that step of this run."""
        info = current_step()
        if info is None:
            raise WorkflowError("ctx.idempotency_key is a step's: read it inside a step body")
        return info.idempotency_key

    # -- deterministic helpers -----------------------------------------------------------

    def now(self) -> datetime:
        """When the previous operation ended (the run's start before any), in UTC: the
        same on every replay. Inside a step body (which never replays) it is the time
        now, on the orchestrator's clock (a test's fake clock included)."""
        call, scope = current()
        if current_step() is not None:
            return datetime.fromtimestamp(call.clock(), UTC)
        return datetime.fromtimestamp(scope.now, UTC)

    def _derived(self, kind: str, name: str) -> bytes:
        _, scope = current()
        key = f"\x00{kind}:{name}"
        n = scope.counts.get(key, 0)
        scope.counts[key] = n + 1
        return hashlib.sha256(f"{self.run_id}\x1f{scope.id}\x1f{kind}\x1f{name}\x1f{n}"
                              .encode()).digest()

    def uuid(self, name: str = "uuid") -> uuid_mod.UUID:
        """A UUID that is the same on every replay of this point of the run."""
        return uuid_mod.UUID(bytes=self._derived("uuid", name)[:16], version=4)

    def random(self, name: str = "random") -> float:
        """A number in [0, 1) that is the same on every replay of this point of the run."""
        return int.from_bytes(self._derived("random", name)[:7], "big") / float(1 << 56)

    def patched(self, patch_id: str) -> bool:
        """True where new code may take its new branch: always for runs that reach this
        point on code that has it; False for runs that passed it on older code."""
        call, scope = current()
        rec = call.journal.get((scope.id, scope.pos))
        if rec is not None and not (rec.kind == "patch" and rec.name == patch_id):
            return False  # this run got past here on code without the patch
        place = call.place(scope, "patch", patch_id)
        if call.recorded(place) is None and not call.check:
            call.record(scope, place.entry(status="ok", value=True, started=scope.now,
                                           ended=scope.now))
        return True

    # -- waiting -------------------------------------------------------------------------

    async def sleep(self, duration: Duration, *, name: str = "sleep") -> None:
        """Wait `duration` (any length: "3d", "14d", a timedelta, milliseconds)."""
        await self._wait("sleep", name, seconds=seconds(duration, f"sleep {name!r}"))

    async def sleep_until(self, when: datetime, *, name: str = "sleep") -> None:
        """Wait until `when` (a timezone-aware datetime; a past one returns at once)."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise WorkflowError(f"sleep_until needs a timezone-aware datetime, got {when!r}")
        await self._wait("sleep", name, until=when.timestamp())

    async def wait_for_signal(self, name: str, *, timeout: Duration | None = None) -> Any:
        """The payload of the next signal `name` sent to this run (signals sent earlier
        wait in a queue, first in first out); None if `timeout` passes first. `name`
        follows the rule of names (functions.sdk.protocol.values: letters and digits of
        any script and `_ . : -`, at most 128), or this raises WorkflowError
        (invalid_name): nothing could ever send it."""
        name = named(name, "wait_for_signal: signal name")
        limit = None if timeout is None else seconds(timeout, f"signal {name!r} timeout")
        return await self._wait("signal", name, timeout=limit)

    async def wait_for_event(self, name: str, *, subject: str | None = None,
                             timeout: Duration | None = None,
                             lookback: Duration | None = None) -> dict[str, Any] | None:
        """The first event `name` (from POST /events) about `subject` (default: the
        subject of the event that started the run; events without a subject match too)
        emitted since the operation before this wait started, less `lookback`: one that
        arrived before the wait registered is seen. None if `timeout` passes first. The
        event: {name, key, id, data, received_at}. `name` follows the rule of names (an
        event's may hold `/`), or this raises WorkflowError (invalid_name)."""
        name = named(name, "wait_for_event: event name", event=True)
        call, scope = current()
        limit = None if timeout is None else seconds(timeout, f"event {name!r} timeout")
        back = 0.0 if lookback is None else seconds(lookback, f"event {name!r} lookback")
        wanted = subject if subject is not None else call.subject
        value: dict[str, Any] | None = await self._wait(
            "event", name, event=name, subject=wanted, timeout=limit,
            after=scope.last_started - back)
        return value

    async def create_hook(self, signal: str, *, metadata: Any = None,
                          ttl: Duration | None = None) -> Hook:
        """A hook: a secret URL that delivers signal `signal` to this run once, with
        `metadata` merged over the JSON it is posted. Stored before this returns, so
        its URL can be handed out at once; the same on every replay. Expires after
        `ttl` (default 7 days). Wait for it with `await hook.wait()` or
        `ctx.wait_for_signal(signal)`. `signal` follows the rule of names, and
        `metadata` is at most 256 KiB as JSON (so is the payload it is merged into), or
        this raises WorkflowError (invalid_name, value_too_large)."""
        signal = named(signal, "create_hook: signal name")
        meta = sent(metadata, "create_hook: the hook's metadata")
        limit = None if ttl is None else seconds(ttl, f"hook {signal!r} ttl", allow_zero=False)
        value = await self._wait("hook", signal, signal=signal, metadata=meta, ttl=limit)
        return Hook(self, str(value.get("token", "")), str(value.get("url", "")), signal,
                    float(value.get("expires_at") or 0.0), value.get("metadata"))

    def lock(self, key: str) -> Lock:
        """The lock `key`, shared by every run of the project: `async with
        ctx.lock(key):` holds it for the block, `await ctx.lock(key)` until the run
        ends. Runs asking for one key take it in arrival order, holding nothing while
        they wait; other keys do not wait. `key` follows the rule of names."""
        return Lock(self, key)

    async def approval(self, name: str, *, prompt: str, timeout: Duration,
                       approvers: Sequence[str] = (), link: bool = False) -> dict[str, Any]:
        """Ask a person and wait (holding nothing) for the answer: `{approved, timed_out,
        by, at, comment}`. The gate `name` (one per run) shows in the inbox (GET
        /approvals, `orchestrator approvals`) with `prompt`, and is answered with
        POST /runs/{id}/approvals/{name} or `orchestrator approve|reject RUN NAME`, by
        one of `approvers` (API key names; empty: any key), or through its single-use
        link (`link=True`). Past `timeout` it returns `timed_out: true` (approved
        false). A rejection cancels the run, the rejecter and comment in its reason."""
        name = named(name, "approval: gate name")
        limit = seconds(timeout, f"approval {name!r} timeout", allow_zero=False)
        people = [str(a) for a in approvers]
        value: dict[str, Any] = await self._wait("approval", name, prompt=str(prompt),
                                                 timeout=limit, approvers=people,
                                                 link=bool(link))
        return value

    async def call(self, workflow: str, input: Any = None, *, name: str | None = None) -> Any:
        """Start a child run of `workflow` (served by any backend the manifest names) and
        wait for its result; its failure raises StepFailed (code child_failed). The
        child's id derives from this run and operation: a replay starts nothing new.
        `input` is at most 256 KiB as JSON, or this raises WorkflowError
        (value_too_large)."""
        return await self._wait("call", name or workflow, workflow=workflow,
                                input=sent(input, f"the input of child {workflow!r}"))

    async def spawn(self, workflow: str, input: Any = None, *, name: str | None = None,
                    notify: str | None = None) -> str:
        """Start a child run of `workflow` without waiting for it; returns its run id.
        Cancelling this run cancels it too, while it runs. `input` is at most 256 KiB as
        JSON, or this raises WorkflowError (value_too_large). With `notify`, the child's
        end sends this run the signal `notify` with the child's outcome {run_id, status,
        output, error}: `ctx.wait_for_signal(notify)` collects it, before or after."""
        fields: dict[str, Any] = {}
        if notify is not None:
            fields["notify"] = named(notify, "spawn: notify signal name")
        value = await self._wait("spawn", name or workflow, workflow=workflow,
                                 input=sent(input, f"the input of child {workflow!r}"),
                                 **fields)
        return str((value or {}).get("run_id"))

    async def parallel(self, branches: Sequence[Any], *, max_parallel: int | None = None,
                       name: str = "parallel") -> list[Any]:
        """Run `branches` (steps, or async callables whose durable operations form a
        branch of their own) at most `max_parallel` at a time, each advancing on its
        own. Returns their results in input order; if any failed, raises the first
        failure (in input order) once every branch has ended."""
        return await run_parallel(branches, max_parallel, name)

    async def _wait(self, kind: str, name: str, **fields: Any) -> Any:
        call, scope = current()
        if current_step() is not None:
            raise call.halt(DurableCode.NESTED_OPERATION,
                            f"{kind} {name!r} was started inside a step body")
        place = call.place(scope, kind, name)
        rec = call.recorded(place)
        if rec is not None:
            return call.outcome(scope, rec)
        if call.check:
            raise call.wait(place, "next")
        raise call.wait(place, kind, **fields)
