"""The peer of tests/bench/console.py: DBOS Transact (SQLite system database), the same
two figures. Run with the python of an environment where `dbos` is installed:

    $DBOS/bin/python tests/bench/console_dbos.py [--stored 1000,10000,100000]
                                                 [--cancel 100,1000,10000]

- **search**: n workflows stored, each started with workflow attributes (DBOS's
  searchable key-values: `order` i, `customer` one of 1,000), then found 20 times each:
  a rare value (one workflow), a common one (a page of 20, newest first). DBOS has no
  search of a workflow's input or error text: attributes are its way to find a workflow
  by what it carried. Its `list_workflows(attributes=...)` needs a Postgres system
  database ("not supported on SQLite"), so on SQLite the query is the one an operator
  would write against its documented `workflow_status` table
  (`json_extract(attributes, '$.customer') = ?`, newest first, LIMIT 20).
- **bulk cancel**: n workflows enqueued behind a holder on a queue of concurrency 1,
  found by their attribute (the same query) and cancelled with
  `DBOS.cancel_workflows(ids)`; the figure is the find and the cancel together.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowAttributes

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--stored", default="1000,10000,100000")
parser.add_argument("--cancel", default="100,1000,10000")
parser.add_argument("--json", dest="json_out")
args = parser.parse_args()

folder = tempfile.mkdtemp(prefix="dbos-console-")
config: DBOSConfig = {"name": "console", "log_level": "WARNING",
                      "system_database_url": f"sqlite:///{folder}/sys.sqlite"}
DBOS(config=config)


@DBOS.workflow()
def order(i: int) -> int:
    return i


@DBOS.workflow()
def plug(name: str) -> str:
    DBOS.recv("go", timeout_seconds=3600)
    return name


DBOS.launch()
held = DBOS.register_queue("held", concurrency=1, polling_interval_sec=0.1)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def find(key: str, value: Any, limit: int | None = 20, status: str | None = None) -> list[str]:
    """Workflow ids whose attribute `key` is `value`, newest first (the SQL an operator
    runs against DBOS's SQLite system database)."""
    with sqlite3.connect(f"{folder}/sys.sqlite") as db:
        sql = ("SELECT workflow_uuid FROM workflow_status WHERE"
               f" json_extract(attributes, '$.{key}') = ?")
        params: list[Any] = [value]
        if status:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC"
        if limit:
            sql += f" LIMIT {limit}"
        return [r[0] for r in db.execute(sql, params)]


def seed(lo: int, hi: int) -> float:
    """Start workflows lo..hi-1, four at a time; the workflows a second."""
    def one(i: int) -> None:
        with SetWorkflowAttributes({"order": i, "customer": f"c{i % 1000}"}):
            order(i)

    began = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(lo, hi)))
    return (hi - lo) / (time.monotonic() - began)


def search(n: int) -> dict[str, Any]:
    out = {}
    for name, attrs in {"rare exact (1 run)": {"order": n // 2},
                        "common exact (a page)": {"customer": "c7"}}.items():
        times = []
        found = 0
        for _ in range(20):
            began = time.monotonic()
            (key, value), = attrs.items()
            got = find(key, value)
            times.append((time.monotonic() - began) * 1000)
            found = len(got)
        out[name] = {"found": found, "ms_median": round(statistics.median(times), 1),
                     "ms_p95": round(pct(times, 95), 1)}
        print(f"  {n:>7} stored  {name:<24} {out[name]['ms_median']:>7} ms (p95"
              f" {out[name]['ms_p95']}) {found:>3} found", flush=True)
    return out


def bulk_cancel(n: int, batch: str) -> dict[str, Any]:
    for i in range(n):
        with SetWorkflowAttributes({"batch": batch}):
            held.enqueue(order, i)
    began = time.monotonic()
    ids = find("batch", batch, limit=None, status="ENQUEUED")
    DBOS.cancel_workflows(ids)
    took = time.monotonic() - began
    assert len(ids) == n, (len(ids), n)
    assert DBOS.get_workflow_status(ids[0]).status == "CANCELLED"  # type: ignore[union-attr]
    out = {"runs": n, "seconds": round(took, 3), "runs_per_second": round(n / took, 1)}
    print(f"  bulk cancel {n:>6}: {out['seconds']} s, {out['runs_per_second']} runs/s",
          flush=True)
    return out


result: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M"), "search": {},
                          "bulk_cancel": [], "seed_per_second": {}}
holder = held.enqueue(plug, "holder")
for i, n in enumerate(int(x) for x in args.cancel.split(",") if x):
    result["bulk_cancel"].append(bulk_cancel(n, f"b{i}"))
have = 0
for n in (int(x) for x in args.stored.split(",") if x):
    rate = seed(have, n)
    result["seed_per_second"][n] = round(rate, 1)
    print(f"seeded {n} workflows ({rate:.0f}/s)", flush=True)
    have = n
    result["search"][n] = search(n)
DBOS.send(holder.workflow_id, "go", "go")
holder.get_result()
if args.json_out:
    with open(args.json_out, "w") as f:
        json.dump(result, f, indent=2)
DBOS.destroy()
