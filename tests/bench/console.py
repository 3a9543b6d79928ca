"""Figures of the operator's console (issue 42): a search's latency with 1,000 to 100,000
runs stored, and a bulk cancel of 100 to 10,000 runs: time, AWS requests and dollars.

The stack is `orchestrator dev` as a user starts it (its own process, its embedded
emulator in another, given an AWS model with no latency and no throttling so that it
counts every request and the units they are charged: GET /_aws_model/stats), driven
only through its HTTP API.

    python tests/bench/console.py [--stored 1000,10000,100000] [--cancel 100,1000,10000]
                                  [--json out.json]

- **search**: the stack holds n runs of `orders`, each with an input of its own
  (`order` i, `customer` one of 1,000, `region` one of 4) and one in ten failed with a
  timeout. They are written through POST /runs/import (a run pulled from another stack:
  the same run row and search terms a start writes, and no step to run), eight at a
  time: starting 100,000 runs through POST /runs would take this machine ~20 minutes.
  Each query is sent through GET /runs 20 times; the figures are the median and p95 of
  its answer's time, and the requests and dollars a query costs (units as charged).
  Queries: a rare exact value (one run), a common one (n/1,000 runs: a page of 20), a
  word of an error (n/10: a page), the two together, and a `key:value` in any field.
- **bulk cancel**: n runs of `held` queued behind a concurrency limit held by a run
  waiting for an approval, then `POST /bulk-actions {action: cancel, q}` naming them;
  the figure is the time from that request to the job's `done` (the job's page over
  its rate), and the requests and dollars of the whole job per run cancelled.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.sdk.serving import BackgroundServer  # noqa: E402
from orchestrator.prices import PRICES  # noqa: E402
from tests.bench.coordination import pct, until  # noqa: E402
from tests.bench.flow import DevStack  # noqa: E402
from tests.support.testfns import Recorder  # noqa: E402
from tests.support.testfns import create_app as testfns_app  # noqa: E402

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  orders:
    steps:
      take: { backend: fn, route: /echo }
  plug:
    concurrency: { group: pool, limit: 1 }
    steps:
      hold: { approval: { prompt: "hold", timeout: 1h } }
  held:
    concurrency: { group: pool, limit: 1 }
    steps:
      go: { backend: fn, route: /echo }
"""
QUERIES = 20


class Model:
    """The emulator's record: reset, then read (requests by operation, units)."""

    def __init__(self, stack: DevStack) -> None:
        self.emulator = stack.counted.emulator

    def reset(self) -> None:
        self.emulator.post("/_aws_model/reset")

    def read(self) -> dict[str, Any]:
        snap = self.emulator.get("/_aws_model/stats").json()
        sqs = sum(snap["requests"].get("sqs", {}).values())
        dollars = (snap["units"]["write"] * PRICES["dynamodb_write_unit"]
                   + snap["units"]["read"] * PRICES["dynamodb_read_unit"]
                   + sqs * PRICES["sqs_request"])
        return {"requests": snap["requests_total"], "by_op": snap["requests"],
                "write_units": snap["units"]["write"], "read_units": snap["units"]["read"],
                "dollars": dollars}


def template(stack: DevStack) -> dict[str, Any]:
    """A finished run of `orders`, exported: what the seeding imports, renamed."""
    run_id = stack.start("orders", {"order": -1})
    stack.ended([run_id])
    r = stack.api.get(f"/runs/{run_id}/export")
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    doc["rows"], doc["blobs"] = [], {}
    return doc


def seed(stack: DevStack, doc: dict[str, Any], lo: int, hi: int, created: float) -> float:
    """Import runs lo..hi-1 (eight at a time); the runs a second."""
    def one(i: int) -> None:
        run_id = f"orders-seed-{i:07d}"
        run = dict(doc["run"])
        run["run_id"] = {"S": run_id}
        body = {"order": i, "customer": f"c{i % 1000}", "region": f"r{i % 4}"}
        run["input"] = {"S": json.dumps(body)}
        run["created_at"] = {"N": f"{created + i / 1000:.3f}"}
        if i % 10 == 3:
            run["status"] = {"S": "failed"}
            run["error"] = {"S": json.dumps({"code": "timeout", "message":
                                             f"upstream timed out after 30s (shard {i % 7})"})}
        r = stack.api.post("/runs/import", json={**doc, "run_id": run_id, "run": run})
        assert r.status_code == 201, r.text

    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(lo, hi)))
    return (hi - lo) / (time.monotonic() - began)


def search(stack: DevStack, model: Model, n: int) -> dict[str, Any]:
    rare = n // 2
    queries = {
        "rare exact (1 run)": f"input.order = {rare}",
        "common exact (a page)": "input.customer = c7",
        "error word (a page)": 'error ~ "timed"',
        "two clauses (a page)": "input.customer = c13 error ~ timed",
        "key:value, any field": f"order:{rare}",
    }
    out: dict[str, Any] = {}
    for name, q in queries.items():
        times: list[float] = []
        found = 0
        model.reset()
        for _ in range(QUERIES):
            began = time.monotonic()
            r = stack.api.get("/runs", params={"q": q, "limit": 20})
            times.append((time.monotonic() - began) * 1000)
            assert r.status_code == 200, r.text
            found = len(r.json()["runs"])
        cost = model.read()
        out[name] = {"q": q, "found": found, "ms_median": round(statistics.median(times), 1),
                     "ms_p95": round(pct(times, 95), 1),
                     "requests_per_query": round(cost["requests"] / QUERIES, 1),
                     "read_units_per_query": round(cost["read_units"] / QUERIES, 1),
                     "dollars_per_million_queries": round(cost["dollars"] / QUERIES * 1e6, 2)}
        print(f"  {n:>7} stored  {name:<24} {out[name]['ms_median']:>7} ms (p95"
              f" {out[name]['ms_p95']}) {found:>3} found  "
              f"{out[name]['requests_per_query']} req  "
              f"${out[name]['dollars_per_million_queries']}/M", flush=True)
    return out


def bulk_cancel(stack: DevStack, model: Model, n: int, batch: str) -> dict[str, Any]:
    runs = stack.start_many("held", [{"batch": batch, "i": i} for i in range(n)])
    until(lambda: stack.view(runs[-1])["status"] == "queued", 600)
    model.reset()
    began = time.monotonic()
    r = stack.api.post("/bulk-actions", json={"action": "cancel",
                                              "q": f"input.batch = {batch}",
                                              "reason": "bench", "expected": n})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]

    def done() -> dict[str, Any] | None:
        job = stack.api.get(f"/bulk-actions/{job_id}", params={"limit": 1}).json()
        return job if job["status"] == "done" else None

    job = until(done, 3600)
    took = time.monotonic() - began
    cost = model.read()
    assert job["counts"]["done"] == n, job
    assert stack.view(runs[0])["status"] == "killed"
    out = {"runs": n, "seconds": round(took, 2), "runs_per_second": round(n / took, 1),
           "requests_per_run": round(cost["requests"] / n, 1),
           "write_units_per_run": round(cost["write_units"] / n, 1),
           "dollars_per_million_runs": round(cost["dollars"] / n * 1e6, 2),
           "dollars": round(cost["dollars"], 4)}
    print(f"  bulk cancel {n:>6}: {out['seconds']} s, {out['runs_per_second']} runs/s,"
          f" {out['requests_per_run']} req/run, ${out['dollars']}"
          f" (${out['dollars_per_million_runs']}/M runs)", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stored", default="1000,10000,100000")
    ap.add_argument("--cancel", default="100,1000,10000")
    ap.add_argument("--json", dest="out")
    args = ap.parse_args()
    stored = [int(x) for x in args.stored.split(",") if x]
    cancels = [int(x) for x in args.cancel.split(",") if x]
    result: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M"), "search": {},
                              "bulk_cancel": [], "seed_runs_per_second": {}, "rss_mb": {}}
    with BackgroundServer(testfns_app(Recorder())) as fns:
        stack = DevStack(fns.url, MANIFEST)
        try:
            model = Model(stack)
            plug = stack.start("plug")
            until(lambda: stack.view(plug)["status"] == "running")
            for i, n in enumerate(cancels):
                result["bulk_cancel"].append(bulk_cancel(stack, model, n, f"b{i}"))
            result["rss_mb"]["after_cancels"] = stack.rss_mb()
            doc = template(stack)
            created = time.time() - 86400
            have = 0
            for n in stored:
                model.reset()
                rate = seed(stack, doc, have, n, created)
                seeded = model.read()
                result["seed_runs_per_second"][n] = round(rate, 1)
                print(f"seeded {n} runs ({rate:.0f}/s, {seeded['write_units'] / (n - have):.1f}"
                      " write units a run)", flush=True)
                have = n
                result["search"][n] = search(stack, model, n)
                result["rss_mb"][n] = stack.rss_mb()
        finally:
            stack.close()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
