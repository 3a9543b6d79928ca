"""Before and after, back to back: issue 8's workloads (W1 a chain of 50, W2 a fan-out of
200 into a join, W3 20 concurrent runs of a 5-step chain) and the floor, run by two
checkouts' own tests/bench/run.py in turn, each round a fresh process per side, then the
medians. On a shared machine one run's figures swing 1.5-2x with the neighbours; rounds
that alternate sides see the same swings, and the medians compare them fairly.

    git worktree add /tmp/before <commit>
    python tests/bench/ab.py --before /tmp/before [--rounds 5] [--json]

Each side must have tests/bench/run.py with `stack`, `floor`, `timed_run`,
`manifest_text`, `Stamps` and `TRANSPORT` (the in-process transport), as since issue 8.
Engine time comes from the runs' own timestamps, as in run.py."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter with the checkout first on sys.path: its own code, its own
# bench helpers (its observer, its settings), one line of JSON out.
ONE_SIDE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from tests.bench import run as B
from functions.examples.noop import create_app as noop_app
from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.settings import Settings

sizes = {"w1": 50, "w2": 200, "w3": 20, "r_large": 100, "floor": 20, "h1": 5, "h2": 5}
text = B.manifest_text(sizes)
stamps = B.Stamps()
with Emulator() as emu, BackgroundServer(noop_app()) as fn, \
        BackgroundServer(stamps.app()) as sfn:
    B.TRANSPORT["emulator"] = emu
    settings = Settings(endpoint_url=emu.url, prefix="ab", sweep_interval=5.0,
                        api_auth=False)
    with B.stack(settings, text, fn.url, sfn.url, 1, 8) as (rt, obs, counter):
        fl = B.floor(settings, fn.url, sizes["floor"])["total"]
        out = {"floor_ms": fl}
        counter.take()
        t = B.timed_run(rt, obs, "w1")
        out["w1_ms_per_step"] = t / 50 * 1000
        out["w1_requests"] = sum(counter.take().values()) / 50
        t = B.timed_run(rt, obs, "w2")
        out["w2_steps_per_s"] = 202 / t
        out["w2_requests"] = sum(counter.take().values()) / 202
        t = B.timed_run(rt, obs, "w3", runs=20)
        out["w3_steps_per_s"] = 100 / t
        out["w3_requests"] = sum(counter.take().values()) / 100
print(json.dumps(out))
"""

FIGURES = ("floor_ms", "w1_ms_per_step", "w2_steps_per_s", "w3_steps_per_s",
           "w1_requests", "w2_requests", "w3_requests")


def one(tree: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", ONE_SIDE, str(tree)], cwd=tree,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the workloads failed:\n{proc.stderr[-3000:]}")
    out: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the other checkout")
    ap.add_argument("--after", type=Path, default=ROOT, help="default: this checkout")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for side in ("before", "after"):
            got = one(getattr(args, side).resolve())
            runs[side].append(got)
            print(f"round {i + 1} {side:6} " + "  ".join(
                f"{k} {got[k]:.2f}" for k in FIGURES), file=sys.stderr, flush=True)
    medians: dict[str, Any] = {
        side: {k: round(statistics.median(r[k] for r in rs), 2) for k in FIGURES}
        for side, rs in runs.items()}
    ranges = {side: {k: [round(min(r[k] for r in rs), 2), round(max(r[k] for r in rs), 2)]
                     for k in FIGURES} for side, rs in runs.items()}
    if args.json:
        print(json.dumps({"rounds": args.rounds, "median": medians, "range": ranges,
                          "runs": runs}, indent=2))
    else:
        for k in FIGURES:
            b, a = medians["before"][k], medians["after"][k]
            print(f"{k:16} before {b:8.2f} {ranges['before'][k]}   after {a:8.2f} "
                  f"{ranges['after'][k]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
