"""One durable workflow, `order`, in three versions of its code, each a FunctionApp of
its own to serve at once (as two deploys of one backend are): v2 changes only what a
step returns (compatible with runs of v1), v3 issues a new step before the wait
(diverging for runs waiting there). Every step body notes which version ran it."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp

SECRET = "versions-secret"
# Backend `shop` in the three versions (${V1}, ${V2}, ${V3}: where each is served), v1
# current, and workflow `order` on it.
MANIFEST = """
backends:
  shop:
    versions: { v1: "${V1}", v2: "${V2}", v3: "${V3}" }
    current: v1
    secret: versions-secret
workflows:
  order: { backend: shop, timeout: 30s }
"""


class Calls:
    """(run, step) -> the versions that ran that step's body."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_run: dict[str, list[tuple[str, int]]] = defaultdict(list)

    def add(self, run_id: str, name: str, version: int) -> None:
        with self.lock:
            self.by_run[run_id].append((name, version))

    def of(self, run_id: str) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.by_run[run_id])


CALLS = Calls()


def create_app(version: int) -> FunctionApp:
    def body(ctx: Context, name: str) -> Any:
        async def run() -> Any:
            CALLS.add(ctx.run_id, name, version)
            return {"step": name, "by": version}
        return run

    @workflow("order")
    async def order(ctx: Context, payload: Any) -> Any:
        await step("reserve", body(ctx, "reserve"))
        if version >= 3:
            await step("audit", body(ctx, "audit"))
        await ctx.wait_for_signal("go")
        charged = await step("charge", body(ctx, "charge"))
        return {"charged_by": charged["by"]}

    app = FunctionApp(secret=SECRET)
    app.workflow(order)
    return app


def waiting_for_signal(store: Any, run_id: str) -> bool:
    """Whether the run's driver waits for a signal, nobody holding it (`store`: a
    Runtime's)."""
    driver = store.drivers.get_driver(run_id)
    return bool(driver is not None and driver.waiting and driver.lease_owner is None
                and driver.waiting.get("kind") == "signal")
