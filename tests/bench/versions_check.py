"""How fast every open durable run is checked against new code, as a user gets it:
`orchestrator dev` (a subprocess, through its API only), two versions of a functions app
served at once (tests/support/versioned_fns.py: v2 compatible with v1's runs), N runs of
`order` started through the API and left waiting for a signal, then `POST /runs/check
{"version": "v2"}` timed (and `v3`, which diverges, for the report's other branch).
Issue 40 asks 10,000 open runs checked in at most 60 s.

    uv run python -m tests.bench.versions_check --sizes 10,100,1000,10000 [--json FILE]

Prints, per size: the check's wall time, runs/s, ms/run, and the dev process's memory."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.bench.aws_scale import free_port, stop_all, until

ROOT = Path(__file__).resolve().parents[2]

FUNCTIONS = """
import sys, threading
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from functions.sdk.serving import BackgroundServer
from tests.support.versioned_fns import CALLS, create_app

ports = [int(p) for p in sys.argv[1:4]]
servers = [BackgroundServer(create_app(v), port=p).start() for v, p in zip((1, 2, 3), ports)]

async def count(request):
    with CALLS.lock:
        return JSONResponse({"runs": len(CALLS.by_run)})

BackgroundServer(Starlette(routes=[Route("/count", count)]), port=int(sys.argv[4])).start()
try:
    threading.Event().wait()
except KeyboardInterrupt:
    pass
"""

MANIFEST = """
backends:
  shop:
    versions: {{ v1: "http://127.0.0.1:{0}", v2: "http://127.0.0.1:{1}",
                v3: "http://127.0.0.1:{2}" }}
    current: v1
    secret: versions-secret
workflows:
  order: {{ backend: shop, timeout: 60s }}
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Stack:
    def __init__(self, orchestrator: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="versions-check-"))
        ports = [free_port() for _ in range(4)]
        self.api_port, self.emu_port = free_port(), free_port()
        (self.work / "fn.py").write_text(FUNCTIONS)
        (self.work / "orchestrator.yml").write_text(MANIFEST.format(*ports))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.fn = subprocess.Popen([sys.executable, str(self.work / "fn.py"),
                                    *map(str, ports)], env=env, start_new_session=True)
        self.count = httpx.Client(base_url=f"http://127.0.0.1:{ports[3]}", timeout=30)
        until("the functions", self._fn_up, 60, every=0.1)
        self.log = self.work / "dev.log"
        with open(self.log, "w") as log:
            self.dev = subprocess.Popen(
                [orchestrator, "dev", "--manifest", str(self.work / "orchestrator.yml"),
                 "--port", str(self.api_port), "--emulator-port", str(self.emu_port),
                 "--functions", "none", "--no-scripts"],
                cwd=self.work, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}", timeout=600)
        until("orchestrator dev's banner", lambda: "Ready." in self._banner(), 300)
        key = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", self._banner())
        if key:
            self.api.headers["Authorization"] = f"Bearer {key.group(1)}"

    def _banner(self) -> str:
        if self.dev.poll() is not None:
            raise RuntimeError(f"orchestrator dev exited: {self.log.read_text()[-2000:]}")
        return self.log.read_text()

    def _fn_up(self) -> bool:
        try:
            return self.count.get("/count").status_code == 200
        except httpx.HTTPError:
            return False

    def started(self) -> int:
        return int(self.count.get("/count").json()["runs"])

    def start(self, n: int) -> None:
        def one(i: int) -> None:
            self.api.post("/runs", json={"workflow": "order", "input": {"i": i}}
                          ).raise_for_status()
        before = self.started()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(one, range(n)))
        until(f"{n} runs waiting", lambda: self.started() >= before + n, 1800, every=0.5)

    def check(self, version: str) -> tuple[float, dict[str, Any]]:
        t0 = time.perf_counter()
        resp = self.api.post("/runs/check", json={"version": version})
        resp.raise_for_status()
        return time.perf_counter() - t0, resp.json()

    def stop(self) -> None:
        stop_all((self.dev, self.fn), self.work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,1000,10000")
    ap.add_argument("--orchestrator", default=shutil.which("orchestrator") or "orchestrator")
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    stack = Stack(args.orchestrator)
    rows = []
    try:
        open_runs = 0
        for size in sizes:
            stack.start(size - open_runs)
            open_runs = size
            took, doc = stack.check("v2")
            assert doc["checked"] == size and doc["compatible"] == size, doc
            bad_took, bad = stack.check("v3")
            assert bad["diverging"] == size, {k: bad[k] for k in ("checked", "diverging")}
            row = {"open_runs": size, "check_s": round(took, 2),
                   "runs_per_s": round(size / took, 1), "ms_per_run": round(1000 * took / size, 2),
                   "diverging_check_s": round(bad_took, 2),
                   "dev_rss_mb": round(rss_mb(stack.dev.pid), 1)}
            rows.append(row)
            print(f"{size:>6} open runs: checked in {took:7.2f} s  {row['runs_per_s']:8.1f}"
                  f" runs/s  {row['ms_per_run']:6.2f} ms/run  (all diverging: {bad_took:.2f} s)"
                  f"  dev RSS {row['dev_rss_mb']} MB", flush=True)
    finally:
        stack.stop()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"),
                                                    "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
