"""The smallest useful function: POST /noop answers {"ok": true}; and the smallest
durable workflows: `noop-chain` (`input.steps` no-op steps one after another) and
`noop-parallel` (`input.branches` no-op steps, `input.max` at a time).

The benchmarks use them to measure the orchestrator's own overhead per step, so the
handlers are async (no threadpool hop) and do nothing at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp, StepRequest

__all__ = ["create_app"]


async def _nothing() -> dict[str, bool]:
    return {"ok": True}


@workflow("noop-chain")
async def noop_chain(ctx: Context, payload: dict[str, Any]) -> int:
    for i in range(int(payload.get("steps", 100))):
        await step(f"s{i}", _nothing)
    return int(payload.get("steps", 100))


@workflow("noop-parallel")
async def noop_parallel(ctx: Context, payload: dict[str, Any]) -> int:
    n = int(payload.get("branches", 200))
    done = await ctx.parallel([step(f"b{i}", _nothing) for i in range(n)],
                              max_parallel=int(payload.get("max", 20)))
    return len(done)


def create_app(secret: str | Sequence[str] | None = None) -> FunctionApp:
    app = FunctionApp(secret, title="noop")
    app.workflow(noop_chain, noop_parallel)

    @app.step("/noop", summary="Do nothing and succeed.")
    async def noop(req: StepRequest) -> dict[str, bool]:
        return {"ok": True}

    return app
