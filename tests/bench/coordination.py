"""Figures of approvals, locks and state cells (issue 24): the approval round trip, the
lock hand-over, state-cell operations per second, and what each costs on AWS.

The stack is the one `orchestrator dev` runs, in one process so its AWS requests can be
counted with botocore's own events: the embedded emulator, a worker (4 threads) and a
sweeper, the HTTP API served by uvicorn, the functions served by uvicorn; everything is
driven through the API over HTTP, as a user drives it.

    python tests/bench/coordination.py [--sizes 10,100] [--locks 3,10,30] [--json out.json]

- **approval round trip**: n runs each wait at a gate (`approval:` then a step); each
  gate is answered with `POST /runs/{id}/approvals/ask`; the figure is from the answer
  being sent to the next step's start (its row's `started_at`). Requests per approval:
  everything from the runs' start to their end, divided by n, less a run without a gate.
- **lock hand-over**: k runs of one locked step (`lock:` one key) started together; the
  figure is from one holder's section ending to the next one's starting, as the function
  itself saw them (each section holds 20 ms).
- **state cells**: `PUT` then `GET /state/{entity}/{key}` n times (sequential, one
  client), and a durable run of n `ctx.state.incr` (each ends a call: the run goes on in
  the next).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.durable import Context, workflow  # noqa: E402
from functions.sdk import FunctionApp  # noqa: E402
from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import Emulator  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.api.app import create_app  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.services.reads.cost import price_of  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from tests.support.testfns import Recorder  # noqa: E402
from tests.support.testfns import create_app as testfns_app  # noqa: E402

MANIFEST = """
backends:
  fn: { url: "${FN}" }
  app: { url: "${APP}" }
workflows:
  gated:
    steps:
      ask: { approval: { prompt: "Go?", timeout: 1h } }
      go: { backend: fn, route: /echo, dependsOn: [ask] }
  plain:
    steps:
      go: { backend: fn, route: /echo }
  locked:
    steps:
      work: { backend: fn, route: /hold, lock: "bench-lock", payload: { seconds: 0.02 } }
  incr: { backend: app }
"""


@workflow("incr")
async def incr(ctx: Context, payload: Any) -> Any:
    n = int((payload or {}).get("n", 10))
    last = 0
    for _ in range(n):
        last = int(await ctx.state.incr("counter", entity=f"bench-{ctx.run_id}"))
    return {"last": last}


class Counted:
    def __init__(self, clients: Any) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        for service, c in (("dynamodb", clients.dynamodb), ("sqs", clients.sqs),
                           ("s3", clients.s3)):
            c.meta.events.register("before-call", self._on(service))

    def _on(self, service: str) -> Any:
        def count(model: Any, **_: Any) -> None:
            with self.lock:
                self.counts[f"{service}.{model.name}"] += 1
        return count

    def take(self) -> Counter[str]:
        with self.lock:
            out, self.counts = self.counts, Counter()
        return out


def dollars_per_million(counts: Counter[str], per: int) -> float:
    return sum(n * price_of(op) for op, n in counts.items()) / max(per, 1) * 1e6


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def until(check: Any, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long")
        time.sleep(0.05)


class BenchStack:
    """The stack a user runs, in this process: the data stack on the emulator, a
    runtime on `manifest` (its `${...}` from `env`), a worker of `threads` threads and a
    sweeper, and the HTTP API served by uvicorn, its requests counted by operation."""

    def __init__(self, emulator: Emulator, manifest: str, env: dict[str, str], *,
                 prefix: str, threads: int, connections: int | None = None) -> None:
        settings = Settings(endpoint_url=emulator.url, prefix=f"{prefix}{int(time.time())}",
                            api_auth=False, sweep_interval=1.0)
        self.clients = emulator.attach(make_clients(settings))
        deploy_data_stack(self.clients, settings.prefix)
        self.rt = Runtime.build(settings, manifest_from_text(manifest, "bench.yml", ROOT, env),
                                clients=self.clients)
        self.counted = Counted(self.clients)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self.rt.worker().run, args=(self.stop,),
                             kwargs={"threads": threads, "wait": 1}, daemon=True),
            threading.Thread(target=self.rt.sweeper().run, args=(self.stop,), daemon=True)]
        for t in self.threads:
            t.start()
        self.server = BackgroundServer(create_app(self.rt)).start()
        limits = {} if connections is None else {
            "limits": httpx.Limits(max_connections=connections)}
        self.api = httpx.Client(base_url=self.server.url, timeout=120, **limits)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        self.server.stop()


class Stack(BenchStack):
    def __init__(self, emulator: Emulator, fn_url: str, app_url: str) -> None:
        super().__init__(emulator, MANIFEST, {"FN": fn_url, "APP": app_url}, prefix="co",
                         threads=4)

    def start(self, workflow: str, input: Any = None) -> str:
        return str(self.api.post("/runs", json={"workflow": workflow, "input": input}
                                 ).json()["run_id"])

    def wait(self, run_ids: list[str]) -> list[dict[str, Any]]:
        views = []
        for run_id in run_ids:
            views.append(until(lambda r=run_id: (lambda v: v if v["status"] not in (
                "queued", "running") else None)(self.api.get(f"/runs/{r}").json())))
        return views


def steps(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in view["steps"]}


def approvals(stack: Stack, n: int) -> dict[str, Any]:
    stack.counted.take()
    plain = stack.wait([stack.start("plain") for _ in range(n)])
    base = stack.counted.take()
    ids = [stack.start("gated") for _ in range(n)]
    until(lambda: len(stack.api.get("/approvals", params={"limit": 500}).json()["approvals"])
          >= n)
    sent = {}
    began = time.time()
    for run_id in ids:
        sent[run_id] = time.time()
        answered = stack.api.post(f"/runs/{run_id}/approvals/ask", json={"approved": True})
        assert answered.status_code == 200, answered.text
    answer_ms = (time.time() - began) * 1000 / n
    views = stack.wait(ids)
    counts = stack.counted.take()
    assert all(v["status"] == "success" for v in views) and len(plain) == n
    trips = [(steps(v)["go"]["started_at"] - sent[v["run_id"]]) * 1000 for v in views]
    extra = counts - base
    return {"n": n, "round_trip_ms_p50": round(statistics.median(trips), 1),
            "round_trip_ms_p95": round(pct(trips, 95), 1), "answer_api_ms": round(answer_ms, 1),
            "requests_per_approval": round(sum(extra.values()) / n, 1),
            "dollars_per_million_approvals": round(dollars_per_million(extra, n), 2),
            "by_operation": dict(sorted(((k, round(v / n, 2)) for k, v in extra.items()),
                                        key=lambda kv: -kv[1]))}


def locks(stack: Stack, rec: Recorder, k: int) -> dict[str, Any]:
    """The sections' own start and end, as the function saw them (/hold records them)."""
    stack.counted.take()
    tenant = f"lock-{k}"
    ids = [stack.start("locked", {"tenant": tenant}) for _ in range(k)]
    views = stack.wait(ids)
    counts = stack.counted.take()
    assert all(v["status"] == "success" for v in views)
    spans = sorted((start, end) for start, end, _ in rec.held[tenant])
    gaps = [(b[0] - a[1]) * 1000 for a, b in itertools.pairwise(spans)]
    assert all(g >= 0 for g in gaps), "two holders at once"
    return {"k": k, "handover_ms_p50": round(statistics.median(gaps), 1),
            "handover_ms_p95": round(pct(gaps, 95), 1),
            "requests_per_locked_run": round(sum(counts.values()) / k, 1),
            "dollars_per_million_locked_runs": round(dollars_per_million(counts, k), 2)}


def state(stack: Stack, n: int) -> dict[str, Any]:
    stack.counted.take()
    began = time.monotonic()
    for i in range(n):
        stack.api.put(f"/state/bench/k{i}", json={"value": i})
    put_s = time.monotonic() - began
    puts = stack.counted.take()
    began = time.monotonic()
    for i in range(n):
        stack.api.get(f"/state/bench/k{i}")
    get_s = time.monotonic() - began
    gets = stack.counted.take()
    began = time.monotonic()
    [view] = stack.wait([stack.start("incr", {"n": n})])
    run_s = view["finished_at"] - view["created_at"]
    runs = stack.counted.take()
    assert view["output"] == {"last": n}, view
    return {"n": n, "api_put_per_s": round(n / put_s, 1), "api_get_per_s": round(n / get_s, 1),
            "requests_per_put": round(sum(puts.values()) / n, 2),
            "requests_per_get": round(sum(gets.values()) / n, 2),
            "durable_incr_ms_per_op": round(run_s * 1000 / n, 1),
            "durable_incr_per_s": round(n / run_s, 1),
            "requests_per_durable_incr": round(sum(runs.values()) / n, 1),
            "dollars_per_million_durable_incr": round(dollars_per_million(runs, n), 2),
            "dollars_per_million_api_put": round(dollars_per_million(puts, n), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100")
    parser.add_argument("--locks", default="3,10,30")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    app = FunctionApp(None, title="bench")
    app.workflow(incr)
    out: dict[str, Any] = {"approvals": [], "locks": [], "state": []}
    rec = Recorder()
    with Emulator() as emulator, BackgroundServer(testfns_app(rec)) as fn, \
            BackgroundServer(app) as served:
        stack = Stack(emulator, fn.url, served.url)
        try:
            for n in (int(x) for x in args.sizes.split(",")):
                out["approvals"].append(approvals(stack, n))
                out["state"].append(state(stack, n))
            for k in (int(x) for x in args.locks.split(",")):
                out["locks"].append(locks(stack, rec, k))
        finally:
            stack.close()
    for part, rows in out.items():
        for row in rows:
            print(part, json.dumps(row))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
