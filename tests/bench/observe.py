"""Following a run: does watching it slow it, and how soon does the watcher learn its end?

A chain of 50 no-op steps on the embedded stack (as tests/bench/run.py), run unobserved
and then followed by `trigger --wait`'s own loop (orchestrator.cli.runs.wait_for, over
the HTTP API), alternately, several rounds:

- the run's own duration (created → finished, from its row), unobserved and observed;
- the follower's lag: when `wait_for` returned, minus the run's finish time.

    python tests/bench/observe.py [--rounds 5] [--json]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.examples.noop import create_app as noop_app  # noqa: E402
from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import Emulator  # noqa: E402
from orchestrator.api.app import create_app  # noqa: E402
from orchestrator.cli.client import ApiClient  # noqa: E402
from orchestrator.cli.runs import wait_for  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from tests.bench import run as B  # noqa: E402

STEPS = 50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = {"w1": STEPS, "w2": 10, "w3": 1, "r_large": 20, "floor": 1, "h1": 1, "h2": 1}
    text = B.manifest_text(sizes)
    stamps = B.Stamps()
    out: dict[str, list[float]] = {"unobserved_s": [], "observed_s": [], "lag_ms": []}
    with Emulator() as emu, BackgroundServer(noop_app()) as fn, \
            BackgroundServer(stamps.app()) as sfn:
        B.TRANSPORT["emulator"] = emu
        settings = Settings(endpoint_url=emu.url, prefix="obs", sweep_interval=5.0,
                            api_auth=False)
        with B.stack(settings, text, fn.url, sfn.url, 1, 8) as (rt, observer, _), \
                BackgroundServer(create_app(rt)) as api:
            client = ApiClient(api.url)

            def duration(run_id: str) -> tuple[float, float]:
                row = observer.store.runs.get_run(run_id, time.time())
                assert row is not None and row.finished_at is not None, run_id
                return row.finished_at - row.created_at, row.finished_at

            for _ in range(args.rounds):
                run_id = rt.runs.start("w1", {})[0].run_id
                B.wait_all(observer, [run_id])
                out["unobserved_s"].append(duration(run_id)[0])
                run_id = rt.runs.start("w1", {})[0].run_id
                view = wait_for(client, run_id, 120)
                returned = time.time()
                assert view["status"] == "success", view
                took, finished = duration(run_id)
                out["observed_s"].append(took)
                out["lag_ms"].append((returned - finished) * 1000)
    medians = {k: statistics.median(v) for k, v in out.items()}
    if args.json:
        print(json.dumps({"rounds": args.rounds, "median": medians, "runs": out}))
        return
    slower = medians["observed_s"] / medians["unobserved_s"] - 1
    print(f"chain of {STEPS}, medians of {args.rounds} alternating rounds:")
    print(f"  unobserved {medians['unobserved_s']:.2f} s, followed by trigger --wait"
          f" {medians['observed_s']:.2f} s ({slower:+.0%})")
    print(f"  --wait returned {medians['lag_ms']:.0f} ms after the run's end"
          f" (max {max(out['lag_ms']):.0f} ms)")


if __name__ == "__main__":
    main()
