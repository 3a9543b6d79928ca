"""The sweep's cost against the work in flight, on the embedded emulator: one sweep pass's
wall time and AWS requests with 10, 100 and 1,000 running runs that are all healthy (each
holds one step under a live lease), and with 100 of them that each need one repair (a
lease that expired: its worker died).

    python tests/bench/sweep.py [--sizes 10,100,1000] [--repairs 100] [--passes 5] [--json]

The runs are started through the real RunService and their steps claimed through the
real store; the sweeper runs with a clock ahead of the wall clock (past the runs' own
follow-up wakes and then past the repair leases), so nothing here waits for time."""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.emulator import Emulator  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.adapters.store import Lease  # noqa: E402
from orchestrator.engine.context import RunContext  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from tests.bench.run import RequestCounter  # noqa: E402

MANIFEST = """
backends:
  fn: { url: "http://127.0.0.1:9/never-called" }
workflows:
  hold:
    steps:
      work: { backend: fn, route: /work, timeout: 1h }
      after: { backend: fn, route: /work, dependsOn: [work] }
"""


def make_sweeper(rt: Runtime, clock: Any) -> Any:
    try:
        return rt.sweeper(clock=clock)
    except TypeError:  # before the wake index (to measure the same runs before and after)
        from orchestrator.sweeper import Sweeper

        return Sweeper(rt.executor, plan=rt.runs.rows_for, clock=clock,
                       on_queued=rt.admission.arrive, tasks=(rt.scheduler.tick,))


def measure(url: str, healthy: int, broken: int, passes: int) -> dict[str, Any]:
    # The backstop (a full sweep every ORCH_FULL_SWEEP_EVERY) is kept out of the passes
    # measured here: it costs what every pass cost before the wake index.
    settings = Settings(endpoint_url=url, prefix="sw" + secrets.token_hex(4), api_auth=False,
                        sweep_interval=1.0)
    try:
        settings = settings.with_(full_sweep_every=86400.0)
    except TypeError:
        pass  # before the backstop existed
    clients = make_clients(settings)
    deploy_data_stack(clients, settings.prefix)
    manifest = manifest_from_text(MANIFEST, "sweep.yml", ROOT, {})
    rt = Runtime.build(settings, manifest, clients=clients)
    t0 = time.time()
    ids = [rt.runs.start("hold", {"i": i})[0].run_id for i in range(healthy + broken)]
    for i, run_id in enumerate(ids):
        # A live worker holds each step; the last `broken` ones die: their leases end
        # 300 s from now (the step's 1 h timeout plus a negative margin).
        base = -3600 + 300 if i >= healthy else 0.0
        lease = Lease("bench-worker", t0 + base)
        run = rt.store.runs.get_run(run_id, t0)
        assert run is not None
        # A root its start left out is created by its claim (a plan only since then).
        root = RunContext.of(run).plan("work")
        if root is None or root.deps \
                or rt.store.steps.claim_planned(root, lease, t0, ready_at=None) is None:
            rt.store.steps.claim(run_id, "work", 1, lease, t0)
    rt.clients.sqs.purge_queue(QueueUrl=rt.queues.dispatch_url)
    offset = [30.0]  # past every run's start follow-up (started + settle)
    sweeper = make_sweeper(rt, lambda: time.time() + offset[0])
    counter = RequestCounter(rt.clients)
    sweeper.sweep()  # the follow-up look at each new run: once per run, not per pass
    counter.take()
    times, requests = [], []
    for _ in range(passes):
        offset[0] += settings.sweep_interval
        t = time.perf_counter()
        sweeper.sweep()
        times.append(time.perf_counter() - t)
        requests.append(sum(counter.take().values()))
    out: dict[str, Any] = {
        "runs": healthy + broken,
        "healthy_pass_ms": round(statistics.median(times) * 1000, 1),
        "healthy_requests_per_pass": statistics.median(requests),
    }
    if broken:
        offset[0] = 400.0  # past the broken leases
        t = time.perf_counter()
        report = sweeper.sweep()
        out["repair_pass_ms"] = round((time.perf_counter() - t) * 1000, 1)
        ops: Counter[str] = counter.take()
        out["repair_requests_per_pass"] = sum(ops.values())
        out["repaired"] = report.leases_expired
        out["repair_requests_by_operation"] = dict(ops.most_common())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--repairs", type=int, default=100)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {"healthy": [], "repair": None}
    with Emulator() as emulator:
        for n in sizes:
            results["healthy"].append(measure(emulator.url, n, 0, args.passes))
        if args.repairs:
            results["repair"] = measure(emulator.url, args.repairs, args.repairs, args.passes)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results["healthy"]:
            print(f"{r['runs']:>5} healthy runs: pass {r['healthy_pass_ms']:>7.1f} ms,"
                  f" {r['healthy_requests_per_pass']:>6} requests")
        r = results["repair"]
        if r:
            print(f"{r['runs']:>5} runs, {r['repaired']} repaired: pass"
                  f" {r['repair_pass_ms']:.1f} ms, {r['repair_requests_per_pass']} requests"
                  f" ({r['repair_requests_by_operation']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
