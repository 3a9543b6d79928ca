"""A stateless functions app for the emulated Lambda mode's tests: it must behave the
same in every container, so whatever varies comes from the request itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from functions.sdk import FunctionApp, RetryableError, StepRequest

__all__ = ["create_app"]


def create_app(secret: str | Sequence[str] | None = None) -> FunctionApp:
    app = FunctionApp(secret, title="lambda-test")

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
