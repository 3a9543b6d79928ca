"""Where a W1 step's time goes, locally (issue 39, §3): a chain of 50 no-op steps on the
stack `orchestrator dev` runs (the emulator in a process of its own, reached over a Unix
socket; one worker; this process kept to one core, the emulator to another; the no-op
function on a uvicorn of its own process), broken down by part. Figures, not pass/fail.

  W1      ms per step, from the runs' own timestamps (created_at to finished_at / 50)
  AWS     the requests a step makes, by operation, each with its mean time as the worker
          saw it (botocore's `before-call` to `after-call`: serializing, the emulator's
          answer over the socket, parsing), measured inside the W1 runs themselves. A
          ReceiveMessage that brought messages counts, timed from the later of its start
          and the last SendMessage's answer (its long poll's wait before the message
          existed is no step's work); one that came back empty waited for work and does
          not
  CALL    one POST of a step's body to the no-op function, back to back (httpx, kept-alive)
  FLOOR   requests x their times + CALL: what a step costs with none of the engine's own
          Python; W1 - FLOOR is that Python (and the thread hand-offs between parts)

The emulator runs without the AWS model (whatever ORCH_EMULATOR_MODEL says): this is the
local breakdown; tests/bench/aws_scale.py measures under the model.

    python tests/bench/w1_parts.py [--runs 10] [--steps 50] [--json] [--dbos PY [--peer PATH]]

`--dbos PY` runs the DBOS bench (`--peer`, default ../shared/bench/dbos_bench.py beside
the repository) --only W1 with that python in the same session (DBOS 3.4 on SQLite), for
the side-by-side the issue asks."""

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
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.emulator import calm_collector, keep_to_one_core  # noqa: E402
from infra.emulator.process import EmulatorProcess  # noqa: E402
from infra.emulator.tuning import SWITCH_INTERVAL, spare_core  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from tests.bench.run import chain, wait_all  # noqa: E402

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
# The DBOS bench, beside the repository (--peer to name another).
PEER = ROOT.parent / "shared" / "bench" / "dbos_bench.py"
# What an empty ReceiveMessage is filed under: a long poll that waited for work, not a
# step's work, so left out of the floor.
EMPTY_RECEIVE = "ReceiveMessage (empty)"


class RequestTimer:
    """Each request's time by operation, from botocore's own events, per thread."""

    def __init__(self, clients: Any) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self._local = threading.local()
        self._lock = threading.Lock()
        # When the last SendMessage was answered: the messages this process's receives
        # bring were sent by this process (its run starts and its worker).
        self._sent = 0.0
        for c in (clients.dynamodb, clients.sqs, clients.s3):
            c.meta.events.register("before-call", self._before)
            c.meta.events.register("after-call", self._after)

    def _before(self, model: Any, **_: Any) -> None:
        self._local.t0 = time.perf_counter()

    def _after(self, model: Any, parsed: Any = None, **_: Any) -> None:
        now = time.perf_counter()
        t0 = getattr(self._local, "t0", now)
        name = model.name
        with self._lock:
            if name in ("SendMessage", "SendMessageBatch"):
                self._sent = now
            elif name == "ReceiveMessage":
                if (parsed or {}).get("Messages"):
                    t0 = max(t0, self._sent)  # not its wait for the message to exist
                else:
                    name = EMPTY_RECEIVE
            self.times[name].append(now - t0)

    def take(self) -> dict[str, list[float]]:
        with self._lock:
            out, self.times = self.times, defaultdict(list)
        return out


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_function(work: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    path = os.path.join(work, "fn.py")
    Path(path).write_text(FN_APP)
    proc = subprocess.Popen([sys.executable, path, str(port)], start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(url + "/noop", content=b"{}", timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    raise SystemExit("the no-op function did not start")


def call_ms(url: str, rounds: int) -> list[float]:
    body = json.dumps({"input": {}, "steps": {}, "payload": None,
                       "run": {"run_id": "r", "workflow": "w1", "step": "s1", "attempt": 1}})
    out = []
    with httpx.Client() as http:
        for i in range(rounds + 5):
            t0 = time.perf_counter()
            http.post(url + "/noop", content=body, headers={"content-type": "application/json"})
            if i >= 5:
                out.append((time.perf_counter() - t0) * 1e3)
    return out


def peer(python: str, bench: Path) -> float | None:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "d.json")
        subprocess.run([python, str(bench), "--db", "sqlite", "--poll", "0.01", "--repeats", "3",
                        "--only", "W1", "--out", out], check=True, capture_output=True)
        res = json.loads(Path(out).read_text())
    w1 = res.get("W1", {})
    found = w1.get("ms_per_step_median")
    return None if found is None else float(found)


def measure(runs: int, steps: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="w1-parts-")
    fn, fn_url = serve_function(work)
    # model="off": never modelled, whatever ORCH_EMULATOR_MODEL this process inherited.
    emulator = EmulatorProcess("127.0.0.1", 0, spare_core(), model="off").start()
    switch = sys.getswitchinterval()
    try:
        settings = Settings(endpoint_url=emulator.url, prefix="w1p", api_auth=False)
        clients = emulator.attach(make_clients(settings))
        deploy_data_stack(clients, settings.prefix)
        text = "backends:\n  fn: { url: \"${FN}\" }\nworkflows:\n  w1:\n    steps:\n" + chain(steps)
        m = manifest_from_text(text, "w1.yml", ROOT, {"FN": fn_url})
        rt = Runtime.build(settings, m, clients=clients)
        observer = Runtime.build(settings, m, clients=emulator.attach(make_clients(settings)))
        timer = RequestTimer(clients)
        stop = threading.Event()
        worker = threading.Thread(target=rt.worker().run, args=(stop,), daemon=True)
        calm_collector()
        keep_to_one_core()
        sys.setswitchinterval(SWITCH_INTERVAL)
        worker.start()
        per_step: list[float] = []
        times: dict[str, list[float]] = defaultdict(list)
        counts: dict[str, int] = defaultdict(int)
        for i in range(runs + 1):
            timer.take()
            run = rt.runs.start("w1", {"i": i})[0]
            wait_all(observer, [run.run_id])
            got = timer.take()
            row = observer.store.runs.get_run(run.run_id, time.time())
            if i == 0 or row is None or row.finished_at is None:
                continue  # the first run warms up
            per_step.append((row.finished_at - row.created_at) * 1e3 / steps)
            for op, values in got.items():
                times[op] += values
                counts[op] += len(values)
        stop.set()
        worker.join(timeout=15)
        call = call_ms(fn_url, 200)
    finally:
        sys.setswitchinterval(switch)
        emulator.stop()
        fn.terminate()
    w1 = statistics.median(per_step)
    # An empty ReceiveMessage is a long poll that waited for work, not a step's work.
    ops = {op: {"per_step": counts[op] / (runs * steps),
                "ms_mean": statistics.fmean(v) * 1e3, "ms_p50": statistics.median(v) * 1e3}
           for op, v in sorted(times.items()) if op != EMPTY_RECEIVE}
    # Each request at its median: a few requests that waited on something else (a receive
    # still inside its long poll when the run's message came, a stall of the machine)
    # would otherwise weigh as much as thousands that did not.
    aws = sum(o["per_step"] * o["ms_p50"] for o in ops.values())
    call_p50 = statistics.median(call)
    return {"runs": runs, "steps": steps, "w1_ms_per_step": w1,
            "w1_range": [min(per_step), max(per_step)], "requests": ops,
            "aws_ms_per_step": aws, "call_ms": call_p50, "floor_ms": aws + call_p50,
            "engine_ms": w1 - aws - call_p50}


def render(r: dict[str, Any]) -> str:
    out = [f"W1 chain of {r['steps']}, {r['runs']} runs: {r['w1_ms_per_step']:.2f} ms/step "
           f"({r['w1_range'][0]:.2f}-{r['w1_range'][1]:.2f})",
           "  requests a step makes, as the worker timed them:"]
    for op, o in r["requests"].items():
        out.append(f"    {op:<22} {o['per_step']:.2f}/step x {o['ms_p50']:.3f} ms (p50;"
                   f" mean {o['ms_mean']:.3f}) = {o['per_step'] * o['ms_p50']:.2f} ms")
    out += [f"  AWS requests      {r['aws_ms_per_step']:.2f} ms/step",
            f"  the call (POST)   {r['call_ms']:.2f} ms",
            f"  floor             {r['floor_ms']:.2f} ms/step (requests + call)",
            f"  the engine's own  {r['engine_ms']:.2f} ms/step (W1 - floor)"]
    if r.get("dbos_ms_per_step") is not None:
        out.append(f"  DBOS 3.4 SQLite   {r['dbos_ms_per_step']:.2f} ms/step (same session)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dbos", default="", help="a python with dbos installed")
    ap.add_argument("--peer", type=Path, default=PEER,
                    help="the DBOS bench --dbos runs (default: %(default)s)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.dbos and not a.peer.is_file():
        ap.error(f"--peer: no DBOS bench at {a.peer}")
    r = measure(a.runs, a.steps)
    if a.dbos:
        r["dbos_ms_per_step"] = peer(a.dbos, a.peer)
    print(json.dumps(r, indent=1) if a.json else render(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
