"""The smallest useful function: POST /noop answers {"ok": true}.

The benchmarks use it to measure the orchestrator's own overhead per step, so the
handler is async (no threadpool hop) and does nothing at all."""

from __future__ import annotations

from collections.abc import Sequence

from functions.sdk import FunctionApp, StepRequest

__all__ = ["create_app"]


def create_app(secret: str | Sequence[str] | None = None) -> FunctionApp:
    app = FunctionApp(secret, title="noop")

    @app.step("/noop", summary="Do nothing and succeed.")
    async def noop(req: StepRequest) -> dict[str, bool]:
        return {"ok": True}

    return app
