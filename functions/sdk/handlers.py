"""Running one step handler, sync or async, and turning its outcome into the answer:
its value (200), a deliberate failure (its status, Retry-After), anything else (500)."""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from functions.sdk.failures import RetryableError, _DeliberateFailure
from functions.sdk.request import StepRequest
from functions.sdk.responses import dumps, error

__all__ = ["Handler", "StepRoute", "answer"]

# The name the SDK always logged under (it was one module, functions/sdk.py).
logger = logging.getLogger("functions.sdk")

Handler = Callable[[StepRequest], Any]


@dataclass(frozen=True)
class StepRoute:
    """A registered step route: its path, handler, and what /openapi.json says of it."""

    path: str
    handler: Handler
    summary: str | None
    description: str | None


async def answer(route: StepRoute, req: StepRequest) -> Response:
    """Run `route`'s handler on `req`; the answer to send."""
    try:
        result = await _invoke(route.handler, req)
    except _DeliberateFailure as exc:
        extra = {}
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            extra["Retry-After"] = str(math.ceil(exc.retry_after))
        return error(exc.status_code, exc.code, exc.message, exc.retryable, exc.details, extra)
    except Exception as exc:
        # Exception, not BaseException: cancellation and shutdown must propagate.
        logger.exception("%s failed (run %s, step %s)", route.path, req.run_id, req.step)
        return error(500, "unhandled_exception", f"{type(exc).__name__}: {exc}", True)

    try:
        content = dumps(result)
    except Exception as exc:
        logger.exception("%s returned a value that is not JSON", route.path)
        return error(
            500,
            "invalid_output",
            f"{route.path} returned {type(result).__name__}, which is not JSON: {exc}",
            retryable=True,
        )
    return Response(content, status_code=200, media_type="application/json")


async def _invoke(handler: Handler, req: StepRequest) -> Any:
    if _is_async(handler):
        result = await handler(req)
    else:
        result = await run_in_threadpool(handler, req)
    if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
        result = await result
    return result


def _is_async(obj: object) -> bool:
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    # A callable object whose __call__ is async.
    call = None if inspect.isroutine(obj) else inspect.getattr_static(type(obj), "__call__", None)
    return inspect.iscoroutinefunction(call)
