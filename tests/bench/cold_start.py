"""Cold start of each Lambda handler, each in a fresh interpreter as a new container is:
the handler module's import (what Lambda's init phase pays), then the first event (the
container's imports, its manifest and settings read once, the clients, the queue URLs,
the event itself) and a second event (warm), against the embedded emulator over HTTP.

    python tests/bench/cold_start.py [--json]

The first event's time includes what the emulator answers locally; on AWS the clients'
first requests also pay TLS set-up."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.emulator import Emulator  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402

MANIFEST = """
backends:
  fn: { url: "http://127.0.0.1:9" }
workflows:
  one:
    steps:
      a: { backend: fn, route: /a }
"""

# Run in a fresh interpreter: one line of JSON out.
ONE = r"""
import json, sys, time
t0 = time.perf_counter()
import orchestrator.lambda_handlers as L
t1 = time.perf_counter()
from infra.lambda_events import Context, http_event
which = sys.argv[1]
if which == "api":
    event = http_event("GET", "/healthz")
elif which == "worker":
    event = {"Records": []}
else:
    event = {"source": "aws.events"}
ctx = Context(timeout=0.5)  # the sweeper makes one pass
t2 = time.perf_counter()
getattr(L, which)(event, ctx)
t3 = time.perf_counter()
getattr(L, which)(event, Context(timeout=0.5))
t4 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "first_event_ms": (t3 - t2) * 1000,
                  "warm_event_ms": (t4 - t3) * 1000,
                  "modules": len(sys.modules)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, dict[str, float]] = {}
    with Emulator() as emu, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(endpoint_url=emu.url, prefix="cold", api_auth=False)
        deploy_data_stack(make_clients(settings), settings.prefix)
        Path(tmp, "orchestrator.yml").write_text(MANIFEST)
        env = {**os.environ, "LAMBDA_TASK_ROOT": tmp, "ORCH_MANIFEST": "orchestrator.yml",
               "ORCH_PREFIX": "cold", "AWS_ENDPOINT_URL": emu.url, "ORCH_API_AUTH": "off",
               "ORCH_SWEEP_INTERVAL": "1", "ORCH_LAMBDA_MARGIN": "0.5",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "PYTHONPATH": str(ROOT)}
        for which in ("api", "worker", "sweeper"):
            runs = []
            for _ in range(args.rounds):
                res = subprocess.run([sys.executable, "-c", ONE, which], env=env, cwd=tmp,
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            out[which] = {k: round(sorted(r[k] for r in runs)[len(runs) // 2], 1)
                          for k in runs[0]}
    if args.json:
        print(json.dumps(out))
        return
    print("handler   import (init)   first event   warm event   modules  (medians of "
          f"{args.rounds} fresh interpreters)")
    for which, f in out.items():
        print(f"{which:8s}  {f['import_ms']:9.1f} ms  {f['first_event_ms']:9.1f} ms"
              f"  {f['warm_event_ms']:8.1f} ms  {int(f['modules']):7d}")


if __name__ == "__main__":
    main()
