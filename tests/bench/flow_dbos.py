"""The peer of tests/bench/flow.py: DBOS Transact's queues (SQLite system database),
the same shapes. Run with the python of an environment where `dbos` is installed:

    $DBOS/bin/python tests/bench/flow_dbos.py [--sizes 100,1000,10000] [--backlog 1000,10000]

- **admissions**: a partitioned queue (global concurrency 8, 8 a partition); n
  workflows of one no-op step are enqueued over min(n, 100) partition keys while a
  holding workflow per slot keeps the queue full; the holders are let go (an event they
  wait for), and the figure is n over the time from then to the last one's end.
- **fairness**: partition A gets k workflows, then B one; the figure is how many
  workflows were dequeued between B's enqueue and B's dequeue, and how long B waited.
  `fifo`: the same on a queue without partitions.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from typing import Any

from dbos import DBOS, DBOSConfig, SetEnqueueOptions

SLOTS = 8
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--sizes", default="100,1000,10000")
parser.add_argument("--backlog", default="1000,10000")
parser.add_argument("--fifo", default="1000")
parser.add_argument("--poll", type=float, default=0.1, help="queue polling interval (s)")
parser.add_argument("--json", dest="json_out")
args = parser.parse_args()

folder = tempfile.mkdtemp(prefix="dbos-flow-")
config: DBOSConfig = {"name": "flow", "system_database_url": f"sqlite:///{folder}/sys.sqlite",
                      "log_level": "WARNING"}
DBOS(config=config)
# When each quick workflow's step ran, as the process saw it (DBOS keeps its own
# timestamps to the second on SQLite): (tenant, perf_counter()).
ran: list[tuple[str, float]] = []
ran_lock = threading.Lock()


@DBOS.step()
def noop(x: Any) -> Any:
    with ran_lock:
        ran.append((str(x), time.perf_counter()))
    return x


@DBOS.workflow()
def quick(tenant: str) -> str:
    return str(noop(tenant))


@DBOS.workflow()
def plug(name: str) -> str:
    DBOS.recv("go", timeout_seconds=3600)
    return name


DBOS.launch()
pool = DBOS.register_queue("pool", global_concurrency=SLOTS, partition_concurrency=SLOTS,
                           polling_interval_sec=args.poll, on_conflict="always_update")
fifo = DBOS.register_queue("fifo", global_concurrency=SLOTS, polling_interval_sec=args.poll,
                           on_conflict="always_update")


def enqueue(queue: Any, fn: Any, arg: str, key: str | None) -> Any:
    if key is None:
        return queue.enqueue(fn, arg)
    with SetEnqueueOptions(queue_partition_key=key):
        return queue.enqueue(fn, arg)


def plugged(queue: Any, keyed: bool) -> list[Any]:
    handles = [enqueue(queue, plug, f"p{i}", "plug" if keyed else None) for i in range(SLOTS)]
    deadline = time.time() + 60
    while any(h.get_status().status != "PENDING" or h.get_status().dequeued_at is None
              for h in handles):
        if time.time() > deadline:
            raise TimeoutError("the plugs did not start")
        time.sleep(0.05)
    return handles


def unplug(handles: list[Any]) -> float:
    began = time.time()
    for h in handles:
        DBOS.send(h.get_workflow_id(), "go", "go")
    return began


def admissions(n: int) -> dict[str, Any]:
    tenants = min(n, 100)
    # The plugs take the queue's 8 (their own partition: the global limit is what binds).
    plugs = plugged(pool, True)
    began = time.monotonic()
    handles = [enqueue(pool, quick, f"t{i % tenants}", f"t{i % tenants}") for i in range(n)]
    queued_s = time.monotonic() - began
    unplugged = unplug(plugs)
    for h in handles:
        h.get_result(polling_interval_sec=args.poll)
    done = time.time()  # polled: within a poll of the last one's end
    return {"n": n, "tenants": tenants, "queued_per_s": round(n / queued_s, 1),
            "admitted_per_s": round(n / (done - unplugged), 1)}


def fairness(k: int, keyed: bool) -> dict[str, Any]:
    queue = pool if keyed else fifo
    plugs = plugged(queue, keyed)
    a = [enqueue(queue, quick, "A", "A" if keyed else None) for _ in range(k)]
    with ran_lock:
        ran.clear()
    b_sent = time.perf_counter()
    b = enqueue(queue, quick, "B", "B" if keyed else None)
    unplug(plugs)
    b.get_result(polling_interval_sec=args.poll)
    for h in a:
        h.get_result(polling_interval_sec=args.poll)
    with ran_lock:
        b_ran = next(t for who, t in ran if who == "B")
        before = [t for who, t in ran if who == "A" and t < b_ran]
    return {"k": k, "queue": "partitioned" if keyed else "fifo",
            "admissions_before_b": len(before),
            "b_waited_ms": round((b_ran - b_sent) * 1000, 1)}


out: dict[str, Any] = {"peer": "dbos", "poll": args.poll, "admissions": [], "fairness": []}
for n in (int(x) for x in args.sizes.split(",") if x):
    out["admissions"].append(admissions(n))
    print("admissions", json.dumps(out["admissions"][-1]), flush=True)
fifo_sizes = {int(x) for x in args.fifo.split(",") if x}
for k in (int(x) for x in args.backlog.split(",") if x):
    out["fairness"].append(fairness(k, True))
    print("fairness", json.dumps(out["fairness"][-1]), flush=True)
    if k in fifo_sizes:
        out["fairness"].append(fairness(k, False))
        print("fairness", json.dumps(out["fairness"][-1]), flush=True)
if args.json_out:
    with open(args.json_out, "w") as f:
        f.write(json.dumps(out, indent=2) + "\n")
DBOS.destroy()
