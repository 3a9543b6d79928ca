"""Benchmarks on the embedded stack (moto over HTTP, DynamoDB serialized) with no-op
functions. Figures, not pass/fail timing:

  W1  a chain of 100 steps: per-step overhead (ms)
  W2  a fan-out of 500 steps into one join: steps/s
  W3  50 concurrent runs of a 5-step chain: steps/s
  R   AWS requests per step by operation (botocore events), 10- and 1,000-step fan-outs
  M   worker peak RSS (a separate `orchestrator worker` process running W2)
  F   the floor, measured in the same run: the raw emulator calls one step needs
      (claim and record as conditional writes, a read, send, receive, delete) plus one
      HTTP POST to the no-op function, back to back. Every time is also given as a
      ratio to it.

    python tests/bench/run.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.examples.noop import create_app as noop_app  # noqa: E402
from functions.serving import BackgroundServer  # noqa: E402
from infra.emulator import Emulator  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.aws import Clients, make_clients  # noqa: E402
from orchestrator.manifest import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402


def chain(n: int) -> str:
    lines = ["      s0: { backend: fn, route: /noop }"]
    lines += [f"      s{i}: {{ backend: fn, route: /noop, dependsOn: [s{i - 1}] }}"
              for i in range(1, n)]
    return "\n".join(lines)


def fan(n: int) -> str:
    lines = ["      start: { backend: fn, route: /noop }"]
    lines += [f"      f{i}: {{ backend: fn, route: /noop, dependsOn: [start] }}" for i in range(n)]
    deps = ", ".join(f"f{i}" for i in range(n))
    lines.append(f"      join: {{ backend: fn, route: /noop, dependsOn: [{deps}] }}")
    return "\n".join(lines)


def manifest_text(sizes: dict[str, int]) -> str:
    out = ["backends:", "  fn: { url: \"${FN}\" }", "workflows:"]
    out += ["  w1:", "    steps:", chain(sizes["w1"])]
    out += ["  w2:", "    steps:", fan(sizes["w2"])]
    out += ["  w3:", "    steps:", chain(5)]
    for n in (10, sizes["r_large"]):
        out += [f"  fan{n}:", "    steps:", fan(n)]
    return "\n".join(out) + "\n"


class RequestCounter:
    """Counts AWS requests by operation with botocore's own events."""

    def __init__(self, clients: Clients) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        for c in (clients.dynamodb, clients.sqs, clients.s3):
            c.meta.events.register("before-call", self._on_call)

    def _on_call(self, model: Any, **_: Any) -> None:
        with self.lock:
            self.counts[model.name] += 1

    def take(self) -> Counter[str]:
        with self.lock:
            out, self.counts = self.counts, Counter()
        return out


@contextmanager
def stack(settings: Settings, manifest: str, fn_url: str,
          workers: int, threads: int) -> Iterator[tuple[Runtime, Runtime, RequestCounter]]:
    """(runtime under test with counted clients, an uncounted observer, counter)."""
    clients = make_clients(settings)
    deploy_data_stack(clients, settings.prefix)
    m = manifest_from_text(manifest, "bench.yml", ROOT, {"FN": fn_url})
    rt = Runtime.build(settings, m, clients=clients)
    observer = Runtime.build(settings, m)
    counter = RequestCounter(clients)
    stop = threading.Event()
    pool = [threading.Thread(target=rt.worker().run, args=(stop,),
                             kwargs={"threads": threads, "wait": 2}, daemon=True)
            for _ in range(workers)]
    pool.append(threading.Thread(target=rt.sweeper().run, args=(stop,), daemon=True))
    for t in pool:
        t.start()
    time.sleep(0.5)
    counter.take()
    try:
        yield rt, observer, counter
    finally:
        stop.set()
        for t in pool:
            t.join(timeout=15)


def wait_all(observer: Runtime, run_ids: list[str], timeout: float = 600) -> float:
    """Block until every run finished; returns the last finish time (from the rows)."""
    deadline = time.monotonic() + timeout
    pending = set(run_ids)
    last = 0.0
    while pending:
        if time.monotonic() > deadline:
            raise SystemExit(f"runs still going after {timeout}s: {sorted(pending)[:3]}")
        for rid in list(pending):
            run = observer.store.get_run(rid, time.time())
            if run is not None and run.status.value != "running":
                if run.status.value != "success":
                    raise SystemExit(f"run {rid} ended {run.status.value}: {run.error}")
                pending.discard(rid)
                last = max(last, run.finished_at or 0.0)
        time.sleep(0.05)
    return last


def timed_run(rt: Runtime, observer: Runtime, workflow: str, runs: int = 1) -> float:
    t0 = time.time()
    ids = [rt.runs.start(workflow, {"i": i})[0].run_id for i in range(runs)]
    return wait_all(observer, ids) - t0


def floor(settings: Settings, fn_url: str, rounds: int) -> dict[str, float]:
    """The raw calls of one step, back to back, on scratch rows in the same emulator."""
    c = make_clients(settings)
    table = settings.names.steps_table
    # A scratch queue: the workers poll the real one and would take the message.
    q = c.sqs.create_queue(QueueName=f"{settings.prefix}-floor")["QueueUrl"]
    http = httpx.Client()
    body = json.dumps({"input": {}, "run": {"run_id": "floor", "workflow": "floor",
                                            "step": "s", "attempt": 1}}).encode()
    samples: dict[str, list[float]] = {"aws": [], "post": [], "total": []}
    for i in range(rounds + 3):
        key = {"run_id": {"S": "floor"}, "step": {"S": f"s{i}"}}
        c.dynamodb.put_item(TableName=table, Item={**key, "status": {"S": "ready"},
                                                    "attempt": {"N": "1"}})
        t0 = time.perf_counter()
        c.sqs.send_message(QueueUrl=q, MessageBody='{"run_id":"floor","step":"s","attempt":1}')
        msg = c.sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=1, WaitTimeSeconds=1)
        c.dynamodb.update_item(  # claim
            TableName=table, Key=key, UpdateExpression="SET #s = :d, lease_owner = :o",
            ConditionExpression="#s = :r AND attempt = :one",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":d": {"S": "dispatched"}, ":o": {"S": "w"},
                                       ":r": {"S": "ready"}, ":one": {"N": "1"}})
        c.sqs.delete_message(QueueUrl=q, ReceiptHandle=msg["Messages"][0]["ReceiptHandle"])
        c.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)  # inputs
        t1 = time.perf_counter()
        http.post(fn_url + "/noop", content=body, headers={"content-type": "application/json"})
        t2 = time.perf_counter()
        c.dynamodb.update_item(  # record
            TableName=table, Key=key, UpdateExpression="SET #s = :ok, #o = :out",
            ConditionExpression="#s = :d AND lease_owner = :w",
            ExpressionAttributeNames={"#s": "status", "#o": "output"},
            ExpressionAttributeValues={":ok": {"S": "success"}, ":out": {"S": '{"ok":true}'},
                                       ":d": {"S": "dispatched"}, ":w": {"S": "w"}})
        t3 = time.perf_counter()
        if i >= 3:  # warm-up rounds excluded
            samples["aws"].append((t1 - t0) + (t3 - t2))
            samples["post"].append(t2 - t1)
            samples["total"].append(t3 - t0)
    http.close()
    return {k: statistics.median(v) * 1000 for k, v in samples.items()}


def worker_rss(settings: Settings, manifest: str, fn_url: str, workflow: str,
               threads: int) -> tuple[float, float]:
    """Run `workflow` on a separate `orchestrator worker` process; (peak RSS MiB, s)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yml"
        path.write_text(manifest)
        env = {**os.environ, "AWS_ENDPOINT_URL": settings.endpoint_url or "",
               "ORCH_PREFIX": settings.prefix, "FN": fn_url, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "worker", "--manifest", str(path),
             "--threads", str(threads)], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            m = manifest_from_text(manifest, "bench.yml", ROOT, {"FN": fn_url})
            rt = Runtime.build(settings, m)
            time.sleep(1.5)
            took = timed_run(rt, rt, workflow)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = next(int(line.split()[1]) for line in status.splitlines()
                       if line.startswith("VmHWM:"))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    return hwm / 1024, took


def per_step(counts: Counter[str], steps: int) -> dict[str, float]:
    out = {op: round(n / steps, 3) for op, n in sorted(counts.items())}
    out["total"] = round(sum(counts.values()) / steps, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Smaller workloads (CI smoke run).")
    ap.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args(argv)
    sizes = (
        {"w1": 20, "w2": 50, "w3": 10, "r_large": 100, "floor": 20}
        if args.quick
        else {"w1": 100, "w2": 500, "w3": 50, "r_large": 1000, "floor": 50}
    )
    def say(line: str) -> None:  # progress goes to stderr, figures to stdout
        print(line, file=sys.stderr, flush=True)

    text = manifest_text(sizes)
    results: dict[str, Any] = {"sizes": sizes, "workers": args.workers,
                               "threads": args.threads}
    with Emulator() as emu, BackgroundServer(noop_app()) as fn:
        settings = Settings(endpoint_url=emu.url, prefix="bench", sweep_interval=5.0)
        with stack(settings, text, fn.url, args.workers, args.threads) as (rt, obs, counter):
            say("floor …")
            fl = floor(settings, fn.url, sizes["floor"])
            results["floor_ms"] = {k: round(v, 2) for k, v in fl.items()}
            say(f"W1 chain of {sizes['w1']} …")
            t = timed_run(rt, obs, "w1")
            w1 = t / sizes["w1"] * 1000
            results["w1"] = {"steps": sizes["w1"], "seconds": round(t, 2),
                             "per_step_ms": round(w1, 2),
                             "ratio_to_floor": round(w1 / fl["total"], 2),
                             "requests_per_step": per_step(counter.take(), sizes["w1"])}
            n2 = sizes["w2"] + 2
            say(f"W2 fan-out of {sizes['w2']} into one join …")
            t = timed_run(rt, obs, "w2")
            results["w2"] = {"steps": n2, "seconds": round(t, 2),
                             "steps_per_s": round(n2 / t, 1),
                             "per_step_ms": round(t / n2 * 1000, 2),
                             "ratio_to_floor": round(t / n2 * 1000 / fl["total"], 2),
                             "requests_per_step": per_step(counter.take(), n2)}
            n3 = sizes["w3"] * 5
            say(f"W3 {sizes['w3']} concurrent runs of a 5-step chain …")
            t = timed_run(rt, obs, "w3", runs=sizes["w3"])
            results["w3"] = {"steps": n3, "seconds": round(t, 2),
                             "steps_per_s": round(n3 / t, 1),
                             "per_step_ms": round(t / n3 * 1000, 2),
                             "ratio_to_floor": round(t / n3 * 1000 / fl["total"], 2),
                             "requests_per_step": per_step(counter.take(), n3)}
            for n in (10, sizes["r_large"]):
                say(f"R fan-out of {n} …")
                counter.take()
                t = timed_run(rt, obs, f"fan{n}")
                time.sleep(0.2)
                results[f"fan{n}"] = {"steps": n + 2, "seconds": round(t, 2),
                                      "requests_per_step": per_step(counter.take(), n + 2)}
        say("M worker RSS (separate process, W2) …")
        rss_settings = settings.with_(prefix="benchrss")
        deploy_data_stack(make_clients(rss_settings), rss_settings.prefix)
        rss, took = worker_rss(rss_settings, text, fn.url, "w2", args.threads)
        results["worker_peak_rss_mib"] = round(rss, 1)
        results["w2_separate_worker_steps_per_s"] = round(n2 / took, 1)
    small, large = results["fan10"]["requests_per_step"]["total"], results[
        f"fan{sizes['r_large']}"]["requests_per_step"]["total"]
    results["targets"] = {
        "w1_ratio_le_1.5": results["w1"]["ratio_to_floor"] <= 1.5,
        "requests_per_step_equal_10pct": abs(large - small) / small <= 0.10,
        "requests_per_step_le_6": max(small, large) <= 6,
    }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def render(r: dict[str, Any]) -> str:
    fl = r["floor_ms"]
    large = f"fan{r['sizes']['r_large']}"
    lines = [
        f"floor (one step's raw calls + one POST): {fl['total']:.1f} ms "
        f"(AWS {fl['aws']:.1f} ms, POST {fl['post']:.1f} ms)",
        f"W1 chain of {r['w1']['steps']}: {r['w1']['per_step_ms']:.1f} ms/step "
        f"= {r['w1']['ratio_to_floor']}x floor",
        f"W2 fan-out {r['w2']['steps']} steps: {r['w2']['steps_per_s']} steps/s "
        f"({r['w2']['per_step_ms']:.1f} ms/step = {r['w2']['ratio_to_floor']}x floor)",
        f"W3 {r['sizes']['w3']} runs x 5 steps: {r['w3']['steps_per_s']} steps/s "
        f"({r['w3']['per_step_ms']:.1f} ms/step = {r['w3']['ratio_to_floor']}x floor)",
        "AWS requests per step (10-step fan-out | large fan-out):",
    ]
    a, b = r["fan10"]["requests_per_step"], r[large]["requests_per_step"]
    for op in sorted(set(a) | set(b), key=lambda k: (k == "total", k)):
        lines.append(f"  {op:<22} {a.get(op, 0):>7.3f} | {b.get(op, 0):>7.3f}")
    lines.append(f"worker peak RSS: {r['worker_peak_rss_mib']} MiB "
                 f"(separate process, W2 at {r['w2_separate_worker_steps_per_s']} steps/s)")
    lines.append("targets: " + ", ".join(f"{k}={'yes' if v else 'NO'}"
                                         for k, v in r["targets"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
