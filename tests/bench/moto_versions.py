"""W1 (a chain of 100 no-op steps, tests/bench/run.py) per moto version, with the
emulator's speed-ups and without (ORCH_MOTO_STOCK=1), rounds interleaved so that the
machine's drift falls on every cell alike. Each version runs in its own environment:

    python tests/bench/moto_versions.py --env 5.2.1=/tmp/venv-5.2.1/bin/python \\
        --env 5.2.5=.venv/bin/python --rounds 3

prints a table (median ms/step, with the range, and AWS requests per step) and, with
--json, the figures."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

RUN = Path(__file__).resolve().parent / "run.py"


def once(python: str, stock: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_MOTO_STOCK",
                                                            "ORCH_MOTO_SPEEDUPS_OFF")}
    if stock:
        env["ORCH_MOTO_STOCK"] = "1"
    out = subprocess.run([python, str(RUN), "--only-w1"], env=env, capture_output=True,
                         text=True, check=True, timeout=900).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", action="append", required=True, metavar="LABEL=PYTHON")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    envs = [tuple(e.split("=", 1)) for e in args.env]
    cells: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for turn in range(args.rounds):
        for label, python in envs:
            for stock in ((False, True) if turn % 2 == 0 else (True, False)):
                got = once(python, stock)
                cells.setdefault((label, stock), []).append(got)
                print(f"round {turn + 1} moto {got['moto']['version']} "
                      f"{'stock' if stock else 'speed-ups'}: {got['w1']['per_step_ms']} ms/step",
                      file=sys.stderr, flush=True)
    rows = []
    for label, _ in envs:
        row: dict[str, Any] = {"label": label}
        for stock in (False, True):
            runs = cells[(label, stock)]
            ms = [r["w1"]["per_step_ms"] for r in runs]
            key = "stock" if stock else "speedups"
            row["moto"] = runs[0]["moto"]["version"]
            row[key] = {"median": statistics.median(ms), "min": min(ms), "max": max(ms),
                        "requests_per_step": runs[0]["w1"]["requests_per_step"]["total"],
                        "floor_ms": statistics.median(r["floor_ms"]["total"] for r in runs),
                        "active": runs[0]["moto"]["speedups_active"]}
        row["gain"] = round(row["stock"]["median"] / row["speedups"]["median"], 2)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'moto':<8}{'W1 ms/step, speed-ups':>26}{'W1 ms/step, stock':>24}{'gain':>7}"
          f"{'speed-ups on':>14}{'requests/step':>15}")
    for row in rows:
        sp, st = row["speedups"], row["stock"]
        print(f"{row['moto']:<8}{sp['median']:>10.2f} ({sp['min']:.2f}-{sp['max']:.2f})"
              f"{'':>3}{st['median']:>10.2f} ({st['min']:.2f}-{st['max']:.2f})"
              f"{row['gain']:>7.2f}{len(sp['active']):>14}{sp['requests_per_step']:>15}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
