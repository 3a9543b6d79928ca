"""Wide fan-outs: what they cost per step as they grow, and how soon their last step is
dispatched as worker processes are added. Figures, not pass/fail timing.

  R  AWS requests per step of a fan-out of N no-op steps into one join, N = 10, 100,
     1,000 and 10,000 (in-process workers, counted with botocore's events): the cost of
     advancing a run is O(out-degree), so the figure stays flat (within 10%) as N grows.
     Also per step beyond a run's fixed cost (its start and finish, measured as a run
     of one step): (requests of the fan-out - requests of the one-step run) / (N + 1).
  D  a fan-out of N (10,000) on K separate `orchestrator worker` processes (K = 1, 2,
     4), the emulator a process of its own: the time from the root step's success to
     the dispatch of its last dependant (each leaf's row keeps `ready_at`, the time its
     dispatch was sent), and to the run's end. With `--compare`, the same again with the
     fan-out promoted by one worker alone (ORCH_FANOUT_SLICE above N: the code before
     the fan-out was spread over workers), interleaved.

    python tests/bench/fanout.py [--quick] [--compare] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.examples.noop import create_app as noop_app  # noqa: E402
from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import Emulator  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from tests.bench.run import fan, per_step, stack, timed_run, wait_all  # noqa: E402


def manifest(sizes: list[int]) -> str:
    out = ["backends:", '  fn: { url: "${FN}" }', "workflows:",
           "  one:", "    steps:", "      only: { backend: fn, route: /noop }"]
    for n in sizes:
        out += [f"  fan{n}:", "    steps:", fan(n)]
    return "\n".join(out) + "\n"


def requests_per_step(sizes: list[int], say: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with Emulator() as emu, BackgroundServer(noop_app()) as fn:
        settings = Settings(endpoint_url=emu.url, prefix="fanr", api_auth=False)
        with stack(settings, manifest(sizes), fn.url, fn.url, 1, 8) as (rt, obs, counter):
            say("R a run of one step …")
            counter.take()
            timed_run(rt, obs, "one")
            time.sleep(0.3)  # the last deletes and counts land (bench pacing only)
            fixed = sum(counter.take().values())
            out["fixed_per_run"] = fixed
            for n in sizes:
                say(f"R fan-out of {n} …")
                counter.take()
                t = timed_run(rt, obs, f"fan{n}")
                time.sleep(0.3)  # the last deletes and counts land (bench pacing only)
                counts = counter.take()
                out[str(n)] = {"steps": n + 2, "seconds": round(t, 2),
                               "requests_per_step": per_step(counts, n + 2),
                               "beyond_fixed_per_step": round(
                                   (sum(counts.values()) - fixed) / (n + 1), 3)}
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_answers(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer in {timeout}s")


def dispatch_time(n: int, workers: int, threads: int, spread: bool, emu_url: str,
                  fn_url: str, prefix: str) -> dict[str, float]:
    """One fan-out of `n` on `workers` worker processes; its dispatch and run times."""
    settings = Settings(endpoint_url=emu_url, prefix=prefix, api_auth=False)
    deploy_data_stack(make_clients(settings), prefix)
    text = manifest([n])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fan.yml"
        path.write_text(text)
        env = {**os.environ, "AWS_ENDPOINT_URL": emu_url, "ORCH_PREFIX": prefix,
               "FN": fn_url, "PYTHONPATH": str(ROOT),
               "ORCH_FANOUT_SLICE": "100" if spread else str(10 * n)}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "worker", "--manifest", str(path),
             "--threads", str(threads)], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
        try:
            m = manifest_from_text(text, "fan.yml", ROOT, {"FN": fn_url})
            rt = Runtime.build(settings, m)
            time.sleep(2.0)  # the workers import and start polling (bench pacing only)
            run = rt.runs.start(f"fan{n}", {})[0]
            end = wait_all(rt, [run.run_id], timeout=1200)
            rows = {s.step: s for s in rt.store.steps.query_steps(run.run_id)}
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    root = rows["start"].finished_at or 0.0
    last = max((rows[f"f{i}"].ready_at or 0.0) for i in range(n))
    return {"dispatch_s": round(last - root, 2), "run_s": round(end - run.created_at, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Smaller fan-outs (smoke run).")
    ap.add_argument("--compare", action="store_true",
                    help="Also measure D with the fan-out promoted by one worker alone.")
    ap.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--skip-r", action="store_true", help="Only D.")
    ap.add_argument("--skip-d", action="store_true", help="Only R.")
    args = ap.parse_args(argv)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    sizes = [10, 100, 500] if args.quick else [10, 100, 1000, 10000]
    wide = 500 if args.quick else 10000
    results: dict[str, Any] = {"threads": args.threads}
    if not args.skip_r:
        results["requests_per_step"] = requests_per_step(sizes, say)
    if args.skip_d:
        return _report(results, args.json)
    port = _free_port()
    emu_url = f"http://127.0.0.1:{port}"
    emu = subprocess.Popen([sys.executable, "-m", "infra.emulator", "--port", str(port)],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    modes = [True, False] if args.compare else [True]
    dispatch: dict[str, dict[str, float]] = {}
    try:
        _wait_answers(emu_url)
        with BackgroundServer(noop_app()) as fn:
            k = 0
            for workers in (1, 2, 4):
                for spread in modes:
                    k += 1
                    label = f"{workers} worker{'s' if workers > 1 else ''}" + (
                        "" if spread else ", one promoter")
                    say(f"D fan-out of {wide} on {label} …")
                    dispatch[label] = dispatch_time(wide, workers, args.threads, spread,
                                                    emu_url, fn.url, f"fand{k}")
    finally:
        emu.terminate()
        emu.wait(timeout=30)
    results["dispatch"] = {"steps": wide, "by_workers": dispatch}
    return _report(results, args.json)


def _report(results: dict[str, Any], as_json: bool) -> int:
    if "requests_per_step" in results:
        by_n = [v for k, v in results["requests_per_step"].items() if k != "fixed_per_run"]
        for key in ("requests_per_step", "beyond_fixed_per_step"):
            vals = [v[key]["total"] if key == "requests_per_step" else v[key] for v in by_n]
            results[f"{key}_spread"] = round(max(vals) / min(vals) - 1, 3)
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def render(r: dict[str, Any]) -> str:
    lines = []
    if "requests_per_step" in r:
        rs = r["requests_per_step"]
        lines.append("R  AWS requests per step, fan-out of N into one join (beyond the run's"
                     f" fixed {rs['fixed_per_run']} requests):")
        for n, v in rs.items():
            if n == "fixed_per_run":
                continue
            rps = v["requests_per_step"]
            ops = ", ".join(f"{op} {x}" for op, x in rps.items() if op != "total")
            lines.append(f"   N={n:>6}: {rps['total']:.3f} ({v['beyond_fixed_per_step']:.3f})"
                         f"  {ops}")
        lines.append(f"   largest / smallest - 1: {r['requests_per_step_spread']:+.1%}"
                     f" ({r['beyond_fixed_per_step_spread']:+.1%} beyond the fixed cost)")
    if "dispatch" not in r:
        return "\n".join(lines)
    d = r["dispatch"]
    lines.append(f"D  fan-out of {d['steps']}: root's success -> last leaf dispatched"
                 " (run's total):")
    for label, v in d["by_workers"].items():
        lines.append(f"   {label:<26} {v['dispatch_s']:>6.2f} s   ({v['run_s']:.1f} s)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
