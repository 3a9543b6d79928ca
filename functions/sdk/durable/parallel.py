"""`ctx.parallel`: branches that advance independently, at most `max_parallel` at once.

Each branch is a scope of its own (`branch_scope`): its operations have their own
places and ids, whatever the order the branches run in. In version 2 of the protocol a
call runs the branches itself, at most `max_parallel` at once; a branch that waits
suspends alone, and the others go on. The branches still not done when the call can do
no more (and in version 1 every branch) are advanced by calls of their own (a call
*targets* one scope), so a slow branch holds no other back. A version 1 call that
targets the parent runs every branch up to its frontier, without running any step body,
to see which are done; a call that targets a branch runs only that branch. When a
branch's code returns (or raises), its result is recorded in its scope at RESULT_POS (a
branch that is one step, in version 2: its step's entry, marked `ends`); once every
branch has one, the parallel operation is recorded and the workflow goes on with the
results in input order.

Policy on failure: every branch runs to its end; then the first failed branch (in
input order) raises its error where the workflow awaited ctx.parallel (catch
StepFailed to compensate). Up to MAX_BRANCHES branches per operation: beyond, start
child runs."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from functions.sdk.durable.call import (
    RESULT_POS,
    Call,
    Place,
    Scope,
    branch_scope,
    current,
    roundtrip,
)
from functions.sdk.durable.errors import StepFailed, Suspend, WorkflowError
from functions.sdk.durable.steps import StepCall, current_step, run_step
from functions.sdk.protocol import DurableCode

__all__ = ["MAX_BRANCHES", "run_parallel"]

MAX_BRANCHES = 1000

Branch = StepCall | Callable[[], Awaitable[Any]]


async def run_parallel(branches: Sequence[Branch], max_parallel: int | None,
                       name: str) -> list[Any]:
    call, scope = current()
    if current_step() is not None:
        raise call.halt(DurableCode.NESTED_OPERATION,
                        f"parallel {name!r} was started inside a step body")
    items = list(branches)
    if len(items) > MAX_BRANCHES:
        raise call.halt(DurableCode.TOO_MANY_BRANCHES,
                        f"parallel {name!r} has {len(items)} branches (at most {MAX_BRANCHES}):"
                        " start child runs with ctx.call instead")
    for i, item in enumerate(items):
        if not (isinstance(item, StepCall) or callable(item)):
            raise call.halt(DurableCode.BAD_BRANCH,
                            f"parallel {name!r}: branch {i} is {item!r}, not a step or an"
                            " async callable")
    limit = len(items) if max_parallel is None else max_parallel
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise call.halt(DurableCode.BAD_BRANCH,
                        f"parallel {name!r}: max_parallel must be an integer >= 1, got"
                        f" {max_parallel!r}")
    place = call.place(scope, "parallel", name)
    scopes = [branch_scope(scope.id, place.pos, i) for i in range(len(items))]
    rec = call.recorded(place)
    if rec is not None:
        call.outcome(scope, rec)
        return _settled(call, scopes)
    mine = [i for i, s in enumerate(scopes) if call.targets(s)]
    scope.busy = place
    try:
        if mine:
            # A call for one branch (or for a scope inside one) runs only that branch.
            await asyncio.gather(*(_branch(call, scope, scopes[i], items[i]) for i in mine))
        elif call.protocol >= 2 and call.may_run(scope):
            await _run_inline(call, scope, scopes, items, limit)
        else:
            # Version 1: every branch up to its frontier, running no step body, to see
            # which are done already.
            await asyncio.gather(*(_branch(call, scope, scopes[i], items[i])
                                   for i in range(len(items))))
    finally:
        scope.busy = None
    if mine or call.halted:
        raise Suspend()  # a call for one branch ends with it
    if all(call.branch_result(s) is not None for s in scopes) and not call.check:
        call.record(scope, place.entry(status="ok", value=None, started=scope.now,
                                       ended=call.clock()))
        return _settled(call, scopes)
    raise call.wait(place, "parallel", branches=len(items), max_parallel=limit)


async def _run_inline(call: Call, parent: Scope, scopes: list[str], items: list[Branch],
                      limit: int) -> None:
    """Version 2: run the branches in this call, at most `limit` at once, in input order.
    A branch that waits (a sleep, a signal, a retry's backoff) suspends alone and keeps
    its slot, as it will while the orchestrator advances it on its own; one that ends
    frees its slot for the next. Returns once no branch can move in this call."""
    pending = deque(i for i, s in enumerate(scopes) if call.branch_result(s) is None)
    running: dict[asyncio.Task[None], str] = {}
    held = 0  # slots of branches that suspended
    while pending or running:
        while pending and len(running) + held < limit and call.may_run(parent):
            i = pending.popleft()
            task = asyncio.ensure_future(_branch(call, parent, scopes[i], items[i]))
            running[task] = scopes[i]
        if not running:
            return
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            scope_id = running.pop(task)
            task.result()
            if call.branch_result(scope_id) is None:
                held += 1


def _settled(call: Call, scopes: list[str]) -> list[Any]:
    """The branches' results in input order; the first failure raised."""
    out: list[Any] = []
    for s in scopes:
        rec = call.branch_result(s)
        if rec is None:
            raise WorkflowError(f"branch {s} has no result", code=DurableCode.JOURNAL_INCOMPLETE)
        if rec.status == "error":
            error = dict(rec.error or {})
            if rec.ends:  # a one-step branch's step: the failure names it
                error.setdefault("step", rec.name)
            raise StepFailed(str(error.get("step") or s), error)
        out.append(rec.value)
    return out


async def _branch(call: Call, parent: Scope, scope_id: str, item: Branch) -> None:
    """Run one branch in its own scope (its own task: its own current scope)."""
    if call.branch_result(scope_id) is not None:
        return
    sub = Scope(scope_id, now=parent.now, last_started=parent.last_started)

    async def run() -> None:
        tokens = call.enter(sub)
        try:
            if isinstance(item, StepCall):
                value = await run_step(item, ends_branch=True)
            else:
                value = await item()
            value = roundtrip(value, f"the value branch {scope_id} returned", call.max_value)
            status, error = "ok", None
        except Suspend:
            return
        except StepFailed as exc:
            value, status, error = None, "error", {**exc.error, "step": exc.step}
        except Exception as exc:
            value, status = None, "error"
            error = {"code": getattr(exc, "code", DurableCode.BRANCH_FAILED),
                     "message": f"{type(exc).__name__}: {exc}"}
        finally:
            call.leave(tokens)
        if call.branch_result(scope_id) is not None:
            return  # a one-step branch: its step's entry is its result
        place = Place(scope_id, RESULT_POS, f"{scope_id}#result", "result", "result")
        call.record(sub, place.entry(status=status, value=value, error=error,
                                     started=parent.now, ended=call.clock()))

    await asyncio.create_task(run())
