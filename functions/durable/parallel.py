"""`ctx.parallel`: branches that advance independently, at most `max_parallel` at once.

Each branch is a scope of its own (`branch_scope`): its operations have their own
places and ids, whatever the order the branches run in. The orchestrator advances each
branch with calls of its own (a call *targets* one scope and runs at most one step body
there), so a slow branch holds no other back. A call that targets the parent runs every
branch up to its frontier, without running any step body, to see which are done; a call
that targets a branch runs only that branch. When a branch's code returns (or raises),
its result is recorded in its scope at RESULT_POS; once every branch has one, the
parallel operation is recorded and the workflow goes on with the results in input
order.

Policy on failure: every branch runs to its end; then the first failed branch (in
input order) raises its error where the workflow awaited ctx.parallel (catch
StepFailed to compensate). Up to MAX_BRANCHES branches per operation: beyond, start
child runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from functions.durable.call import RESULT_POS, Call, Place, Scope, branch_scope, current, roundtrip
from functions.durable.errors import StepFailed, Suspend, WorkflowError
from functions.durable.steps import StepCall, current_step, run_step

__all__ = ["MAX_BRANCHES", "run_parallel"]

MAX_BRANCHES = 1000

Branch = StepCall | Callable[[], Awaitable[Any]]


async def run_parallel(branches: Sequence[Branch], max_parallel: int | None,
                       name: str) -> list[Any]:
    call, scope = current()
    if current_step() is not None:
        raise call.halt("nested_operation", f"parallel {name!r} was started inside a step body")
    items = list(branches)
    if len(items) > MAX_BRANCHES:
        raise call.halt("too_many_branches", f"parallel {name!r} has {len(items)} branches "
                        f"(at most {MAX_BRANCHES}): start child runs with ctx.call instead")
    for i, item in enumerate(items):
        if not (isinstance(item, StepCall) or callable(item)):
            raise call.halt("bad_branch", f"parallel {name!r}: branch {i} is {item!r}, not a "
                            "step or an async callable")
    limit = len(items) if max_parallel is None else max_parallel
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise call.halt("bad_branch", f"parallel {name!r}: max_parallel must be an integer"
                        f" >= 1, got {max_parallel!r}")
    place = call.place(scope, "parallel", name)
    scopes = [branch_scope(scope.id, place.pos, i) for i in range(len(items))]
    rec = call.recorded(place)
    if rec is not None:
        call.outcome(scope, rec)
        return _settled(call, scopes)
    mine = [i for i, s in enumerate(scopes) if call.targets(s)]
    run = mine if mine else list(range(len(items)))
    scope.busy = place
    try:
        await asyncio.gather(*(_branch(call, scope, scopes[i], items[i]) for i in run))
    finally:
        scope.busy = None
    if mine or call.halted:
        raise Suspend()  # a call for one branch ends with it
    if all((s, RESULT_POS) in call.journal for s in scopes) and not call.check:
        call.record(scope, {**place.doc(), "status": "ok", "value": None,
                            "started": scope.now, "ended": call.clock()})
        return _settled(call, scopes)
    raise call.wait(place, "parallel", branches=len(items), max_parallel=limit)


def _settled(call: Call, scopes: list[str]) -> list[Any]:
    """The branches' results in input order; the first failure raised."""
    out: list[Any] = []
    for s in scopes:
        rec = call.journal.get((s, RESULT_POS))
        if rec is None:
            raise WorkflowError(f"branch {s} has no result", code="journal_incomplete")
        if rec.get("status") == "error":
            error = rec.get("error") or {}
            raise StepFailed(str(error.get("step") or s), error)
        out.append(rec.get("value"))
    return out


async def _branch(call: Call, parent: Scope, scope_id: str, item: Branch) -> None:
    """Run one branch in its own scope (its own task: its own current scope)."""
    if (scope_id, RESULT_POS) in call.journal:
        return
    sub = Scope(scope_id, now=parent.now, last_started=parent.last_started)

    async def run() -> None:
        tokens = call.enter(sub)
        try:
            if isinstance(item, StepCall):
                value = await run_step(item)
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
            error = {"code": getattr(exc, "code", "branch_failed"),
                     "message": f"{type(exc).__name__}: {exc}"}
        finally:
            call.leave(tokens)
        place = Place(scope_id, RESULT_POS, f"{scope_id}#result", "result", "result")
        call.record(sub, {**place.doc(), "status": status, "value": value, "error": error,
                          "started": parent.now, "ended": call.clock()})

    await asyncio.create_task(run())
