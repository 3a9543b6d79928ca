"""What an in-script command costs a durable shell script, timed inside the script.

One script runs `orchestrator step s<i> -- true` N times, each timed with bash's
`EPOCHREALTIME`, then sleeps (the fake clock: no real wait) and ends. Its first pass runs
every step (a command, a checkpoint); the pass after the sleep replays from the top, and
each step is then answered from the journal. The figures are medians in milliseconds;
they measure the channel and the host, on the real engine on moto via WorkflowEnv.

    python tests/bench/script_commands.py [--steps 50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from functions.sdk.scripts import ScriptHost
from orchestrator.testing import WorkflowEnv

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        (where / "bench.sh").write_text(SCRIPT.format(steps=args.steps))
        times = where / "times"
        host = ScriptHost(directory=where)
        with WorkflowEnv(host.app) as env:
            run_id = env.start("bench", {"times": str(times)})
            env.run_until_idle()
            assert env.status(run_id) == "success", env.view(run_id)
        spans = [(float(b) - float(a)) * 1000.0
                 for a, b in (line.split() for line in times.read_text().splitlines())]
    fresh, replayed = spans[:args.steps], spans[args.steps:]
    print(f"steps: {args.steps}")
    print(f"first run, `orchestrator step x -- true`: median {statistics.median(fresh):.2f} ms"
          f" (p90 {statistics.quantiles(fresh, n=10)[-1]:.2f} ms)")
    print(f"answered from the journal: median {statistics.median(replayed):.2f} ms"
          f" (p90 {statistics.quantiles(replayed, n=10)[-1]:.2f} ms)")


if __name__ == "__main__":
    main()
