"""The deploy in the middle of the faults, as an operator would do it through the API:

1. at a seeded time, `POST /versions/dfn/v2/promote` (v2 is a compatible change: every
   open run checked against it moves, new runs start there), again until it answers
   `promoted` (a 5xx or no answer: the API is down, it is sent again);
2. later, `POST /versions/dfn/v3/promote` (v3 breaks the runs past their first step):
   once as is (refused while an open run diverges: nothing moves, v2 stays current),
   then with `pin_incompatible` (the compatible runs move, the others stay pinned).

Every answer is a line of deploy.jsonl (what was sent, when, and what the API said),
which the checker reads beside the runs' `run.migrated` entries."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tests.chaos.durable_app import INCOMPATIBLE
from tests.chaos.jsonl import JsonlWriter
from tests.chaos.workloads import DURABLE_BACKEND

__all__ = ["COMPATIBLE", "DeployPlan", "deploy", "deploy_plan"]

COMPATIBLE = "v2"
# A promotion checks every open run and moves them (settling busy ones up to 10 s).
PROMOTE_TIMEOUT = 60.0


@dataclass(frozen=True)
class DeployPlan:
    compatible_at: float  # seconds after the workload starts
    incompatible_at: float

    def describe(self) -> dict[str, Any]:
        return {"kind": "deploy", COMPATIBLE: self.compatible_at,
                INCOMPATIBLE: self.incompatible_at}


def deploy_plan(seed: int, duration: float) -> DeployPlan:
    """When the seed's deploy promotes each version: both while the faults go, the
    compatible one while runs are still being started."""
    rng = random.Random(f"{seed}/deploy")
    return DeployPlan(round(rng.uniform(0.2, 0.45) * duration, 2),
                      round(rng.uniform(0.55, 0.8) * duration, 2))


def promote(api: str, version: str, *, pin: bool, out: JsonlWriter, deadline: float,
            until_promoted: bool, halt: threading.Event) -> dict[str, Any] | None:
    """POST the promotion until it is answered (and, `until_promoted`, promoted); each
    answer written to `out`. The last answer's body, or None."""
    path = f"{api}/versions/{DURABLE_BACKEND}/{version}/promote"
    tries = 0
    with httpx.Client(timeout=PROMOTE_TIMEOUT) as client:
        while not halt.is_set():
            tries += 1
            sent = time.time()
            record: dict[str, Any] = {"ev": "promote", "version": version, "pin": pin,
                                      "t": sent, "try": tries}
            try:
                resp = client.post(path, json={"pin_incompatible": pin})
            except httpx.HTTPError as exc:
                out.write({**record, "answered": None, "error": type(exc).__name__})
            else:
                doc = resp.json() if resp.headers.get("content-type", "").startswith(
                    "application/json") else {}
                out.write({**record, "answered": time.time(), "status": resp.status_code,
                           "promoted": doc.get("promoted"), "current": doc.get("current"),
                           "moved": doc.get("moved"), "busy": doc.get("busy"),
                           "pinned": doc.get("pinned"),
                           "diverging": [d.get("run_id") for d in doc.get("diverging") or ()],
                           "unchecked": [d.get("run_id") for d in doc.get("unchecked") or ()],
                           "error": doc.get("error")})
                if resp.status_code < 500 and (doc.get("promoted") or not until_promoted
                                               or resp.status_code != 200):
                    return dict(doc)
            if time.time() > deadline:
                return None
            time.sleep(0.5)
    return None


def deploy(api: str, plan: DeployPlan, out: JsonlWriter, deadline: float,
           halt: threading.Event, log: Callable[[str], None] = lambda _: None) -> None:
    """The deploy of `plan`, its times counted from now (the workload's start)."""
    start = time.monotonic()

    def at(seconds: float) -> bool:
        return not halt.wait(max(0.0, start + seconds - time.monotonic()))

    if not at(plan.compatible_at):
        return
    done = promote(api, COMPATIBLE, pin=False, out=out, deadline=deadline,
                   until_promoted=True, halt=halt)
    log(f"deploy: {COMPATIBLE} {'promoted' if done and done.get('promoted') else 'NOT promoted'}"
        f" ({len((done or {}).get('moved') or ())} runs moved)")
    if not at(plan.incompatible_at):
        return
    refused = promote(api, INCOMPATIBLE, pin=False, out=out, deadline=deadline,
                      until_promoted=False, halt=halt)
    pinned = promote(api, INCOMPATIBLE, pin=True, out=out, deadline=deadline,
                     until_promoted=True, halt=halt)
    log(f"deploy: {INCOMPATIBLE} as is: promoted={(refused or {}).get('promoted')}"
        f" ({len((refused or {}).get('diverging') or ())} diverging); with"
        f" pin_incompatible: promoted={(pinned or {}).get('promoted')},"
        f" {len((pinned or {}).get('moved') or ())} moved,"
        f" {len((pinned or {}).get('pinned') or ())} pinned")
