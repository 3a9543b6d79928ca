"""Functions behind a backend with `limits:`, served by a real FunctionApp over real
HTTP. Each call (a step route's, a fan-out item's, a durable workflow's step body)
counts itself in flight in a `Gauge` while it works, and records when it started, so
tests assert what the backend actually saw: the most calls at once, and the spacing
of their starts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp, RetryableError, StepRequest

__all__ = ["SECRET", "Gauge", "TooManyRequests", "create_app"]

SECRET = "limits-secret"


class TooManyRequests(RetryableError):
    """A backend's "slow down": 429 with Retry-After."""

    status_code = 429


@dataclass
class Gauge:
    lock: threading.Lock = field(default_factory=threading.Lock)
    flying: int = 0
    peak: int = 0
    # (what, wall time) of every call's start, in order.
    starts: list[tuple[str, float]] = field(default_factory=list)
    # Calls per idempotency key (the 429 route answers 429 to a key's first).
    seen: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def enter(self, what: str) -> int:
        with self.lock:
            self.flying += 1
            self.peak = max(self.peak, self.flying)
            self.starts.append((what, time.time()))
            self.seen[what] += 1
            return self.seen[what]

    def leave(self) -> None:
        with self.lock:
            self.flying -= 1

    def reset(self) -> None:
        with self.lock:
            self.flying = self.peak = 0
            self.starts.clear()
            self.seen.clear()

    def times(self, prefix: str = "") -> list[float]:
        with self.lock:
            return sorted(t for what, t in self.starts if what.startswith(prefix))


def create_app(gauge: Gauge) -> FunctionApp:
    app = FunctionApp(secret=SECRET)

    @app.step("/work")
    async def work(req: StepRequest) -> dict[str, Any]:
        """Works for `payload.seconds` (default 0.1), counted in flight meanwhile."""
        gauge.enter(f"{req.run_id}/{req.step}")
        try:
            await asyncio.sleep(float(req.payload.get("seconds", 0.1)))
        finally:
            gauge.leave()
        return {"ok": True}

    @app.step("/busy")
    async def busy(req: StepRequest) -> dict[str, Any]:
        """429 with Retry-After: 1 to a step's first call; then fine."""
        key = f"busy:{req.run_id}/{req.step}"
        if gauge.enter(key) == 1:
            gauge.leave()
            raise TooManyRequests("slow down", retry_after=1)
        gauge.leave()
        return {"ok": True}

    @workflow("worky")
    async def worky(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        """Three step bodies, each counted in flight while it works."""
        for i in range(int(payload.get("steps", 3))):
            await step(f"w{i}", _work(ctx, f"{ctx.run_id}/w{i}",
                                      float(payload.get("seconds", 0.1))))
        return {"done": True}

    def _work(ctx: Context, what: str, seconds: float) -> Any:
        async def body() -> bool:
            gauge.enter(what)
            try:
                await asyncio.sleep(seconds)
            finally:
                gauge.leave()
            return True
        return body

    app.workflow(worky)
    return app
