"""Two `orchestrator dev` stacks up at once, the same workload run on each in turn.

The machine's speed moves by up to 2 times within an hour (a shared host): rounds of
`../shared/bench/project_bench.py` one commit after the other meet different moments,
and their ranges overlap. Here each pair of runs (one on A, one on B, their order
alternating) meets the same moment, and the paired ratio B/A is the figure to read.

A and B are the `orchestrator` commands of two environments (two commits, or one and the
same with another `--poll-b`). The workloads are project_bench.py's: W1 a chain of 50
no-op steps, W2 a fan-out of 200 into a join, W3 20 runs of a 5-step chain started back
to back, on one no-op function served by uvicorn; and durable_scale.py's: C<n> a durable
chain of n no-op steps, P<n> a `ctx.parallel` of n, served by each `dev` itself
(`--functions`), as durable_scale.py serves them. Each run is followed over the API
(`GET /runs/{id}`), and timed by its own `created_at` / `finished_at`.

    python tests/bench/turnabout.py --a BEFORE/bin/orchestrator --b AFTER/bin/orchestrator \\
        [--rounds 10] [--only W1,W2,W3,C50,C2000,P400] [--poll-a 0.25] [--poll-b 0.25] \\
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from typing import Any

import httpx

FN_APP = '''
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def noop(request):
    await request.body()
    return JSONResponse({"ok": True})
app = Starlette(routes=[Route("/noop", noop, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''
STEPS = {"W1": 50, "W2": 201, "W3": 100}
RUNS = {"W1": 1, "W2": 1, "W3": 20}
DURABLE_APP = '''
from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp


async def _nothing():
    return {"ok": True}


@workflow("C")
async def chain(ctx: Context, payload):
    for i in range(int(payload["n"])):
        await step(f"s{i}", _nothing)
    return int(payload["n"])


@workflow("P")
async def parallel(ctx: Context, payload):
    n = int(payload["n"])
    return len(await ctx.parallel([step(f"b{i}", _nothing) for i in range(n)], max_parallel=n))


def create_app(secret=None):
    app = FunctionApp(secret, title="turnabout")
    app.workflow(chain, parallel)
    return app
'''


def shape(workload: str) -> tuple[str, int, int, dict[str, Any]]:
    """A workload's workflow, its steps, its runs and their input."""
    if workload in STEPS:
        return workload, STEPS[workload], RUNS[workload], {}
    kind, size = workload[:1], workload[1:]
    if kind not in ("C", "P") or not size.isdigit() or int(size) < 1:
        raise SystemExit(f"--only: {workload!r} is not W1, W2, W3, C<n> or P<n>")
    return kind, int(size), 1, {"n": int(size)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port}")


def manifest(fn_url: str, app_url: str) -> str:
    def chain(n: int) -> dict[str, Any]:
        return {f"s{i:03d}": {"backend": "fn", "route": "/noop",
                              **({"dependsOn": [f"s{i - 1:03d}"]} if i else {})}
                for i in range(n)}

    fan: dict[str, Any] = {f"f{i:03d}": {"backend": "fn", "route": "/noop"} for i in range(200)}
    fan["join"] = {"backend": "fn", "route": "/noop", "dependsOn": sorted(fan)}
    app = {"url": app_url, "secret": "${FUNCTIONS_SECRET:-}"}  # dev signs every call
    return json.dumps({"backends": {"fn": {"url": fn_url}, "app": app},
                       "workflows": {"W1": {"steps": chain(50)}, "W2": {"steps": fan},
                                     "W3": {"steps": chain(5)},
                                     "C": {"backend": "app", "workflow": "C"},
                                     "P": {"backend": "app", "workflow": "P"}}})


class Stack:
    """One `orchestrator dev`, its API client, how often its runs are looked at."""

    def __init__(self, command: str, work: str, poll: float, fn_url: str) -> None:
        self.poll = poll
        port, emulator, app = free_port(), free_port(), free_port()
        os.makedirs(work)
        with open(os.path.join(work, "o.yml"), "w") as f:
            f.write(manifest(fn_url, f"http://127.0.0.1:{app}"))
        with open(os.path.join(work, "turnabout_app.py"), "w") as f:
            f.write(DURABLE_APP)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [work, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.log = os.path.join(work, "dev.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [command, "dev", "--manifest", os.path.join(work, "o.yml"),
                 "--port", str(port), "--functions", "turnabout_app:create_app",
                 "--functions-port", str(app), "--emulator-port", str(emulator)],
                cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_port(port)
        key = None
        for _ in range(100):
            with open(self.log) as log:
                found = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", log.read())
            if found:
                key = found.group(1)
                break
            time.sleep(0.1)
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                headers={"Authorization": f"Bearer {key}"} if key else {})

    def run(self, workload: str) -> float:
        """One workload: ms per step, first created_at to last finished_at."""
        workflow, steps, runs, payload = shape(workload)
        ids = [self.api.post("/runs", json={"workflow": workflow, "input": payload}
                             ).json()["run_id"] for _ in range(runs)]
        spans = []
        for run_id in ids:
            deadline = time.monotonic() + 600
            while True:
                view = self.api.get(f"/runs/{run_id}").json()
                if view["status"] not in ("queued", "running"):
                    if view["status"] != "success":
                        raise RuntimeError(f"{run_id} ended {view['status']}: "
                                           f"{json.dumps(view.get('error'))[:500]}")
                    spans.append((view["created_at"], view["finished_at"]))
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(run_id)
                time.sleep(self.poll)
        took = float(max(f for _, f in spans) - min(c for c, _ in spans))
        return took * 1000 / steps

    def stop(self) -> None:
        for sig in (signal.SIGINT, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(5)
                return
            except subprocess.TimeoutExpired:
                continue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the orchestrator command of A")
    ap.add_argument("--b", required=True, help="the orchestrator command of B")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--only", default="W1,W2,W3")
    ap.add_argument("--poll-a", type=float, default=0.25)
    ap.add_argument("--poll-b", type=float, default=0.25)
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="turnabout-")
    fn_port = free_port()
    with open(os.path.join(work, "fn.py"), "w") as f:
        f.write(FN_APP)
    python = os.path.join(os.path.dirname(a.a), "python")
    fn = subprocess.Popen([python, os.path.join(work, "fn.py"), str(fn_port)],
                          start_new_session=True)
    stacks: dict[str, Stack] = {}
    out: dict[str, Any] = {}
    try:
        fn_url = f"http://127.0.0.1:{fn_port}"
        for workload in a.only.split(","):
            shape(workload)  # a bad name fails now, not after the stacks started
        stacks["A"] = Stack(a.a, os.path.join(work, "A"), a.poll_a, fn_url)
        stacks["B"] = Stack(a.b, os.path.join(work, "B"), a.poll_b, fn_url)
        wait_port(fn_port)
        for workload in a.only.split(","):
            for k in "AB":
                stacks[k].run(workload)  # warm-up
            seen: dict[str, list[float]] = {"A": [], "B": []}
            for r in range(a.rounds):
                for k in ("AB" if r % 2 == 0 else "BA"):
                    seen[k].append(stacks[k].run(workload))
            ratios = [b / x for x, b in zip(seen["A"], seen["B"], strict=True)]
            out[workload] = {**seen, "ratio_median": statistics.median(ratios),
                             "b_faster": sum(r < 1 for r in ratios)}
            print(f"{workload}: A {statistics.median(seen['A']):.2f} ms/step, "
                  f"B {statistics.median(seen['B']):.2f} ms/step; B/A paired median "
                  f"{statistics.median(ratios):.3f} (B faster in {out[workload]['b_faster']} "
                  f"of {len(ratios)})", flush=True)
    finally:
        for stack in stacks.values():
            stack.stop()
        os.killpg(fn.pid, signal.SIGKILL)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
