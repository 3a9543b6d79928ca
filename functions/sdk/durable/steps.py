"""Memoized steps: `@step(name, ...)` on a function, or `step(name, fn, *args)` inline.

Awaiting a step inside a workflow records its result in the run's journal the first
time and hands the recorded result back on every replay; the body runs again only if a
call died before its result was committed (at least once: key side effects on
`ctx.idempotency_key`, the same for every attempt). A retryable failure is retried
after its backoff in a later call; a terminal one (or the last retry's) raises
`StepFailed` where the workflow awaited the step."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from functions.sdk import tracing
from functions.sdk.durable import stubs
from functions.sdk.durable.call import Place, current, roundtrip
from functions.sdk.durable.durations import Duration, seconds
from functions.sdk.durable.errors import StepFailed, Suspend, WorkflowError
from functions.sdk.failures import RetryableError, TerminalError
from functions.sdk.protocol import DurableCode

__all__ = ["StepCall", "StepFunction", "StepInfo", "StepOptions", "current_step", "step"]

BACKOFFS = ("exponential", "linear", "fixed")


@dataclass(frozen=True)
class StepOptions:
    retries: int = 3
    backoff: str = "exponential"
    delay: float = 1.0
    max_delay: float = 300.0
    timeout: float | None = None
    retry_on: tuple[type[BaseException], ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {self.retries!r}")
        if self.backoff not in BACKOFFS:
            raise ValueError(f"backoff must be one of {', '.join(BACKOFFS)}, got {self.backoff!r}")

    def after(self, attempt: int) -> float:
        """Seconds to wait before the attempt after `attempt` (1, 2, ...)."""
        if self.backoff == "exponential":
            wait = self.delay * 2.0 ** (attempt - 1)
        elif self.backoff == "linear":
            wait = self.delay * attempt
        else:
            wait = self.delay
        return min(wait, self.max_delay)


def _options(retries: int, backoff: str, delay: Duration, max_delay: Duration,
             timeout: Duration | None,
             retry_on: type[BaseException] | tuple[type[BaseException], ...] | None
             ) -> StepOptions:
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    first, cap = seconds(delay, "delay"), seconds(max_delay, "max_delay")
    if first > cap:
        raise ValueError(f"delay {delay!r} is longer than max_delay {max_delay!r}, which caps"
                         " every wait: raise max_delay")
    return StepOptions(
        retries=retries, backoff=backoff, delay=first, max_delay=cap,
        timeout=None if timeout is None else seconds(timeout, "timeout", allow_zero=False),
        retry_on=retry_on,
    )


@dataclass(frozen=True)
class StepInfo:
    place: Place
    attempt: int
    idempotency_key: str


_STEP: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar("durable_step",
                                                                       default=None)


def current_step() -> StepInfo | None:
    """The step whose body is running, if any."""
    return _STEP.get()


@dataclass(frozen=True, eq=False)
class StepCall:
    """A step with its arguments, run when awaited (or by ctx.parallel). Calling it adds
    arguments: `await step("x", fn)(item)` is `await step("x", fn, item)`."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: StepOptions = field(default_factory=StepOptions)
    # Display text kept in the step's journal entry (a script's `step NAME --label L`).
    label: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> StepCall:
        return replace(self, args=self.args + args, kwargs={**self.kwargs, **kwargs})

    def __await__(self) -> Generator[Any, None, Any]:
        return run_step(self).__await__()


class StepFunction:
    """A function decorated with `@step`: calling it inside a workflow returns a StepCall
    (await it); `.fn` is the plain function, for tests and for use outside workflows."""

    def __init__(self, name: str, fn: Callable[..., Any], options: StepOptions) -> None:
        self.name = name
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> StepCall:
        return StepCall(self.name, self.fn, args, kwargs, self.options)


def step(
    name: str | Callable[..., Any],
    fn: Callable[..., Any] | None = None,
    /,
    *args: Any,
    retries: int = 3,
    backoff: str = "exponential",
    delay: Duration = "1s",
    max_delay: Duration = "5m",
    timeout: Duration | None = None,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
) -> Any:
    """`@step("name", retries=3, backoff="exponential")` decorates a function as a step;
    `step("name", fn, *args)` is one step call inline. `delay` is the first backoff,
    `max_delay` caps every one; `timeout` bounds one attempt; `retry_on` limits retries
    to those exception types (RetryableError is always retried, TerminalError never).
    Durations are as everywhere in the SDK: text ("500ms", "2s", "5m"), a timedelta, or
    a number of milliseconds."""
    options = _options(retries, backoff, delay, max_delay, timeout, retry_on)
    if callable(name):  # bare @step
        return StepFunction(getattr(name, "__name__", "step"), name, options)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a step needs a non-empty name, got {name!r}")
    if fn is not None:
        return StepCall(name, fn, args, {}, options)
    step_name = name

    def decorate(func: Callable[..., Any]) -> StepFunction:
        return StepFunction(step_name, func, options)

    return decorate


async def run_step(sc: StepCall, *, ends_branch: bool = False) -> Any:
    """Run `sc` as the next operation of the current scope. `ends_branch`: it is a
    parallel branch's only operation, whose outcome is the branch's result (version 2
    records no result entry besides it)."""
    call, scope = current()
    if _STEP.get() is not None:
        raise call.halt(DurableCode.NESTED_OPERATION,
                        f"step {sc.name!r} was started inside the body of step "
                        f"{_STEP.get().place.name!r}: durable operations belong to the workflow")  # type: ignore[union-attr]
    place = call.place(scope, "step", sc.name)
    rec = call.recorded(place)
    if rec is not None:
        return call.outcome(scope, rec)
    if not call.may_run(scope):
        raise call.wait(place, "next")
    call.spend()
    attempt = call.attempts.get(place.id, 0) + 1
    info = StepInfo(place, attempt, f"{call.run_id}:{place.id}")
    ends: dict[str, Any] = {"ends": True} if ends_branch and call.protocol >= 2 else {}
    if sc.label is not None:
        ends["label"] = sc.label
    started = call.clock()
    scope.busy = place
    token = _STEP.set(info)
    try:
        with tracing.step_body_span(call.run_id, place.id, sc.name, attempt):
            value = await _invoke(sc)
        value = roundtrip(value, f"the value step {sc.name!r} returned", call.max_value)
    except Suspend:
        raise
    except Exception as exc:
        error, retryable, hint = _classify(exc, sc.options)
        ended = call.clock()
        if retryable and attempt <= sc.options.retries:
            after = hint if hint is not None else sc.options.after(attempt)
            raise call.wait(place, "retry", attempt=attempt, error=error, after=after,
                            started=started, ended=ended) from None
        call.record(scope, place.entry(status="error", error=error, attempts=attempt,
                                       started=started, ended=ended, **ends))
        raise StepFailed(sc.name, error) from exc
    finally:
        _STEP.reset(token)
        scope.busy = None
    call.record(scope, place.entry(status="ok", value=value, attempts=attempt,
                                   started=started, ended=call.clock(), **ends))
    return value


async def _invoke(sc: StepCall) -> Any:
    fn = stubs.lookup(sc.name) or sc.fn
    if _is_async(fn):
        work: Awaitable[Any] = fn(*sc.args, **sc.kwargs)
    else:
        ctx = contextvars.copy_context()
        work = run_in_threadpool(ctx.run, functools.partial(fn, *sc.args, **sc.kwargs))
    if sc.options.timeout is not None:
        result = await asyncio.wait_for(_awaited(work), sc.options.timeout)
    else:
        result = await _awaited(work)
    return result


async def _awaited(work: Awaitable[Any]) -> Any:
    result = await work
    if inspect.isawaitable(result):  # a lambda or sync wrapper returning a coroutine
        result = await result
    return result


def _is_async(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = None if inspect.isroutine(fn) else inspect.getattr_static(type(fn), "__call__", None)
    return inspect.iscoroutinefunction(call)


def _classify(exc: Exception, options: StepOptions
              ) -> tuple[dict[str, Any], bool, float | None]:
    """The error document of a failed attempt, whether another may follow, and the
    wait the failure asked for (None: the step's backoff)."""
    if isinstance(exc, TerminalError):
        return _doc(exc.code, exc.message, exc.details), False, None
    if isinstance(exc, RetryableError):
        return _doc(exc.code, exc.message, exc.details), True, exc.retry_after
    if isinstance(exc, StepFailed | WorkflowError):
        return _doc(exc.code, str(exc)), False, None
    if isinstance(exc, TimeoutError):
        took = f"the attempt took longer than {options.timeout} s"
        return _doc(DurableCode.STEP_TIMEOUT, took), True, None
    doc = _doc(DurableCode.STEP_ERROR, f"{type(exc).__name__}: {exc}")
    return doc, options.retry_on is None or isinstance(exc, options.retry_on), None


def _doc(code: str, message: str, details: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        try:
            out["details"] = roundtrip(details, "error details")
        except WorkflowError:
            out["details"] = repr(details)
    return out
