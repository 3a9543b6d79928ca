"""Figures of flow control for many tenants (issue 41): admissions per second with
runs queued over 100 keys, the time a newcomer waits behind one tenant's backlog, and
what an admitted run costs on AWS.

With `--dev`, the stack is `orchestrator dev` itself, as a user starts it (its own
process; its embedded emulator in another, given an AWS model with no latency and no
throttling so that it counts every request: GET /_aws_model/stats). Without it, the
same parts in this process, so that botocore's own events count the requests and time
them: the embedded emulator, a worker (8 threads) and a sweeper, the HTTP API served by
uvicorn. Either way the functions are served by uvicorn here, and everything is driven
through the API over HTTP, as a user drives it.

    python tests/bench/flow.py [--dev] [--sizes 100,1000,10000] [--backlog 1000,10000]
                               [--json out.json]

- **admissions**: `plug` runs (an approval gate) fill a group of 8; n runs of `fair`
  (the same group, then 8 a tenant; one quick step) are queued over min(n, 100)
  tenants; the plugs are cancelled, and the figure is n over the time from then to the
  last run's end. Requests per admitted run: those of the drain over n, less those of n
  runs of `free` (the same step, no limit): what admission adds.
- **fairness**: tenant A queues k runs of `fair`, then B queues one; the figure is how
  many runs started between B's arrival and its start (the bound: 8) and how long B
  waited; `fifo` (one group of 8, no turns) the same, for comparison.
- **backend limits** (`--backend-runs`): chains on a backend without limits and on one
  with a limit never reached: what a limited call adds, in requests (by operation), in
  ms a step, and in the process's CPU a step (the bench runs on one core: a step's time
  is mostly the CPU of every chain's steps, taken in turn).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import Emulator  # noqa: E402
from tests.bench.coordination import BenchStack, dollars_per_million, until  # noqa: E402
from tests.bench.scripts_dev import _rss_mb  # noqa: E402
from tests.support.testfns import Recorder  # noqa: E402
from tests.support.testfns import create_app as testfns_app  # noqa: E402

SLOTS = 8
STEPS = 20
CHAIN = "\n".join(
    f"      s{i}: {{{{ backend: {{backend}}, route: /echo"
    + (f", dependsOn: [s{i - 1}]" if i else "") + " }}"
    for i in range(STEPS))
MANIFEST = f"""
backends:
  fn: {{ url: "${{FN}}" }}
  lim: {{ url: "${{FN}}", limits: {{ concurrency: 64 }} }}
workflows:
  chainfree:
    steps:
{CHAIN.format(backend="fn")}
  chainlim:
    steps:
{CHAIN.format(backend="lim")}
  plug:
    concurrency: {{ group: pool, limit: {SLOTS} }}
    steps:
      hold: {{ approval: {{ prompt: "hold", timeout: 1h }} }}
  fair:
    concurrency:
      - {{ group: pool, limit: {SLOTS} }}
      - {{ limit: {SLOTS}, key: "${{{{ input.tenant }}}}" }}
    steps:
      go: {{ backend: fn, route: /echo }}
  fifoplug:
    concurrency: {{ group: fifo, limit: {SLOTS} }}
    steps:
      hold: {{ approval: {{ prompt: "hold", timeout: 1h }} }}
  fifo:
    concurrency: {{ group: fifo, limit: {SLOTS} }}
    steps:
      go: {{ backend: fn, route: /echo }}
  free:
    steps:
      go: {{ backend: fn, route: /echo }}
"""


class Timed:
    """The time each DynamoDB request takes, as its thread sees it (botocore's
    `before-call` to `after-call`: sending, the emulator's work, the answer parsed)."""

    def __init__(self, dynamodb: Any) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.spent, self.count = 0.0, 0
        dynamodb.meta.events.register("before-call", self._sent)
        dynamodb.meta.events.register("after-call", self._answered)

    def _sent(self, **_: Any) -> None:
        self.local.sent = time.perf_counter()

    def _answered(self, **_: Any) -> None:
        took = time.perf_counter() - self.local.sent
        with self.lock:
            self.spent += took
            self.count += 1

    def take(self) -> float:
        """The mean in ms since the last take."""
        with self.lock:
            mean = self.spent * 1000 / max(self.count, 1)
            self.spent, self.count = 0.0, 0
        return mean


class Driven:
    """What the bench does through the API (`api`: a client of it)."""

    api: httpx.Client
    counted: Any  # take(): the requests since the last take, by operation

    def start(self, workflow: str, input: Any = None) -> str:
        r = self.api.post("/runs", json={"workflow": workflow, "input": input})
        assert r.status_code in (200, 201), r.text
        return str(r.json()["run_id"])

    def start_many(self, workflow: str, inputs: list[Any]) -> list[str]:
        """In order, four at a time (a user's client that sends in parallel)."""
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda i: self.start(workflow, i), inputs))

    def view(self, run_id: str) -> dict[str, Any]:
        return dict(self.api.get(f"/runs/{run_id}", params={"steps": "false"}).json())

    def ended(self, run_ids: list[str], timeout: float = 3600.0) -> list[dict[str, Any]]:
        """Each run's view once all have ended: the last one is polled (it ends last,
        or near it), then each is read until it has (mostly once), so that polling adds
        about a read a run to the requests counted."""
        def done(run_id: str) -> dict[str, Any] | None:
            v = self.view(run_id)
            return v if v["status"] not in ("queued", "running") else None

        def polled(run_id: str) -> dict[str, Any]:
            while True:
                v = done(run_id)
                if v is not None:
                    return v
                time.sleep(0.25)

        until(lambda: done(run_ids[-1]), timeout)
        return [polled(r) for r in run_ids]

    def plugged(self, workflow: str) -> list[str]:
        plugs = [self.start(workflow) for _ in range(SLOTS)]
        until(lambda: all(self.view(p)["status"] == "running" for p in plugs))
        return plugs

    def unplug(self, plugs: list[str]) -> float:
        began = time.time()
        for p in plugs:
            assert self.api.post(f"/runs/{p}/cancel", json={"reason": "bench"}).status_code \
                == 200
        return began


class Stack(BenchStack, Driven):
    def __init__(self, emulator: Emulator, fn_url: str) -> None:
        super().__init__(emulator, MANIFEST, {"FN": fn_url}, prefix="fl", threads=8,
                         connections=16)
        self.timed = Timed(self.clients.dynamodb)


# The embedded emulator's AWS model with no latency and no throttling: it only counts
# the requests (GET /_aws_model/stats), so `orchestrator dev` runs as it does without one.
COUNTING_MODEL = """
version: 1
latency: {}
dynamodb:
  partition: {read_units_per_second: 1.0e12, write_units_per_second: 1.0e12,
              basis: assumed, source: "bench: counting only"}
  burst_seconds: 1
  units: {write_unit_bytes: 1024, read_unit_bytes: 4096, transaction_factor: 2,
          eventually_consistent_read_factor: 0.5, basis: assumed,
          source: "bench: counting only"}
lambda: {concurrency: 1000, basis: assumed, source: "bench: counting only"}
"""


class ModelCounted:
    """The requests the emulator's model saw since the last `take`, by operation."""

    def __init__(self, emulator: httpx.Client) -> None:
        self.emulator = emulator
        self.last: Counter[str] = self._now()

    def _now(self) -> Counter[str]:
        stats = self.emulator.get("/_aws_model/stats").json()
        return Counter({f"{service}.{op}": int(n)
                        for service, ops in stats["requests"].items() for op, n in ops.items()})

    def take(self) -> Counter[str]:
        now = self._now()
        got, self.last = now - self.last, now
        return got


class DevStack(Driven):
    """`orchestrator dev` as a user starts it, a process of its own (its embedded
    emulator in another, counting the requests), calling the functions served here."""

    def __init__(self, fn_url: str, manifest: str = MANIFEST) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="flow-dev-"))
        (self.work / "orchestrator.yml").write_text(manifest)
        (self.work / "counting.yaml").write_text(COUNTING_MODEL)
        api_port, emu_port = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        env["FN"] = fn_url
        exe = shutil.which("orchestrator") or str(Path(sys.executable).parent / "orchestrator")
        self.log = self.work / "dev.log"
        with open(self.log, "w") as log:
            self.dev = subprocess.Popen(
                [exe, "dev", "--manifest", str(self.work / "orchestrator.yml"),
                 "--port", str(api_port), "--emulator-port", str(emu_port),
                 "--functions", "none", "--no-scripts",
                 f"--aws-model={self.work / 'counting.yaml'}"],
                cwd=self.work, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=120,
                                limits=httpx.Limits(max_connections=16))
        until(self._ready, 300)
        key = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", self.log.read_text())
        if key:
            self.api.headers["Authorization"] = f"Bearer {key.group(1)}"
        self.counted = ModelCounted(httpx.Client(base_url=f"http://127.0.0.1:{emu_port}",
                                                 timeout=60))

    def _ready(self) -> bool:
        if self.dev.poll() is not None:
            raise RuntimeError(f"orchestrator dev exited: {self.log.read_text()[-2000:]}")
        return "Ready." in self.log.read_text()

    def rss_mb(self) -> float:
        """The resident memory of `orchestrator dev` and its children (the emulator)."""
        return round(_rss_mb(self.dev.pid), 1)

    def close(self) -> None:
        os.killpg(self.dev.pid, signal.SIGINT)
        try:
            self.dev.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.dev.pid, signal.SIGKILL)
            self.dev.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def admissions(stack: Driven, n: int) -> dict[str, Any]:
    tenants = min(n, 100)
    inputs = [{"tenant": f"t{i % tenants}"} for i in range(n)]
    stack.counted.take()
    free = stack.ended(stack.start_many("free", inputs))
    base = stack.counted.take()
    assert all(v["status"] == "success" for v in free)
    plugs = stack.plugged("plug")
    stack.counted.take()
    began = time.monotonic()
    ids = stack.start_many("fair", inputs)
    queue_s = time.monotonic() - began
    queued = stack.counted.take()
    assert all(stack.view(r)["status"] == "queued" for r in ids[:: max(1, n // 20)])
    unplugged = stack.unplug(plugs)
    views = stack.ended(ids)
    drain = stack.counted.take()
    assert all(v["status"] == "success" for v in views), [v for v in views
                                                          if v["status"] != "success"][:2]
    last = max(v["finished_at"] for v in views)
    extra = (queued + drain) - base
    memory = {"dev_rss_mb": stack.rss_mb()} if isinstance(stack, DevStack) else {}
    return {**memory,
        "n": n, "tenants": tenants,
        "queued_per_s": round(n / queue_s, 1),
        "admitted_per_s": round(n / (last - unplugged), 1),
        "free_runs_per_s": round(n / (max(v["finished_at"] for v in free)
                                      - min(v["created_at"] for v in free)), 1),
        "requests_per_admission": round(sum(extra.values()) / n, 1),
        "dollars_per_million_admissions": round(dollars_per_million(extra, n), 2),
        "requests_per_run_without_limit": round(sum(base.values()) / n, 1),
        "by_operation": dict(sorted(((k, round(v / n, 2)) for k, v in extra.items()),
                                    key=lambda kv: -kv[1])),
    }


def fairness(stack: Driven, k: int, workflow: str, plug: str) -> dict[str, Any]:
    plugs = stack.plugged(plug)
    a = stack.start_many(workflow, [{"tenant": "A"}] * k)
    b = stack.start(workflow, {"tenant": "B"})
    stack.unplug(plugs)
    [bv] = stack.ended([b])
    # A's runs start in arrival order: those before B are among its first; a FIFO
    # line starts all of A's first, so there every view is read (once all ended).
    views = (stack.ended(a) if workflow == "fifo"
             else [stack.view(r) for r in a[: 4 * SLOTS]])
    before_b = [v for v in views if v["started_at"] is not None
                and bv["created_at"] < v["started_at"] < bv["started_at"]]
    return {"k": k, "workflow": workflow,
            "admissions_before_b": len(before_b),
            "b_waited_ms": round((bv["started_at"] - bv["created_at"]) * 1000, 1)}


def backend_limits(stack: Stack, rec: Recorder, runs: int) -> dict[str, Any]:
    """The same chains of 20 steps on a backend without limits and on one with
    `limits: {concurrency: 64}` (never reached): what taking and giving
    back a slot costs a call. The views are read once the function has seen every
    chain's last step (it records its calls: no request), so that the reads counted
    do not grow with how long the chains took."""
    out: dict[str, Any] = {"runs": runs, "steps": STEPS}
    seen: dict[str, Counter[str]] = {}
    last = f"s{STEPS - 1}"
    for wf in ("chainfree", "chainlim"):
        stack.counted.take()
        stack.timed.take()
        cpu, wall = time.process_time(), time.monotonic()
        ids = stack.start_many(wf, [None] * runs)
        until(lambda ids=ids: all(rec.for_step(r, last) for r in ids))
        views = stack.ended(ids)
        counts = stack.counted.take()
        dynamodb_ms = stack.timed.take()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        assert all(v["status"] == "success" for v in views)
        per = [(v["finished_at"] - v["started_at"]) * 1000 / STEPS for v in views]
        ms = sorted(per)[len(per) // 2]
        requests = sum(counts.values()) / (runs * STEPS)
        seen[wf] = counts
        out[wf] = {"ms_per_step_median": round(ms, 2),
                   "requests_per_step": round(requests, 2),
                   # What a request costs a step's latency, if requests were all of it;
                   # and what a DynamoDB request takes, measured.
                   "ms_per_request": round(ms / requests, 2),
                   "dynamodb_request_ms_mean": round(dynamodb_ms, 2),
                   # The CPU time of this process (every thread: the emulator's, the
                   # worker's, the API's, the functions') a step, and the share of the
                   # phase's wall time it was busy: near 1, the chains' steps queue for
                   # the interpreter, so a step's time is that CPU times the chains.
                   "cpu_ms_per_step": round(cpu * 1000 / (runs * STEPS), 2),
                   "cpu_busy": round(cpu / wall, 2),
                   "dollars_per_million_steps": round(
                       dollars_per_million(counts, runs * STEPS), 2),
                   "by_operation": per_step(counts, runs)}
    out["overhead_ms_per_call"] = round(out["chainlim"]["ms_per_step_median"]
                                        - out["chainfree"]["ms_per_step_median"], 2)
    out["overhead_requests_per_call"] = round(out["chainlim"]["requests_per_step"]
                                              - out["chainfree"]["requests_per_step"], 2)
    # The requests a limited call adds, by operation (negative: it makes fewer).
    extra = Counter(seen["chainlim"])
    extra.subtract(seen["chainfree"])
    out["overhead_by_operation"] = {k: v for k, v in per_step(extra, runs).items() if v}
    return out


def per_step(counts: Counter[str], runs: int) -> dict[str, float]:
    """Requests per step of a chain by operation, most first."""
    return dict(sorted(((k, round(v / (runs * STEPS), 2)) for k, v in counts.items()),
                       key=lambda kv: -kv[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--backlog", default="1000,10000")
    parser.add_argument("--fifo", default="1000", help="backlogs to run FIFO (no turns) too")
    parser.add_argument("--backend-runs", type=int, default=10,
                        help="chains run for the backend limit's overhead (0: none)")
    parser.add_argument("--dev", action="store_true",
                        help="run `orchestrator dev` as a process of its own (admissions and"
                             " fairness; the backend figures need the in-process stack)")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    out: dict[str, Any] = {"admissions": [], "fairness": [], "backend": None,
                           "stack": "orchestrator dev" if args.dev else "in-process"}
    rec = Recorder()
    with ExitStack() as held:
        fn = held.enter_context(BackgroundServer(testfns_app(rec)))
        stack: Stack | DevStack = (DevStack(fn.url) if args.dev
                                   else Stack(held.enter_context(Emulator()), fn.url))
        try:
            if args.backend_runs and isinstance(stack, Stack):
                out["backend"] = backend_limits(stack, rec, args.backend_runs)
                print("backend", json.dumps(out["backend"]), flush=True)
            for n in (int(x) for x in args.sizes.split(",") if x):
                out["admissions"].append(admissions(stack, n))
                print("admissions", json.dumps(out["admissions"][-1]), flush=True)
            fifo = {int(x) for x in args.fifo.split(",") if x}
            for k in (int(x) for x in args.backlog.split(",") if x):
                for wf, plug in (("fair", "plug"), ("fifo", "fifoplug")):
                    if wf == "fifo" and k not in fifo:
                        continue
                    out["fairness"].append(fairness(stack, k, wf, plug))
                    print("fairness", json.dumps(out["fairness"][-1]), flush=True)
        finally:
            stack.close()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
