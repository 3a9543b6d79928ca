"""Durable shell scripts as a user runs them: `orchestrator dev` (its own script host),
driven through its HTTP API, beside the same chain written as a Python workflow
(`noop-chain` of functions/examples/noop.py) on the same stack.

For each size N, one script runs `orchestrator step s<i> -- true` N times, each timed in
the script with bash's EPOCHREALTIME, sleeps a second, and ends: its first pass runs
every step (a command and a checkpoint), the pass after the sleep replays from the top
and each step is answered from the journal. Printed per size: the median ms of a new step
and of a recorded one (inside the script), the whole replay, the run's ms/step end to
end (created to finished, less the sleep), the Python chain's, steps/s, AWS requests and
dollars per million steps (the run's own cost), and the stack's memory (RSS).

    python tests/bench/scripts_dev.py [--sizes 10,200,1000] [--out figures.json]
"""

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
import time
from pathlib import Path
from typing import Any

import httpx

SCRIPT = """
times="$(python3 -c 'import json, os
print(json.load(open(os.environ["ORCHESTRATOR_INPUT_FILE"]))["payload"]["times"])')"
for i in $(seq 1 {steps}); do
  t0=$EPOCHREALTIME
  orchestrator step "s$i" -- true
  t1=$EPOCHREALTIME
  echo "$t0 $t1" >> "$times"
done
orchestrator sleep 1s
"""

MANIFEST = """
backends:
  fns: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  noop-chain: { backend: fns }
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(root: int) -> float:
    """Resident memory of `root` and its descendants, in MB (from /proc)."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            kids.setdefault(int(stat[1]), []).append(int(d))
            rss[int(d)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(kids.get(p, []))
    return total / 2**20


class Stack:
    def __init__(self, work: Path) -> None:
        (work / "orchestrator.yml").write_text(MANIFEST)
        self.port = _port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
        self.log = work / "dev.log"
        exe = shutil.which("orchestrator") or str(Path(sys.executable).parent / "orchestrator")
        self.proc = subprocess.Popen(
            [exe, "dev", "--manifest", str(work / "orchestrator.yml"), "--port", str(self.port),
             "--emulator-port", str(_port()), "--functions", "functions.examples.noop:create_app",
             "--functions-port", str(_port()), "--scripts-port", str(_port())],
            cwd=work, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 180
        key = None
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if "Use it" in text:
                found = re.search(r"ORCHESTRATOR_API_KEY=(\S+)", text)
                key = found.group(1) if found else None
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"orchestrator dev exited:\n{text}")
            time.sleep(0.2)
        else:
            raise TimeoutError("orchestrator dev did not start")
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60,
                                headers={"Authorization": f"Bearer {key}"} if key else {})

    def wait(self, run_id: str, timeout: float = 900.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            view: dict[str, Any] = self.api.get(f"/runs/{run_id}",
                                                params={"wait": "20"}).json()
            if view["status"] not in ("queued", "running"):
                if view["status"] != "success":
                    raise RuntimeError(f"{run_id} ended {view['status']}: {view.get('error')}")
                return view
            if time.monotonic() > deadline:
                raise TimeoutError(run_id)

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def _cost(view: dict[str, Any], steps: int) -> tuple[float, float]:
    cost = view.get("cost") or {}
    return (cost.get("total_requests", 0) / steps, cost.get("dollars", 0.0) / steps * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10,200,1000")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    figures: dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stack = Stack(work)
        try:
            for n in sizes:
                times = work / f"times-{n}"
                started = stack.api.post("/scripts/runs", json={
                    "name": f"bench-{n}", "text": SCRIPT.format(steps=n),
                    "input": {"times": str(times)}}).json()
                view = stack.wait(started["run_id"])
                spans = [(float(b) - float(a)) * 1e3 for a, b in
                         (line.split() for line in times.read_text().splitlines())]
                fresh, replayed = spans[:n], spans[n:]
                wall = view["finished_at"] - view["created_at"] - 1.0  # less the sleep
                py = stack.wait(stack.api.post("/runs", json={
                    "workflow": "noop-chain", "input": {"steps": n}}).json()["run_id"])
                py_ms = (py["finished_at"] - py["created_at"]) * 1e3 / n
                requests, dollars = _cost(view, n)
                py_requests, py_dollars = _cost(py, n)
                row = {
                    "new_step_ms_median": statistics.median(fresh),
                    "recorded_step_ms_median": statistics.median(replayed),
                    "replay_s": sum(replayed) / 1e3,
                    "script_ms_per_step": wall * 1e3 / n,
                    "script_steps_per_s": n / wall,
                    "python_ms_per_step": py_ms,
                    "python_steps_per_s": 1e3 / py_ms,
                    "script_requests_per_step": requests,
                    "script_dollars_per_million_steps": dollars,
                    "python_requests_per_step": py_requests,
                    "python_dollars_per_million_steps": py_dollars,
                    "stack_rss_mb": _rss_mb(stack.proc.pid),
                }
                figures["sizes"][str(n)] = row
                print(f"N={n:5d}  script: new step {row['new_step_ms_median']:.2f} ms,"
                      f" recorded {row['recorded_step_ms_median']:.2f} ms (median),"
                      f" replay of {n} {row['replay_s']:.2f} s;"
                      f" end to end {row['script_ms_per_step']:.2f} ms/step"
                      f" ({row['script_steps_per_s']:.0f} steps/s)"
                      f" | python chain {py_ms:.2f} ms/step ({1e3 / py_ms:.0f} steps/s)"
                      f" | requests/step {requests:.1f} vs {py_requests:.1f},"
                      f" $/M steps {dollars:.2f} vs {py_dollars:.2f}"
                      f" | RSS {row['stack_rss_mb']:.0f} MB", flush=True)
        finally:
            stack.close()
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
