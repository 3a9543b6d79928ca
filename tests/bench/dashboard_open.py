"""Does watching a run slow it? W1 (one run of a 50-step chain of no-op steps, the shape of
../shared/bench/project_bench.py) on `orchestrator dev` with its default settings,
driven through the HTTP API, in rounds that alternate: no viewer, then headless Chromium
open on the run's dashboard page (live over SSE) from the moment the run is started, with
a second tab on the runs list (live too). Each run is timed by its own created_at and
finished_at (the engine's time, as project_bench reports it); the first round is a warm-up.

    .venv/bin/python tests/bench/dashboard_open.py --rounds 8 [--steps 50] [--json out.json]

Needs Debian's chromium (apt install chromium). Prints the medians and ranges of each
side, ms/step and steps/s, the ratio (the issue asks it to stay within 1.10), and the
`dev` process tree's memory after each side."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.browser import ARGS, chromium_path  # noqa: E402

FN_APP = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
async def noop(request):
    await request.body()
    return JSONResponse({"ok": True})
app = Starlette(routes=[Route("/noop", noop, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"port {port}")


def _rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its children (MB), from /proc."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except (OSError, AttributeError):
            continue
        pids += [int(k) for k in kids]
    return total / 1024


def _browser_cpu_s() -> float:
    """CPU seconds used so far by every chromium process on the machine."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if "chrom" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--browser-nice", type=int, default=0,
                    help="run chromium at this niceness (19: it takes only the CPU the stack "
                    "leaves, as a browser on the user's own machine would)")
    ap.add_argument("--viewer", choices=("browser", "stream", "blank"), default="browser",
                    help="browser: chromium on the run page; stream: the page's live stream "
                    "alone, read by a thread here (the server's share, without a browser's); "
                    "blank: chromium on /healthz (what a navigation costs the browser, whatever "
                    "the page)")
    a = ap.parse_args()
    chromium = chromium_path()
    if chromium is None and a.viewer != "stream":
        print("no chromium: apt install chromium", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    if a.browser_nice:
        wrapper = work / "chromium"
        wrapper.write_text(f'#!/bin/sh\nexec nice -n {a.browser_nice} {chromium} "$@"\n')
        wrapper.chmod(0o755)
        chromium = str(wrapper)
    fn_port, api_port, emu_port = _port(), _port(), _port()
    (work / "fn.py").write_text(FN_APP)
    chain = {f"s{i:03d}": {"backend": "fn", "route": "/noop",
                           **({"dependsOn": [f"s{i - 1:03d}"]} if i else {})}
             for i in range(a.steps)}
    (work / "orchestrator.yml").write_text(json.dumps({
        "backends": {"fn": {"url": f"http://127.0.0.1:{fn_port}"}},
        "workflows": {"w1": {"steps": chain}}}))
    orchestrator = str(Path(sys.executable).parent / "orchestrator")
    fn = subprocess.Popen([sys.executable, str(work / "fn.py"), str(fn_port)],
                          start_new_session=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    log = open(work / "dev.log", "w")  # noqa: SIM115 - closed with the process
    dev = subprocess.Popen([orchestrator, "dev", "--manifest", str(work / "orchestrator.yml"),
                            "--port", str(api_port), "--emulator-port", str(emu_port),
                            "--functions", "none"], cwd=work, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    results: dict[str, list[float]] = {"closed": [], "open": []}
    browser_cpu: list[float] = []
    memory: dict[str, float] = {}
    try:
        _wait_port(fn_port, 30)
        _wait_port(api_port, 180)
        text = ""
        deadline = time.monotonic() + 30
        while "ORCHESTRATOR_API_KEY=" not in text and time.monotonic() < deadline:
            time.sleep(0.1)
            text = (work / "dev.log").read_text()
        key = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", text).group(1)  # type: ignore[union-attr]
        link = re.search(r"^dashboard\s+(\S+)", text, re.M).group(1)  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{api_port}"
        api = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"})

        def stream(run_id: str) -> None:
            cookies = {"orch_ui": key}
            with httpx.Client(base_url=url, cookies=cookies, timeout=60) as c:
                c.get(f"/ui/runs/{run_id}")
                with c.stream("GET", f"/ui/runs/{run_id}/live") as s:
                    for line in s.iter_lines():
                        if line.startswith("event: done"):
                            return

        def run(viewer: Any) -> float:
            run_id = api.post("/runs", json={"workflow": "w1", "input": {}}).json()["run_id"]
            if viewer == "stream":
                import threading
                threading.Thread(target=stream, args=(run_id,), daemon=True).start()
            elif viewer is not None:
                path = "/healthz" if a.viewer == "blank" else f"/ui/runs/{run_id}"
                viewer.goto(f"{url}{path}", wait_until="commit")
            while True:
                view = api.get(f"/runs/{run_id}", params={"wait": 20, "steps": "false"}).json()
                if view["status"] not in ("queued", "running"):
                    break
            if view["status"] != "success":
                raise RuntimeError(f"{run_id} ended {view['status']}")
            return float(view["finished_at"] - view["created_at"])

        with ExitStack() as stack:
            page: Any = None
            if a.viewer != "stream":
                from playwright.sync_api import sync_playwright

                p = stack.enter_context(sync_playwright())
                browser = p.chromium.launch(executable_path=chromium, headless=True,
                                            args=ARGS)
                stack.callback(browser.close)
                page = browser.new_page()
                page.goto(link)  # signs in once
                listing = browser.new_page()
                listing.goto(f"{url}/ui/runs")
            for r in range(a.rounds):
                for side in ("closed", "open"):
                    viewer = "stream" if a.viewer == "stream" else page
                    cpu = _browser_cpu_s()
                    took = run(viewer if side == "open" else None)
                    if side == "open" and r:
                        browser_cpu.append(_browser_cpu_s() - cpu)
                    if r:  # the first round warms up
                        results[side].append(took)
                    print(f"round {r} {side:6} {took * 1000:7.0f} ms", flush=True)
                    memory[side] = max(memory.get(side, 0.0), _rss_mb(dev.pid))
    finally:
        for proc in (dev, fn):
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for proc in (dev, fn):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    out: dict[str, Any] = {"steps": a.steps, "rounds": a.rounds - 1}
    for side, vals in results.items():
        med = statistics.median(vals)
        out[side] = {"ms_per_step_median": med / a.steps * 1000,
                     "ms_per_step_range": [min(vals) / a.steps * 1000,
                                           max(vals) / a.steps * 1000],
                     "steps_per_s": a.steps / med, "dev_rss_mb_max": round(memory[side], 1)}
        print(f"{side:6}: {out[side]['ms_per_step_median']:.2f} ms/step "
              f"({out[side]['ms_per_step_range'][0]:.2f}-{out[side]['ms_per_step_range'][1]:.2f}),"
              f" {out[side]['steps_per_s']:.0f} steps/s, dev RSS {memory[side]:.0f} MB")
    out["browser_cpu_ms_per_run"] = 1000 * statistics.median(browser_cpu or [0.0])
    print(f"the browser's own CPU during an open run: {out['browser_cpu_ms_per_run']:.0f} ms"
          " (on the same 2 cores as the stack)")
    out["ratio_open_over_closed"] = (out["open"]["ms_per_step_median"]
                                     / out["closed"]["ms_per_step_median"])
    print(f"open / closed: {out['ratio_open_over_closed']:.3f} (target: at most 1.10)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
