"""A stateless functions app for the emulated Lambda mode's tests: it must behave the
same in every container, so whatever varies comes from the request itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp, RetryableError, StepRequest

__all__ = ["create_app"]


@workflow("greet")
async def greet(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """Every kind of wait, through the Lambda handlers: a step, a sleep (a timer through
    the timer queue), a signal, and parallel branches (each its own invocations)."""
    name = await step("name", lambda: str(payload.get("name", "world")))
    await ctx.sleep("1s")
    go = await ctx.wait_for_signal("go", timeout="60s")

    def shout(i: int) -> Any:
        return step(f"shout-{i}", lambda: f"{name}!{i}")

    shouts = await ctx.parallel([shout(i) for i in range(3)], max_parallel=2)
    return {"hello": name, "go": go, "shouts": shouts}


def create_app(secret: str | Sequence[str] | None = None) -> FunctionApp:
    app = FunctionApp(secret, title="lambda-test")
    app.workflow(greet)

    @app.step("/echo")
    def echo(req: StepRequest) -> dict[str, Any]:
        return {"input": req.input, "steps": sorted(req.steps), "attempt": req.attempt}

    @app.step("/flaky")
    def flaky(req: StepRequest) -> dict[str, Any]:
        # Fails its first attempt, succeeds from the second: a retry through the timers.
        if req.attempt < 2:
            raise RetryableError("not yet")
        return {"attempt": req.attempt}

    return app
