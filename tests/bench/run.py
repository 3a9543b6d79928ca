"""Benchmarks on the embedded stack (moto, DynamoDB serialized; called in-process as by
`orchestrator dev`, or over HTTP with --transport http) with no-op functions. Figures,
not pass/fail timing:

  W1  a chain of 100 steps: per-step overhead (ms)
  W2  a fan-out of 500 steps into one join: steps/s
  W3  50 concurrent runs of a 5-step chain: steps/s
  R   AWS requests per step by operation (botocore events: the worker's and the run
      starts'; the sweeper's idle passes are tests/bench/sweep.py's), 10- and 1,000-step
      fan-outs
  M   worker peak RSS (a separate `orchestrator worker` process running W2)
  H1  webhook to first step: a signed delivery POSTed to the API until the run's first
      step reaches its function, one delivery at a time (each after the previous run
      finished), on tables of their own:
      p50 / p99 (ms)
  H2  sustained webhook intake: signed deliveries from 8 concurrent senders, each
      accepted (202) with its run started: deliveries/s, and AWS requests per delivery
  D1  a durable chain of 100 no-op steps (functions/examples/noop.py's noop-chain):
      per-step overhead (ms) and its ratio to W1 and to the floor, HTTP calls per step
      (at most one: protocol 2 streams many steps per call) and AWS requests per step
      (target: at most 1.2)
  D2  a durable ctx.parallel of 200 no-op branches, 20 at a time: steps/s, AWS
      requests and HTTP calls per branch
  D3  replay inside the SDK of a 1,000- and a 10,000-operation journal (ms; linear)
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
from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import (  # noqa: E402
    Emulator,
    calm_collector,
    keep_to_one_core,
    speedups,
)
from infra.emulator.capabilities import versions  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import Clients, make_clients  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402


def moto_version() -> str:
    return versions()["moto"]


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
    out = ["backends:", "  fn: { url: \"${FN}\" }", "  stamp: { url: \"${STAMP}\" }",
           "webhooks:", "  bench:", "    workflow: hooked",
           f"    verify: {{ scheme: github, secrets: [\"{HOOK_SECRET}\"] }}", "workflows:",
           "  hooked:", "    steps:", "      first: { backend: stamp, route: /stamp }"]
    out += ["  w1:", "    steps:", chain(sizes["w1"])]
    out += ["  w2:", "    steps:", fan(sizes["w2"])]
    out += ["  w3:", "    steps:", chain(5)]
    for n in (10, sizes["r_large"]):
        out += [f"  fan{n}:", "    steps:", fan(n)]
    out += ["  dchain: { backend: fn, workflow: noop-chain }",
            "  dpar: { backend: fn, workflow: noop-parallel }"]
    return "\n".join(out) + "\n"


class CallCounter:
    """Counts the durable workflow calls an ASGI app answers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path", "").startswith("/durable/"):
            with self.lock:
                self.calls += 1
        await self.app(scope, receive, send)

    def take(self) -> int:
        with self.lock:
            out, self.calls = self.calls, 0
        return out


def replay_ms(ops: int, rounds: int = 3) -> float:
    """D3: the best of `rounds` replays of an `ops`-step noop-chain journal (no body runs)."""
    import asyncio

    from functions.examples.noop import noop_chain
    from functions.sdk.durable.call import op_id

    journal = [{"scope": "", "pos": i, "id": op_id("", f"s{i}", 0), "kind": "step",
                "name": f"s{i}", "status": "ok", "value": {"ok": True}} for i in range(ops)]
    body = {"run": {"run_id": "replay", "started_at": 1.0, "now": 2.0},
            "input": {"steps": ops}, "journal": journal}
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        answer = asyncio.run(advance_call(noop_chain, body))
        best = min(best, time.perf_counter() - t0)
        if answer["ops"] != [{"op": "complete", "value": ops}]:
            raise SystemExit(f"replay of {ops} operations did not complete: {answer['ops'][:2]}")
    return best * 1000


async def advance_call(wf: Any, body: dict[str, Any]) -> dict[str, Any]:
    from functions.sdk.durable.workflow import advance

    return await advance(wf, body)


HOOK_SECRET = "bench-secret"


class Stamps:
    """A function that notes when each run's first step reached it."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.cond = threading.Condition()

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def stamp(request: Request) -> JSONResponse:
            at = time.time()
            run_id = (await request.json())["run"]["run_id"]
            with self.cond:
                self.arrived.setdefault(run_id, at)
                self.cond.notify_all()
            return JSONResponse({"ok": True})

        return Starlette(routes=[Route("/stamp", stamp, methods=["POST"])])

    def wait(self, run_id: str, timeout: float = 30.0) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: run_id in self.arrived, timeout):
                raise SystemExit(f"webhook run {run_id} never reached its first step")
            return self.arrived[run_id]


def webhook_latency(api_url: str, stamps: Stamps, n: int) -> list[float]:
    """H1: ms from sending a delivery to its first step's call, one at a time."""
    from orchestrator.webhook_signing import sign

    out = []
    with httpx.Client(base_url=api_url, timeout=30) as http:
        for i in range(n + 3):
            body = json.dumps({"i": i, "kind": "latency"}).encode()
            headers = sign("github", HOOK_SECRET, body, now=time.time())
            t0 = time.time()
            resp = http.post("/webhooks/bench", content=body, headers=headers)
            if resp.status_code != 202:
                raise SystemExit(f"webhook refused: {resp.status_code} {resp.text}")
            arrived = stamps.wait(resp.json()["run_id"])
            if i >= 3:  # warm-up excluded
                out.append((arrived - t0) * 1000)
            time.sleep(0.25)  # the previous run finishes first: latency, not backlog
    return out


def webhook_intake(api_url: str, n: int, senders: int = 8) -> float:
    """H2: deliveries/s accepted by the API (each a signed POST that starts a run)."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.webhook_signing import sign

    bodies = [json.dumps({"i": i, "kind": "intake"}).encode() for i in range(n)]
    local = threading.local()

    def send(body: bytes) -> int:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=api_url, timeout=60)
        headers = sign("github", HOOK_SECRET, body, now=time.time())
        return int(local.http.post("/webhooks/bench", content=body, headers=headers)
                   .status_code)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=senders) as pool:
        codes = list(pool.map(send, bodies))
    took = time.perf_counter() - t0
    if set(codes) != {202}:
        raise SystemExit(f"intake refused deliveries: {Counter(codes)}")
    return n / took


# How the parts under test reach the emulator: in-process, as `orchestrator dev`'s own
# parts do (the default), or over HTTP, as another process's do (--transport http).
TRANSPORT: dict[str, Any] = {"emulator": None}
# Whether the in-process stack keeps to one core, as `orchestrator dev` does (--all-cores).
ONE_CORE = {"on": True}


def connect(settings: Settings) -> Clients:
    clients = make_clients(settings)
    if TRANSPORT["emulator"] is not None:
        TRANSPORT["emulator"].attach(clients)
    return clients


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


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
def stack(settings: Settings, manifest: str, fn_url: str, stamp_url: str,
          workers: int, threads: int) -> Iterator[tuple[Runtime, Runtime, RequestCounter]]:
    """(runtime under test with counted clients, an uncounted observer, counter)."""
    clients = connect(settings)
    deploy_data_stack(clients, settings.prefix)
    m = manifest_from_text(manifest, "bench.yml", ROOT, {"FN": fn_url, "STAMP": stamp_url})
    rt = Runtime.build(settings, m, clients=clients)
    observer = Runtime.build(settings, m, clients=connect(settings))
    counter = RequestCounter(clients)
    stop = threading.Event()
    pool = [threading.Thread(target=rt.worker().run, args=(stop,),
                             kwargs={"threads": threads, "wait": 2}, daemon=True)
            for _ in range(workers)]
    # The sweeper on clients of its own: in a healthy run it only makes its idle passes
    # (16 requests each, whenever they fall; tests/bench/sweep.py measures them), which
    # would otherwise land in one workload's count and not another's.
    sweeping = Runtime.build(settings, m, clients=connect(settings))
    pool.append(threading.Thread(target=sweeping.sweeper().run, args=(stop,), daemon=True))
    if TRANSPORT["emulator"] is not None:
        calm_collector()  # as `orchestrator dev` does once its stack is up
        if ONE_CORE["on"]:
            keep_to_one_core()  # likewise (`orchestrator dev --all-cores` does not)
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


def run_states(observer: Runtime, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """{run id: its row's status, finish time and error}: one BatchGetItem of just those
    attributes, as a dashboard watching many runs would read them (a read of each whole
    row every 50 ms, 400 requests/s for W3's 20 runs, was the bench's own load)."""
    table = observer.settings.names.runs_table
    resp = observer.clients.dynamodb.batch_get_item(RequestItems={table: {
        "Keys": [{"run_id": {"S": r}} for r in run_ids], "ConsistentRead": True,
        "ProjectionExpression": "run_id, #s, finished_at, #e",
        "ExpressionAttributeNames": {"#s": "status", "#e": "error"}}})
    out: dict[str, dict[str, Any]] = {}
    for item in resp["Responses"][table]:
        out[item["run_id"]["S"]] = {
            "status": item["status"]["S"],
            "finished_at": float(item["finished_at"]["N"]) if "finished_at" in item else 0.0,
            "error": item.get("error", {}).get("S"),
        }
    return out


def wait_all(observer: Runtime, run_ids: list[str], timeout: float = 600) -> float:
    """Block until every run finished; returns the last finish time (from the rows)."""
    deadline = time.monotonic() + timeout
    pending = set(run_ids)
    last = 0.0
    while pending:
        if time.monotonic() > deadline:
            raise SystemExit(f"runs still going after {timeout}s: {sorted(pending)[:3]}")
        states = run_states(observer, sorted(pending)[:100])
        for rid, run in states.items():
            if run["status"] not in ("queued", "running"):
                if run["status"] != "success":
                    raise SystemExit(f"run {rid} ended {run['status']}: {run['error']}")
                pending.discard(rid)
                last = max(last, run["finished_at"])
        time.sleep(0.1)  # the finish time is the row's own: polling only notices it
    return last


def timed_run(rt: Runtime, observer: Runtime, workflow: str, runs: int = 1) -> float:
    t0 = time.time()
    ids = [rt.runs.start(workflow, {"i": i})[0].run_id for i in range(runs)]
    return wait_all(observer, ids) - t0


def floor(settings: Settings, fn_url: str, rounds: int) -> dict[str, float]:
    """The raw calls of one step, back to back, on scratch rows in the same emulator."""
    c = connect(settings)
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
               "ORCH_PREFIX": settings.prefix, "FN": fn_url, "STAMP": fn_url,
               "PYTHONPATH": str(ROOT)}
        every_core = set(range(os.cpu_count() or 1))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "worker", "--manifest", str(path),
             "--threads", str(threads)], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # Not the bench's own core: a worker process of its own, as in production.
            preexec_fn=lambda: os.sched_setaffinity(0, every_core))
        try:
            m = manifest_from_text(manifest, "bench.yml", ROOT,
                                   {"FN": fn_url, "STAMP": fn_url})
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
    ap.add_argument("--transport", choices=("in-process", "http"), default="in-process",
                    help="How the stack's own parts reach the emulator (dev: in-process).")
    ap.add_argument("--all-cores", action="store_true",
                    help="Let the in-process stack run on every core (as `orchestrator dev"
                    " --all-cores`); by default it keeps to one, as `dev` does.")
    ap.add_argument("--issue8", action="store_true",
                    help="Issue 8's workloads: W1 a chain of 50, W2 a fan-out of 200, W3 20"
                    " concurrent runs of a 5-step chain.")
    ap.add_argument("--only-w1", action="store_true",
                    help="The floor and W1 alone, as JSON (tests/bench/moto_versions.py).")
    args = ap.parse_args(argv)
    ONE_CORE["on"] = not args.all_cores
    sizes = (
        {"w1": 20, "w2": 50, "w3": 10, "r_large": 100, "floor": 20, "h1": 20, "h2": 40,
         "d1": 20, "d2": 40, "d2_max": 5, "d3": (100, 1000)}
        if args.quick
        else {"w1": 100, "w2": 500, "w3": 50, "r_large": 1000, "floor": 50, "h1": 100,
              "h2": 400, "d1": 100, "d2": 200, "d2_max": 20, "d3": (1000, 10000)}
    )
    if args.issue8:
        sizes.update(w1=50, w2=200, w3=20)
    def say(line: str) -> None:  # progress goes to stderr, figures to stdout
        print(line, file=sys.stderr, flush=True)

    text = manifest_text(sizes)
    results: dict[str, Any] = {"sizes": sizes, "workers": args.workers,
                               "threads": args.threads, "transport": args.transport,
                               "one_core": not args.all_cores}
    stamps = Stamps()
    calls = CallCounter(noop_app())
    with Emulator() as emu, BackgroundServer(calls) as fn, \
            BackgroundServer(stamps.app()) as stamp_fn:
        settings = Settings(endpoint_url=emu.url, prefix="bench", sweep_interval=5.0,
                            api_auth=False)
        TRANSPORT["emulator"] = emu if args.transport == "in-process" else None
        results["moto"] = {"version": moto_version(),
                           "speedups_active": list(speedups.active())}
        with stack(settings, text, fn.url, stamp_fn.url, args.workers, args.threads) as (
                rt, obs, counter):
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
            if args.only_w1:
                print(json.dumps(results, indent=2))
                return 0
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
            say(f"D1 durable chain of {sizes['d1']} …")
            counter.take()
            calls.take()
            t0 = time.time()
            d1_id = rt.runs.start("dchain", {"steps": sizes["d1"]})[0].run_id
            t = wait_all(obs, [d1_id]) - t0
            d1 = t / sizes["d1"] * 1000
            results["d1"] = {"steps": sizes["d1"], "seconds": round(t, 2),
                             "per_step_ms": round(d1, 2),
                             "ratio_to_w1": round(d1 / w1, 2),
                             "ratio_to_floor": round(d1 / fl["total"], 2),
                             "http_calls_per_step": round(calls.take() / sizes["d1"], 3),
                             "requests_per_step": per_step(counter.take(), sizes["d1"])}
            say(f"D2 durable parallel of {sizes['d2']}, {sizes['d2_max']} at a time …")
            t0 = time.time()
            d2_id = rt.runs.start("dpar", {"branches": sizes["d2"],
                                           "max": sizes["d2_max"]})[0].run_id
            t = wait_all(obs, [d2_id]) - t0
            time.sleep(0.2)
            results["d2"] = {"branches": sizes["d2"], "max_parallel": sizes["d2_max"],
                             "seconds": round(t, 2),
                             "steps_per_s": round(sizes["d2"] / t, 1),
                             "http_calls_per_branch": round(calls.take() / sizes["d2"], 3),
                             "requests_per_branch": per_step(counter.take(), sizes["d2"])}
            for n in (10, sizes["r_large"]):
                say(f"R fan-out of {n} …")
                counter.take()
                t = timed_run(rt, obs, f"fan{n}")
                time.sleep(0.2)
                results[f"fan{n}"] = {"steps": n + 2, "seconds": round(t, 2),
                                      "requests_per_step": per_step(counter.take(), n + 2)}
        # Webhooks on tables of their own: the fan-outs above leave thousands of rows,
        # and moto's Query scans a whole table, which is not what a webhook costs.
        from orchestrator.api.app import create_app

        hook_settings = settings.with_(prefix="benchhook")
        with stack(hook_settings, text, fn.url, stamp_fn.url, args.workers, args.threads) as (
                rt, obs, counter), BackgroundServer(create_app(rt)) as api:
            say(f"H1 webhook to first step, {sizes['h1']} deliveries …")
            lat = webhook_latency(api.url, stamps, sizes["h1"])
            p50, p99 = percentile(lat, 50), percentile(lat, 99)
            results["h1"] = {"deliveries": len(lat), "p50_ms": round(p50, 1),
                             "p99_ms": round(p99, 1),
                             "p50_ratio_to_floor": round(p50 / fl["total"], 2),
                             "p99_ratio_to_floor": round(p99 / fl["total"], 2)}
            say(f"H2 webhook intake, {sizes['h2']} deliveries from 8 senders …")
            counter.take()
            rate = webhook_intake(api.url, sizes["h2"])
            intake_counts = counter.take()
            results["h2"] = {"deliveries": sizes["h2"], "per_s": round(rate, 1),
                             "ms_per_delivery": round(1000 / rate, 2),
                             "ratio_to_floor": round(1000 / rate / fl["total"], 2),
                             "requests_per_delivery": per_step(intake_counts,
                                                               sizes["h2"])}
        say("M worker RSS (separate process, W2) …")
        rss_settings = settings.with_(prefix="benchrss")
        deploy_data_stack(make_clients(rss_settings), rss_settings.prefix)
        rss, took = worker_rss(rss_settings, text, fn.url, "w2", args.threads)
        results["worker_peak_rss_mib"] = round(rss, 1)
        results["w2_separate_worker_steps_per_s"] = round(n2 / took, 1)
    say("D3 replay inside the SDK …")
    small_ops, large_ops = sizes["d3"]
    r_small, r_large = replay_ms(small_ops), replay_ms(large_ops)
    results["d3"] = {f"ops_{small_ops}_ms": round(r_small, 1),
                     f"ops_{large_ops}_ms": round(r_large, 1),
                     "ratio": round(r_large / r_small, 2),
                     "ops_ratio": large_ops // small_ops}
    small, large = results["fan10"]["requests_per_step"]["total"], results[
        f"fan{sizes['r_large']}"]["requests_per_step"]["total"]
    results["targets"] = {
        "w1_ratio_le_1.5": results["w1"]["ratio_to_floor"] <= 1.5,
        # Advancing costs O(out-degree): a wide fan-out costs no more per step than a
        # small one (it may cost less: a run's start and finish spread over more steps).
        "requests_per_step_flat_10pct": large <= small * 1.10,
        "requests_per_step_le_6": max(small, large) <= 6,
        "durable_requests_per_step_le_1.2": results["d1"]["requests_per_step"]["total"] <= 1.2,
        # Protocol 2: one call runs the chain until its budget is spent (1 is version 1's).
        "durable_at_most_one_http_call_per_step": results["d1"]["http_calls_per_step"] <= 1.0,
        # Linear: ten times the operations within 1.5 times ten times the time.
        "replay_linear": results["d3"]["ratio"] <= results["d3"]["ops_ratio"] * 1.5,
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
    h1, h2 = r["h1"], r["h2"]
    lines.append(f"H1 webhook to first step: p50 {h1['p50_ms']:.1f} ms "
                 f"({h1['p50_ratio_to_floor']}x floor), p99 {h1['p99_ms']:.1f} ms "
                 f"({h1['p99_ratio_to_floor']}x floor), {h1['deliveries']} deliveries")
    lines.append(f"H2 webhook intake: {h2['per_s']} deliveries/s "
                 f"({h2['ms_per_delivery']:.1f} ms each = {h2['ratio_to_floor']}x floor; "
                 f"{h2['requests_per_delivery']['total']} AWS requests per delivery, "
                 f"counting the runs' steps that ran meanwhile)")
    lines.append(f"worker peak RSS: {r['worker_peak_rss_mib']} MiB "
                 f"(separate process, W2 at {r['w2_separate_worker_steps_per_s']} steps/s)")
    d1, d2, d3 = r["d1"], r["d2"], r["d3"]
    lines.append(f"D1 durable chain of {d1['steps']}: {d1['per_step_ms']:.1f} ms/step "
                 f"= {d1['ratio_to_w1']}x W1 = {d1['ratio_to_floor']}x floor; "
                 f"{d1['http_calls_per_step']} HTTP calls and "
                 f"{d1['requests_per_step']['total']} AWS requests per step")
    lines.append("  " + ", ".join(f"{op} {n}" for op, n in d1["requests_per_step"].items()
                                  if op != "total"))
    lines.append(f"D2 durable parallel of {d2['branches']} ({d2['max_parallel']} at a time): "
                 f"{d2['steps_per_s']} steps/s; {d2['requests_per_branch']['total']} AWS "
                 f"requests and {d2['http_calls_per_branch']} HTTP calls per branch")
    keys = [k for k in d3 if k.startswith("ops_") and k.endswith("_ms")]
    lines.append("D3 replay in the SDK: " + ", ".join(
        f"{k[4:-3]} operations {d3[k]} ms" for k in keys)
        + f" (x{d3['ratio']} for x{d3['ops_ratio']} operations)")
    lines.append("targets: " + ", ".join(f"{k}={'yes' if v else 'NO'}"
                                         for k, v in r["targets"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
