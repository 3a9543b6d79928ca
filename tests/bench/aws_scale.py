"""What users will see in their AWS account (issue 39): the product as a user runs it,
`orchestrator dev --aws-model` (the emulator answering in AWS's time, DynamoDB's
partitions throttled at AWS's rates), driven only through its HTTP API. Figures, not
pass/fail timing.

  w1          a chain of 50 no-op steps, --repeats runs one after the other: step-to-step
              latency (a step's `started_at` minus its predecessor's `finished_at`), ms/step
  start       POST /runs (the client's clock before the POST) to the first step's
              `started_at`, one-step runs, one at a time
  webhook     the same, started by a signed delivery (POST /webhooks/{name}, github scheme)
  durable     a durable Python chain of N steps (functions.durable): ms/step, wall
  fanout      one run: a root step, N dependants, one join: wall (created_at to
              finished_at), ms/step
  foreach     a schedule's forEach of N rows (a POST answering a JSON array), fired by
              POST /schedules/{name}/trigger, each row a run of one step: wall from the
              trigger to the last run's `finished_at`
  concurrent  N runs of a five-step chain, POSTed by 16 threads: first POST to last end

For each: what the runs cost (`cost` of GET /runs/{id}: the AWS requests the orchestrator
counted, and their dollars), what the model did (GET /_aws_model/stats on the emulator's
port: requests, throttled, the hottest partition's write units), and the BOUND of a scale
workload: its hottest partition's write units at the model's per-partition rate, beside
the wall time (wall / bound near 1: the partition is what limits it). Proof that nothing
was throttled into retries: every run `success`, every step called once (the no-op
function counts calls by the run and step its request body names, and the highest
`attempt` it saw), and the throttled count.

    .venv/bin/python tests/bench/aws_scale.py --quick
    .venv/bin/python tests/bench/aws_scale.py --only fanout,foreach --out scale.json
    .venv/bin/python tests/bench/aws_scale.py --model my_model.yaml --fanout 2000

The machine's load is in every figure: compare within one run."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.emulator.aws_model import DEFAULT_FILE, load  # noqa: E402
from orchestrator.webhook_signing import sign  # noqa: E402

CORES = os.cpu_count() or 1
# The worker's threads (ORCH_WORKER_THREADS): under the model a step mostly waits on AWS's
# latency, and AWS runs up to 50 worker invocations of 10 records each (template.yaml's
# WorkerMaxConcurrency): more than the default 8 a local worker runs.
WORKER_THREADS = 32
WORKLOADS = ("w1", "start", "webhook", "durable", "fanout", "foreach", "concurrent")
TERMINAL = {"success", "failed", "killed", "skipped", "cancelled"}
HOOK = "bench"
HOOK_SECRET = "aws-scale-secret"
# The runs all_finished waits for at once (each a long poll reading one run's row).
WAITERS = 4
QUICK = {"chain": 50, "repeats": 3, "runs": 10, "durable": 50, "fanout": 200, "foreach": 200,
         "concurrent": 50}

# The function server, started as its own process by the project's python: no-op steps
# that count their calls, the forEach's rows, and the durable chain (the documented SDK).
FUNCTIONS = textwrap.dedent('''
    import sys
    from functools import partial

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from functions.durable import Context, step, workflow
    from functions.sdk import FunctionApp

    calls = {}          # (run id, step) -> calls
    state = {"rows": 0, "max_attempt": 0}


    def _count(run_id, name, attempt=1):
        calls[(run_id, name)] = calls.get((run_id, name), 0) + 1
        state["max_attempt"] = max(state["max_attempt"], int(attempt))


    async def noop(request):
        run = (await request.json()).get("run") or {}
        _count(run.get("run_id"), run.get("step"), run.get("attempt") or 1)
        return JSONResponse({"ok": True})


    async def rows(request):
        await request.body()
        return JSONResponse([{"id": f"row{i:05d}"} for i in range(state["rows"])])


    async def control(request):
        if request.method == "POST":
            body = await request.json()
            calls.clear()
            state.update(max_attempt=0, rows=int(body.get("rows", 0)))
        twice = sum(1 for n in calls.values() if n > 1)
        return JSONResponse({"calls": sum(calls.values()), "steps": len(calls),
                             "called_twice": twice, "max_attempt": state["max_attempt"]})


    async def _nothing(run_id, name):
        _count(run_id, name)
        return {"ok": True}


    @workflow("aws-durable")
    async def durable_chain(ctx: Context, payload):
        for i in range(int(payload["n"])):
            await step(f"s{i}", partial(_nothing, ctx.run_id, f"s{i}"))
        return int(payload["n"])


    durable = FunctionApp(None, title="aws-scale")
    durable.workflow(durable_chain)
    app = Starlette(routes=[Route("/noop", noop, methods=["POST"]),
                            Route("/rows", rows, methods=["POST"]),
                            Route("/_control", control, methods=["GET", "POST"]),
                            Mount("/", app=durable)])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
''')


def chain(n: int, prefix: str = "s") -> dict[str, Any]:
    return {f"{prefix}{i:05d}": {"backend": "fn", "route": "/noop",
                                 **({"dependsOn": [f"{prefix}{i - 1:05d}"]} if i else {})}
            for i in range(n)}


def fan(n: int) -> dict[str, Any]:
    steps: dict[str, Any] = {"root": {"backend": "fn", "route": "/noop"}}
    leaves = [f"f{i:05d}" for i in range(n)]
    steps.update({leaf: {"backend": "fn", "route": "/noop", "dependsOn": ["root"]}
                  for leaf in leaves})
    steps["join"] = {"backend": "fn", "route": "/noop", "dependsOn": leaves}
    return steps


def manifest(sizes: dict[str, int]) -> str:
    one = {"only": {"backend": "fn", "route": "/noop"}}
    doc = {
        "backends": {"fn": {"url": "${FN}"}},
        "webhooks": {HOOK: {"workflow": "one",
                            "verify": {"scheme": "github", "secrets": [HOOK_SECRET]}}},
        "workflows": {
            "chain": {"steps": chain(sizes["chain"])},
            "one": {"steps": one},
            "durable": {"backend": "fn", "workflow": "aws-durable"},
            "fan": {"steps": fan(sizes["fanout"])},
            # Once a year: it runs when the bench triggers it, not by itself.
            "each": {"schedule": {"cron": "0 0 1 1 *"}, "concurrency": "allow",
                     "forEach": {"backend": "fn", "route": "/rows", "key": "id"},
                     "steps": one},
            "five": {"steps": chain(5)},
        },
    }
    # JSON is YAML; compact, as a 10,000-step fan-out is near the manifest limit (1 MB).
    return json.dumps(doc, separators=(",", ":"))


def stop_all(procs: tuple[subprocess.Popen[Any], ...], work: Path) -> None:
    """Interrupt each process's group, kill what is left after 20 s; remove `work`."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    shutil.rmtree(work, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(what: str, check: Callable[[], Any], timeout: float, every: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)


def tree_cpu_seconds(roots: Iterable[int]) -> float:
    """User and system CPU seconds of these processes and their live descendants (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            rest = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            stats[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
        except (OSError, IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children.get(pid, []))
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Stack:
    """`orchestrator dev --aws-model` and the function server, as subprocesses."""

    def __init__(self, orchestrator: str, model: str, sizes: dict[str, int],
                 worker_threads: int | None = None) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="aws-scale-"))
        self.fn_port, self.api_port, self.emu_port = free_port(), free_port(), free_port()
        (self.work / "fn.py").write_text(FUNCTIONS)
        (self.work / "orchestrator.yml").write_text(manifest(sizes))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        env["FN"] = f"http://127.0.0.1:{self.fn_port}"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        if worker_threads is not None:  # as a user sets it (orchestrator/settings.py)
            env["ORCH_WORKER_THREADS"] = str(worker_threads)
        self.log = self.work / "dev.log"
        self.fn = subprocess.Popen([sys.executable, str(self.work / "fn.py"), str(self.fn_port)],
                                   env=env, start_new_session=True)
        with open(self.log, "w") as log:
            self.dev = subprocess.Popen(
                [orchestrator, "dev", "--manifest", str(self.work / "orchestrator.yml"),
                 "--port", str(self.api_port), "--emulator-port", str(self.emu_port),
                 "--functions", "none", "--no-scripts", f"--aws-model={model}"],
                cwd=self.work, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.concurrency: int | None = None
        self.fn_http = httpx.Client(base_url=env["FN"], timeout=60)
        self.emu = httpx.Client(base_url=f"http://127.0.0.1:{self.emu_port}", timeout=60)
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}", timeout=120)

    def wait_ready(self) -> None:
        def up() -> bool:
            if self.dev.poll() is not None:
                raise RuntimeError(f"orchestrator dev exited: {self.log.read_text()[-2000:]}")
            try:
                return self.api.get("/healthz").status_code < 500
            except httpx.HTTPError:
                return False
        until("orchestrator dev's API", up, 300, every=0.2)
        until("orchestrator dev's banner", lambda: "Ready." in self.log.read_text(), 60)
        banner = self.log.read_text()
        key = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", banner)
        if key:
            self.api.headers["Authorization"] = f"Bearer {key.group(1)}"
        # "workers    1 (threads: 8 each)": how many steps the workers call at once.
        workers = re.search(r"workers\s+(\d+) \(threads: (\d+)", banner)
        self.concurrency = int(workers.group(1)) * int(workers.group(2)) if workers else None
        until("the function server", lambda: self._fn_up(), 60, every=0.1)

    def _fn_up(self) -> bool:
        try:
            return self.fn_http.get("/_control").status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        stop_all((self.dev, self.fn), self.work)

    # ---- the API, as a user calls it ----------------------------------------------------

    def start(self, workflow: str, payload: Any = None) -> str:
        r = self.api.post("/runs", json={"workflow": workflow, "input": payload or {}})
        r.raise_for_status()
        return str(r.json()["run_id"])

    def run(self, run_id: str, steps: bool = True) -> dict[str, Any]:
        r = self.api.get(f"/runs/{run_id}", params={"steps": str(steps).lower()})
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    def finished(self, run_id: str, timeout: float) -> dict[str, Any]:
        """The run once terminal (long polls of GET /runs/{id}?wait=), with its steps."""
        def done() -> bool:
            r = self.api.get(f"/runs/{run_id}", params={"steps": "false", "wait": "20"})
            r.raise_for_status()
            return r.json()["status"] in TERMINAL
        until(f"run {run_id}", done, timeout, every=0)
        return self.run(run_id)

    def all_finished(self, run_ids: list[str], timeout: float) -> list[dict[str, Any]]:
        """Each run's view with its steps once it is terminal, in order. A run is asked
        for until it is seen finished, and not after: a long poll of GET /runs/{id}
        (answered as the run ends), WAITERS at a time. Paging through the list of every
        run of the workflow each half second read all of them again and again (100 GETs
        a poll at 10,000 runs), competing with the workload it measured; this is about
        one request per run. The figures come from the runs' own times (`finished_at`),
        whenever they are read."""
        deadline = time.monotonic() + timeout

        def ended(run_id: str) -> dict[str, Any]:
            while True:
                r = self.api.get(f"/runs/{run_id}", params={"steps": "true", "wait": "20"})
                r.raise_for_status()
                view: dict[str, Any] = r.json()
                if view["status"] in TERMINAL:
                    return view
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run {run_id}: not finished after {timeout:.0f} s")

        with ThreadPoolExecutor(WAITERS) as pool:
            return list(pool.map(ended, run_ids))

    def calls(self, rows: int = 0) -> dict[str, Any]:
        """The function's call counts (a POST zeroes them, and sets the forEach's rows)."""
        r = (self.fn_http.post("/_control", json={"rows": rows}) if rows >= 0
             else self.fn_http.get("/_control"))
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def model_stats(self, reset: bool = False) -> dict[str, Any]:
        r = (self.emu.post("/_aws_model/reset") if reset
             else self.emu.get("/_aws_model/stats"))
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out


# ---- what a workload's runs tell -------------------------------------------------------


def cost_of(views: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The runs' `cost` (GET /runs/{id}): AWS requests the orchestrator counted, dollars."""
    requests = 0
    dollars = 0.0
    priced = 0
    for view in views:
        cost = view.get("cost")
        if cost:
            priced += 1
            requests += int(cost.get("total_requests")
                            or sum((cost.get("requests") or {}).values()))
            dollars += float(cost.get("dollars") or 0)
    return {"runs_priced": priced, "aws_requests": requests, "dollars": dollars}


def steps_of(view: dict[str, Any]) -> list[dict[str, Any]]:
    steps = view.get("steps") or []
    if isinstance(steps, dict):
        return [{"step": name, **row} for name, row in steps.items()]
    return list(steps)


def proof(views: list[dict[str, Any]], calls: dict[str, Any], steps: int,
          stats: dict[str, Any]) -> dict[str, Any]:
    """Did every run succeed, every step run once, and nothing get throttled?"""
    attempts = [int(s.get("attempts") or s.get("attempt") or 1)
                for v in views for s in steps_of(v)]
    return {
        "runs": len(views),
        "runs_not_success": sum(1 for v in views if v.get("status") != "success"),
        "steps_expected": steps,
        "steps_called": calls["steps"],
        "calls": calls["calls"],
        "called_twice": calls["called_twice"],
        "max_attempt_sent": calls["max_attempt"],
        "steps_retried": sum(1 for a in attempts if a > 1),
        "throttled": stats["throttled_total"],
    }


def model_figures(stats: dict[str, Any], rate: float) -> dict[str, Any]:
    hottest = (stats["hottest_writes"] or [{"table": "", "key": "", "write_units": 0.0}])[0]
    return {"requests": stats["requests_total"], "throttled": stats["throttled_total"],
            "throttled_by_operation": stats["throttled"],
            "requests_by_service": {s: sum(ops.values()) for s, ops in stats["requests"].items()},
            "write_units": stats["units"]["write"], "read_units": stats["units"]["read"],
            "hottest_partition": f"{hottest['table']} {hottest['key']}",
            "hottest_write_units": hottest["write_units"],
            "bound_s": hottest["write_units"] / rate}


# ---- the workloads ---------------------------------------------------------------------


class Bench:
    def __init__(self, stack: Stack, sizes: dict[str, int], threads: int, rate: float,
                 say: Callable[[str], None]) -> None:
        self.stack = stack
        self.sizes = sizes
        self.threads = threads
        self.rate = rate
        self.say = say

    def measure(self, name: str, body: Callable[[], tuple[dict[str, Any], list[dict[str, Any]],
                                                           int]]) -> dict[str, Any]:
        """Zero the counts, run `body` (its figures, its runs' views, its steps), then add
        the model's record, the cost and the proof."""
        self.stack.calls(0)
        self.stack.model_stats(reset=True)
        self.say(f"{name} …")
        roots = (self.stack.dev.pid, self.stack.fn.pid)
        cpu0 = tree_cpu_seconds(roots)
        figures, views, steps = body()
        cpu = tree_cpu_seconds(roots) - cpu0
        stats = self.stack.model_stats()  # before the proof's own reads
        calls = self.stack.calls(-1)
        out = {**figures, "steps": steps, "model": model_figures(stats, self.rate),
               "cost": cost_of(views), "proof": proof(views, calls, steps, stats)}
        wall = out.get("wall_s")
        if wall:
            out["ms_per_step"] = wall * 1000 / steps
            out["steps_per_s"] = steps / wall
            out["wall_over_bound"] = (wall / out["model"]["bound_s"]
                                      if out["model"]["bound_s"] else None)
        if out.get("worker_concurrency"):
            # The other bound of many runs: their steps' own time (each call's start to its
            # end, as the rows keep it) spread over every worker thread at once.
            busy = sum(row["finished_at"] - row["started_at"] for v in views
                       for row in steps_of(v) if row.get("started_at") and row.get("finished_at"))
            out["concurrency_bound_s"] = busy / out["worker_concurrency"]
            out["wall_over_concurrency_bound"] = (wall / out["concurrency_bound_s"]
                                                  if wall and out["concurrency_bound_s"] else None)
        out["cpu_s"] = cpu
        if wall and out.get("worker_concurrency"):
            # What holds a scale workload back, here: its hottest partition at the model's
            # rate (AWS's bound too), its steps' own time over the worker threads at once
            # (on AWS: Lambda's concurrency, far higher), or this machine's cores doing
            # the emulator's and the orchestrator's work (not AWS's at all).
            bounds = {"partition": out["model"]["bound_s"],
                      "concurrency": out["concurrency_bound_s"],
                      "cpu": cpu / CORES}
            out["bounds_s"] = bounds
            out["bound_by"] = max(bounds, key=lambda k: bounds[k])
            out["bound_s"] = bounds[out["bound_by"]]
            out["wall_over_bound"] = wall / out["bound_s"] if out["bound_s"] else None
        if out["cost"]["runs_priced"]:
            out["cost"]["dollars_per_million_steps"] = out["cost"]["dollars"] / steps * 1e6
            out["cost"]["aws_requests_per_step"] = out["cost"]["aws_requests"] / steps
        return out

    def w1(self) -> dict[str, Any]:
        n = self.sizes["chain"]

        def body() -> tuple[dict[str, Any], list[dict[str, Any]], int]:
            gaps: list[float] = []
            per_step: list[float] = []
            views = []
            for _ in range(self.sizes["repeats"]):
                view = self.stack.finished(self.stack.start("chain"), 600)
                views.append(view)
                rows = sorted(steps_of(view), key=lambda s: s["step"])
                gaps += [(b["started_at"] - a["finished_at"]) * 1000
                         for a, b in pairwise(rows)]
                per_step.append((view["finished_at"] - view["created_at"]) * 1000 / n)
            return ({"gap_p50_ms": pct(gaps, 0.5), "gap_p99_ms": pct(gaps, 0.99),
                     "ms_per_step_median": statistics.median(per_step)},
                    views, n * len(views))
        return self.measure("w1", body)

    def _first_step(self, launch: Callable[[], str]) -> tuple[dict[str, Any],
                                                               list[dict[str, Any]], int]:
        latencies: list[float] = []
        views = []
        for _ in range(self.sizes["runs"]):
            t0 = time.time()
            view = self.stack.finished(launch(), 120)
            views.append(view)
            latencies.append((steps_of(view)[0]["started_at"] - t0) * 1000)
        return {"p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}, views, len(views)

    def start(self) -> dict[str, Any]:
        return self.measure("start", lambda: self._first_step(lambda: self.stack.start("one")))

    def webhook(self) -> dict[str, Any]:
        def deliver() -> str:
            body = json.dumps({"sent": time.time()}).encode()
            r = self.stack.api.post(f"/webhooks/{HOOK}", content=body,
                                    headers={"Content-Type": "application/json",
                                             **sign("github", HOOK_SECRET, body,
                                                    now=time.time())})
            if r.status_code != 202:
                raise RuntimeError(f"webhook refused: {r.status_code} {r.text[:300]}")
            return str(r.json()["run_id"])
        return self.measure("webhook", lambda: self._first_step(deliver))

    def durable(self) -> dict[str, Any]:
        n = self.sizes["durable"]

        def body() -> tuple[dict[str, Any], list[dict[str, Any]], int]:
            view = self.stack.finished(self.stack.start("durable", {"n": n}), 1800)
            return {"wall_s": view["finished_at"] - view["created_at"]}, [view], n
        return self.measure("durable", body)

    def fanout(self) -> dict[str, Any]:
        n = self.sizes["fanout"]

        def body() -> tuple[dict[str, Any], list[dict[str, Any]], int]:
            view = self.stack.finished(self.stack.start("fan"), 3600)
            return ({"wall_s": view["finished_at"] - view["created_at"],
                     "worker_concurrency": self.stack.concurrency}, [view], n + 2)
        return self.measure("fanout", body)

    def foreach(self) -> dict[str, Any]:
        n = self.sizes["foreach"]

        def body() -> tuple[dict[str, Any], list[dict[str, Any]], int]:
            self.stack.calls(n)  # the rows the forEach's route answers
            t0 = time.time()
            # The trigger starts every row's run before it answers.
            r = self.stack.api.post("/schedules/each/trigger", timeout=3600)
            r.raise_for_status()
            accepted = time.time() - t0
            ids = list(dict.fromkeys(r.json()["runs"]))  # every row's run (no repeats)
            if len(ids) != n:
                raise RuntimeError(f"the trigger started {len(ids)} runs for {n} rows")
            views = self.stack.all_finished(ids, 3600)
            return ({"wall_s": max(v["finished_at"] for v in views) - t0,
                     "trigger_answered_s": accepted, "worker_concurrency": self.stack.concurrency},
                    views, n)
        return self.measure("foreach", body)

    def concurrent(self) -> dict[str, Any]:
        n = self.sizes["concurrent"]

        def body() -> tuple[dict[str, Any], list[dict[str, Any]], int]:
            t0 = time.time()
            with ThreadPoolExecutor(self.threads) as pool:
                ids = list(pool.map(lambda _: self.stack.start("five"), range(n)))
            posted = time.time() - t0
            views = self.stack.all_finished(ids, 3600)
            return ({"wall_s": max(v["finished_at"] for v in views) - t0,
                     "posts_s": posted, "worker_concurrency": self.stack.concurrency}, views, 5 * n)
        return self.measure("concurrent", body)


# ---- the table -------------------------------------------------------------------------


def _f(value: Any, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def proven(p: dict[str, Any]) -> bool:
    """A workload's proof holds: every run succeeded and every step was called exactly
    once. An attempt retried (a throttled request that failed its attempt before the call,
    retried as any) is reported beside it, not a failure: no work was lost or done twice."""
    return (p["runs_not_success"] == 0 and p["steps_called"] == p["steps_expected"]
            and p["called_twice"] == 0)


def table(results: dict[str, Any]) -> str:
    head = (f"{'workload':10} {'steps':>6} {'p50 ms':>8} {'p99 ms':>8} {'wall s':>8}"
            f" {'ms/step':>8} {'steps/s':>8} {'AWS req':>8} {'$/M steps':>9} {'model req':>9}"
            f" {'thrott':>6} {'hot WU':>7} {'bound s':>7} {'by':>11} {'wall/bd':>7}")
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"{name:10} FAILED {r['error']}")
            continue
        m, c = r["model"], r["cost"]
        p50 = r.get("p50_ms", r.get("gap_p50_ms"))
        p99 = r.get("p99_ms", r.get("gap_p99_ms"))
        per_step = r.get("ms_per_step", r.get("ms_per_step_median"))
        lines.append(
            f"{name:10} {r['steps']:>6} {_f(p50):>8} {_f(p99):>8} {_f(r.get('wall_s'), '.2f'):>8}"
            f" {_f(per_step, '.2f'):>8} {_f(r.get('steps_per_s'), '.0f'):>8}"
            f" {c['aws_requests']:>8} {_f(c.get('dollars_per_million_steps'), '.2f'):>9}"
            f" {m['requests']:>9} {m['throttled']:>6} {m['hottest_write_units']:>7.0f}"
            f" {_f(r.get('bound_s', m['bound_s'] if r.get('wall_s') else None), '.2f'):>7}"
            f" {r.get('bound_by', 'partition' if r.get('wall_s') else '-'):>11}"
            f" {_f(r.get('wall_over_bound'), '.1f'):>7}")
    lines.append("")
    lines.append("p50/p99: w1 step-to-step gap; start, webhook: POST to the first step's start."
                 " bound: the largest of the hottest partition's write units at the model's"
                 " rate, the steps' own time over the worker threads, and the CPU time of"
                 f" the stack's processes over this machine's {CORES} cores.")
    for name, r in results.items():
        if "error" in r:
            continue
        p, m = r["proof"], r["model"]
        ok = proven(p)
        lines.append(
            f"{name:10} {'ok ' if ok else 'BAD'} runs {p['runs']} (not success"
            f" {p['runs_not_success']}), steps called {p['steps_called']}/{p['steps_expected']}"
            f" (twice {p['called_twice']}, highest attempt {p['max_attempt_sent']}, retried"
            f" {p['steps_retried']}), throttled {p['throttled']}"
            f"{' ' + json.dumps(m['throttled_by_operation']) if m['throttled'] else ''};"
            f" hottest: {m['hottest_partition']}"
            + (f"; worker concurrency {r['worker_concurrency']}: steps' own time over it"
               f" {_f(r['concurrency_bound_s'], '.2f')} s (wall/that"
               f" {_f(r['wall_over_concurrency_bound'], '.1f')})"
               if r.get("worker_concurrency") else "")
            + (f"; the trigger answered after {r['trigger_answered_s']:.2f} s"
               if "trigger_answered_s" in r else "")
            + (f"; the POSTs took {r['posts_s']:.2f} s" if "posts_s" in r else ""))
    return "\n".join(lines)


def derived_model(path: str, write_units: float) -> str:
    """A copy of the model file at `path` with another per-partition write rate."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    partition = doc["dynamodb"]["partition"]
    partition["write_units_per_second"] = write_units
    partition["basis"] = "assumed"
    partition["note"] = f"lowered to {write_units:g} by aws_scale.py --partition-wcu"
    out = Path(tempfile.mkdtemp(prefix="aws-model-")) / "model.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orchestrator", default=str(Path(sys.executable).with_name("orchestrator")))
    ap.add_argument("--model", help="an AWS model file (default: infra/aws_model.yaml)")
    ap.add_argument("--partition-wcu", type=float,
                    help="the model's write units a second per partition, lowered (or raised)"
                         " from the file's: to see throttling at this machine's load")
    ap.add_argument("--worker-threads", type=int, default=WORKER_THREADS,
                    help=f"the worker's threads, ORCH_WORKER_THREADS (default {WORKER_THREADS})")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--quick", action="store_true", help="every workload, small")
    ap.add_argument("--repeats", type=int, default=5, help="w1's runs")
    ap.add_argument("--chain", type=int, default=50, help="w1's steps")
    ap.add_argument("--runs", type=int, default=30, help="start's and webhook's runs")
    ap.add_argument("--durable", type=int, default=200)
    ap.add_argument("--fanout", type=int, default=10_000)
    ap.add_argument("--foreach", type=int, default=10_000)
    ap.add_argument("--concurrent", type=int, default=1_000)
    ap.add_argument("--threads", type=int, default=16, help="concurrent's POSTing threads")
    ap.add_argument("--out", help="write the figures here (JSON)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (stdout)")
    a = ap.parse_args(argv)
    sizes = {k: getattr(a, k) for k in ("chain", "repeats", "runs", "durable", "fanout",
                                        "foreach", "concurrent")}
    if a.quick:
        sizes.update(QUICK)
    only = [w.strip() for w in a.only.split(",") if w.strip()]
    unknown = sorted(set(only) - set(WORKLOADS))
    if unknown:
        ap.error(f"--only: unknown {unknown}; choose from {', '.join(WORKLOADS)}")
    twice = sorted({w for w in only if only.count(w) > 1})
    if twice:  # a second pass would overwrite the first's figures under the same name
        ap.error(f"--only: {', '.join(twice)} named more than once")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # Absolute: `orchestrator dev` runs in the stack's own directory, not this one.
    model_file = str(Path(a.model).resolve()) if a.model else str(DEFAULT_FILE)
    if a.partition_wcu is not None:
        model_file = derived_model(model_file, a.partition_wcu)
    model = load(model_file)
    rate = model.dynamodb.partition.write_units_per_second
    stack = Stack(a.orchestrator, model_file, sizes, a.worker_threads)
    results: dict[str, Any] = {}
    try:
        stack.wait_ready()
        bench = Bench(stack, sizes, a.threads, rate, say=say)
        stack.finished(stack.start("one"), 120)  # warm-up: connections, first reads
        for name in only:
            try:
                results[name] = getattr(bench, name)()
            except Exception as exc:  # record it and go on: a failed workload is a result
                results[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        stack.stop()
    report = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "model": model_file,
              "write_units_per_second": rate,
              "read_units_per_second": model.dynamodb.partition.read_units_per_second,
              "sizes": sizes, "worker_threads": a.worker_threads, "cores": CORES,
              "loadavg_end": list(os.getloadavg()), "workloads": results}
    say(f"AWS model: {model_file} ({rate:.0f} WCU/s per partition); sizes {sizes}")
    say(table(results))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    if a.json:
        print(json.dumps(report, indent=1))
    # A failed workload, or one whose proof is BAD (a run not success, a step called
    # twice or retried): its figures are not what users would see.
    return 1 if any("error" in r or not proven(r["proof"]) for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
