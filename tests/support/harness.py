"""An orchestrator assembled for a test: a fresh set of tables and queues (own prefix)
in the shared emulator (or, with `provision=create_data_resources`, on any endpoint
without CloudFormation), the real Runtime, and workers/sweepers as threads."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.stack import deploy_data_stack
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.adapters.store import Lease
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import StepRecord
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.runtime import Runtime
from orchestrator.settings import Settings

# Makes the tables, queues and bucket of template.yaml for a prefix.
Provision = Callable[[Clients, str], object]
# The `build_harness` fixture: (manifest_text, tmp, env, **settings) -> Harness.
BuildHarness = Callable[..., "Harness"]


def fresh_settings(endpoint: str, **overrides: Any) -> Settings:
    base = Settings(
        endpoint_url=endpoint,
        prefix="t" + secrets.token_hex(4),
        sweep_interval=0.5,
        redispatch_after=2.0,
        wake_lag=0.1,
        lease_margin=2.0,
        api_auth=False,  # tests of the keys turn it on
    )
    return base.with_(**overrides) if overrides else base


@dataclass
class Harness:
    rt: Runtime
    threads: list[threading.Thread] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def build(
        cls,
        settings: Settings,
        manifest_text: str,
        tmp: Path,
        env: dict[str, str],
        clients: Clients | None = None,
        provision: Provision = deploy_data_stack,
    ) -> Harness:
        clients = clients or make_clients(settings)
        provision(clients, settings.prefix)
        manifest = manifest_from_text(manifest_text, "orchestrator.yml", tmp, env)
        return cls(Runtime.build(settings, manifest, clients=clients))

    def start_workers(self, n: int = 1, threads: int = 4, **kwargs: Any) -> list[Any]:
        workers = []
        for _ in range(n):
            w = self.rt.worker(**kwargs)
            workers.append(w)
            t = threading.Thread(
                target=w.run, args=(self.stop,), kwargs={"threads": threads, "wait": 1}, daemon=True
            )
            t.start()
            self.threads.append(t)
        return workers

    def start_sweeper(self) -> None:
        t = threading.Thread(target=self.rt.sweeper().run, args=(self.stop,), daemon=True)
        t.start()
        self.threads.append(t)

    def start(self, workflow: str, input: Any = None) -> str:
        run, _ = self.rt.runs.start(workflow, input)
        return run.run_id

    def wait(self, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        view = self.rt.runs.view(run_id)
        while view["status"] in ("queued", "running"):
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still running after {timeout}s: {view}")
            time.sleep(0.05)
            view = self.rt.runs.view(run_id)
        return view

    def wait_for_step(
        self, run_id: str, step: str, statuses: tuple[str, ...], timeout: float = 10.0
    ) -> dict[str, Any]:
        """Poll the run until `step` is in one of `statuses` (e.g. claimed: dispatched)."""
        deadline = time.monotonic() + timeout
        while True:
            row = steps_of(self.rt.runs.view(run_id))[step]
            if row["status"] in statuses:
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"{run_id}/{step} still {row['status']} after {timeout}s")
            time.sleep(0.02)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)


def claim_step(rt: Runtime, run_id: str, step: str, attempt: int, lease: Lease,
               now: float) -> StepRecord:
    """Claim one attempt by hand, as a worker would: a root its run's start left out
    (engine.plan) is created by its claim (ConditionFailed as `claim` raises it)."""
    run = rt.store.runs.get_run(run_id, now)
    plan = RunContext.of(run).plan(step) if run is not None and attempt == 1 else None
    if plan is not None and not plan.deps:
        row = rt.store.steps.claim_planned(plan, lease, now, ready_at=None)
        if row is not None:
            return row
    return rt.store.steps.claim(run_id, step, attempt, lease, now)


def steps_of(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in view["steps"]}
