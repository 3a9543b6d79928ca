"""A `fan_out` step: the step's route called once per item of a list, at most
`max_parallel` at a time and `rate` starts per second; its output is the results in item
order.

The worker that claims the step works through the items in waves of at most
`max_parallel` calls, renewing the step's lease before each wave (so a long fan-out is
never taken over mid-wave), and records each item's outcome in its own control item
(adapters/store/fanouts.py) as it lands: a worker that dies costs only the calls of its
wave, which run again with the same idempotency key (`<run>/<step>[<index>]`). An item
whose earliest start (its `rate` slot, or its retry's backoff) is more than a second
away releases the step to wait, holding no worker, with a timer for then; a worker
whose time is up (a Lambda's) releases it to the queue. Each item's call to a backend
with `limits:` takes a slot first (runners/backend_gate.py): a wave holds the items
that got one, and with none free the step waits for one, released. The step's
`retry:` applies to each item. Once every item has an outcome, the step succeeds with
the list (a failed item's place holds null when `tolerate` allows it) or fails, naming
the failed items."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.adapters.invoker import Call, Invoker, Result
from orchestrator.engine.attempts import Fail, Retry, Succeed, after_attempt
from orchestrator.engine.backend_limits import Limits, Wait
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.errors import Code
from orchestrator.expressions import ExpressionError
from orchestrator.manifest.workflows import MAX_FAN_OUT
from orchestrator.runners.backend_gate import slot_holder, take_slot
from orchestrator.runners.base import Attempt
from orchestrator.runners.cache import RunCache
from orchestrator.runners.condition import compiled
from orchestrator.runners.waits import park
from orchestrator.services.coordination.backend_limits import BackendLimits
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally
from orchestrator.strict_json import dumps

__all__ = ["MAX_ITEM_OUTPUT", "FanOutSteps"]

# The largest result one item may return (its outcome is one control item).
MAX_ITEM_OUTPUT = 256 * 1024
# An item due within this many seconds is waited for in the worker; a later one releases
# the step with a timer.
NEAR = 1.0


class FanOutSteps:
    def __init__(self, executor: Executor, invoker: Invoker, cache: RunCache, *,
                 clock: Callable[[], float], rand: Callable[[], float],
                 sleep: Callable[[float], object], limits: BackendLimits | None = None) -> None:
        self.executor = executor
        # Where an item's call to a backend with `limits:` takes its slot.
        self.limits = limits
        self.cache = cache
        self.store = executor.store
        self.settings = executor.settings
        self.invoker = invoker
        self.clock = clock
        self.rand = rand
        self.sleep = sleep

    def run(self, attempt: Attempt) -> StepRecord | None:
        """The fan-out runner: the claimed step's items (runners/base.py)."""
        row, ctx, backend, spec = attempt.row, attempt.ctx, attempt.backend, attempt.spec
        assert ctx is not None and backend is not None and spec is not None
        assert spec.fan_out is not None
        steps = self.cache.dep_outputs(row, ctx.created_at)
        self.advance(row, ctx, spec.fan_out, backend.url_of(row.route), backend.secret,
                     steps, attempt.tally, room=lambda: attempt.room((row.step,)),
                     limits=backend.limits if self.limits is not None else None)
        return None

    def advance(self, row: StepRecord, ctx: RunContext, spec: Mapping[str, Any],
                url: str, secret: str | None, steps: dict[str, Any] | None, tally: Tally,
                room: Callable[[], bool], limits: Limits | None = None) -> None:
        """Carry the claimed fan_out step on: call what is due, then end it, or release
        it to wait for what is not due yet."""
        items = self._items(row, ctx, spec, tally)
        if items is None:
            return
        outcomes = self.store.fanouts.outcomes(row.run_id, row.step)
        limit, rate = int(spec.get("max_parallel") or 10), spec.get("rate")
        first = row.started_at or self.clock()
        while True:
            now = self.clock()
            pending = [i for i in range(len(items))
                       if outcomes.get(i, {}).get("status") not in ("ok", "failed")]
            if not pending:
                self._end(row, ctx, items, outcomes, int(spec.get("tolerate") or 0), tally)
                return

            def earliest(i: int) -> float:
                slot = first + i / float(rate) if rate else 0.0
                return max(slot, float(outcomes.get(i, {}).get("at") or 0.0))

            ready = [i for i in pending if earliest(i) <= now][:limit]
            if not ready:
                due = min(earliest(i) for i in pending)
                if due - now <= NEAR:
                    self.sleep(due - now)
                    continue
                self._wait(row, due, now, tally)
                return
            until = now + row.timeout + self.settings.lease_margin
            # A wave starts only in a run that is not stopping (DESIGN invariant 5): the
            # renewal is guarded by it, so a stop committed before it starts nothing.
            if not self.store.drivers.renew_driver(row.run_id, row.lease_owner or "",
                                                   row.attempt, until, row.step, live=True):
                # The lease is lost (its next holder carries on), or the run is stopping:
                # the step ends here, its finished items kept.
                gone = self.store.steps.abandon(row.run_id, row.step, row.attempt,
                                                row.lease_owner or "", "run stopped",
                                                self.clock())
                if gone is not None and gone.counted:
                    tally.add(row.run_id)
                return
            row = replace(row, lease_until=until)
            if limits is not None:
                # Each item's call takes a slot of its backend's; none free: the step
                # waits for one, released.
                slots = self._slots(row, limits, ready, tally)
                if slots is None:
                    return
                ready = slots
            with ThreadPoolExecutor(max_workers=len(ready)) as pool:
                results = list(pool.map(
                    lambda i, r=row: self._call(r, ctx, url, secret, steps, items[i], i, outcomes,
                                                limits),
                    ready))
            for i, result in zip(ready, results, strict=True):
                outcome = self._outcome(row, result, outcomes.get(i, {}))
                self.store.fanouts.record(row.run_id, row.step, i, outcome, self.clock())
                outcomes[i] = outcome
            if not room():  # this worker's time is up: the queue carries the step on
                self._wait(row, self.clock(), self.clock(), tally)
                return

    def _items(self, row: StepRecord, ctx: RunContext, spec: Mapping[str, Any],
               tally: Tally) -> list[Any] | None:
        assert ctx.definition is not None
        try:
            cond = compiled(str(spec["items"]), tuple(ctx.definition.specs))
            names = sorted(set(cond.refs.values()))
            rows = self.store.steps.get_outputs(row.run_id, names) if names else {}
            value = cond.value(ctx.input, {n: self.executor.load_output(r)
                                           for n, r in rows.items()})
        except (ExpressionError, ValueError) as exc:
            self._refuse(row, ctx, f"fan_out.items: {exc}", tally)
            return None
        if not isinstance(value, list):
            self._refuse(row, ctx, "fan_out.items: a list is required, got "
                         f"{type(value).__name__}", tally)
            return None
        if len(value) > MAX_FAN_OUT:
            self._refuse(
                row, ctx, f"fan_out.items: {len(value)} items, over the cap of {MAX_FAN_OUT}:"
                " for more, fan the workflow out with forEach (one run per row), or start"
                " child runs from a durable workflow (ctx.spawn / ctx.call)", tally)
            return None
        return value

    def _refuse(self, row: StepRecord, ctx: RunContext, message: str, tally: Tally) -> None:
        error = {"code": Code.FAN_OUT_FAILED.value, "message": f"step {row.step}: {message}"}
        self.executor.fail(row, ctx, Fail(error), tally)

    def _slots(self, row: StepRecord, limits: Limits, ready: list[int],
               tally: Tally) -> list[int] | None:
        """The items of `ready` that took a slot of their backend's, in order (at least
        one); None: none did, and the step was released to wait for one."""
        assert self.limits is not None
        gate = self.limits
        got: list[int] = []

        def enter() -> Wait | None:
            for i in ready[len(got):]:
                wait = gate.enter(limits, slot_holder(row, f"[{i}]"), row.timeout)
                if wait is not None:
                    return None if got else wait
                got.append(i)
            return None

        return got if take_slot(self.executor, gate, limits, row, tally, enter=enter) else None

    def _call(self, row: StepRecord, ctx: RunContext, url: str, secret: str | None,
              steps: dict[str, Any] | None, item: Any, index: int,
              outcomes: dict[int, dict[str, Any]], limits: Limits | None = None) -> Result:
        attempt = int(outcomes.get(index, {}).get("attempt") or 1)
        result: Result | None = None
        try:
            result = self.invoker.invoke(Call(
                url=url, secret=secret, run_id=row.run_id, workflow=ctx.workflow,
                step=f"{row.step}[{index}]", attempt=attempt, timeout=row.timeout,
                input=ctx.input, steps=steps, payload={**row.payload, "item": item,
                                                       "index": index}))
            return result
        finally:
            if limits is not None and self.limits is not None:
                self.limits.leave(limits, slot_holder(row, f"[{index}]"),
                                  None if result is None else result.outcome)

    def _outcome(self, row: StepRecord, result: Result, before: dict[str, Any]
                 ) -> dict[str, Any]:
        attempt = int(before.get("attempt") or 1)
        decision = after_attempt(replace(row, attempt=attempt), result.outcome, self.clock(),
                                 self.rand())
        if isinstance(decision, Succeed):
            if len(result.raw) > MAX_ITEM_OUTPUT:
                return {"status": "failed", "attempt": attempt, "error": {
                    "code": Code.OUTPUT_TOO_LARGE.value,
                    "message": f"the item's answer is {len(result.raw)} bytes, over the "
                               f"{MAX_ITEM_OUTPUT} a fan_out item may return"}}
            return {"status": "ok", "attempt": attempt, "value": decision.output}
        if isinstance(decision, Retry):
            return {"status": "retry", "attempt": decision.next_attempt,
                    "at": round(decision.due_at, 3), "error": decision.error}
        return {"status": "failed", "attempt": attempt, "error": decision.error}

    def _wait(self, row: StepRecord, due: float, now: float, tally: Tally) -> None:
        waiting = Waiting(WaitKind.SLEEP, name=row.step, until=due, since=now)
        park(self.executor, row, row.pokes, waiting, now, tally)

    def _end(self, row: StepRecord, ctx: RunContext, items: list[Any],
             outcomes: dict[int, dict[str, Any]], tolerate: int, tally: Tally) -> None:
        failed = [i for i in range(len(items)) if outcomes[i]["status"] == "failed"]
        if len(failed) > tolerate:
            why = (outcomes[failed[0]].get("error") or {}).get("message", "")
            error = {"code": Code.FAN_OUT_FAILED.value,
                     "message": f"step {row.step}: {len(failed)} of {len(items)} items failed"
                                f" (tolerate {tolerate}); item {failed[0]}: {why}"[:500],
                     "failed": failed[:100],
                     "errors": {str(i): outcomes[i].get("error") for i in failed[:10]}}
            self.executor.fail(row, ctx, Fail(error), tally)
            return
        output = [outcomes[i].get("value") if outcomes[i]["status"] == "ok" else None
                  for i in range(len(items))]
        raw = dumps(output).encode()
        output_json, output_ref = self.executor.store_output(row, raw)
        self.executor.succeed(row, ctx, output_json, output_ref, len(raw), tally,
                              keep_one=None)
