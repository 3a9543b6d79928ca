"""The embedded emulator's cost per request, moto as shipped against moto memoized
(infra/emulator/speedups/), in one process, interleaved: figures, not pass/fail timing.

  update   a step claim as the store sends it (7 SET actions with arithmetic, if_not_exists
           and list_append, a REMOVE, a 4-clause guard) on a fresh 25-attribute step row
  get      GetItem of that row
  query    a run's 202 step rows by partition key, beside 2,000 rows of other runs
  wake     the sweeper's wake-index query (shard and time range) over the same table

Each figure is the best of several batches (ms per request, called in-process through
botocore as `orchestrator dev` does; the DynamoDB lock is uncontended here).

    python tests/bench/emulator.py [--quick] [--rounds N] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infra.emulator import Emulator, speedups  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402

ROW: dict[str, Any] = {
    "status": {"S": "ready"}, "backend": {"S": "fn"}, "route": {"S": "/noop"},
    "deps": {"S": '["s9"]'}, "dependants": {"S": '["s11"]'}, "payload": {"S": "{}"},
    "attempt": {"N": "1"}, "max_attempts": {"N": "4"}, "timeout": {"N": "60"},
    "retry_strategy": {"S": "linear"}, "retry_delay": {"N": "1"},
    "retry_max_delay": {"N": "300"}, "wake_shard": {"N": "3"},
    "ready_at": {"N": "1796138653.999"}, "wake_at": {"N": "1796138655.016"},
    "history": {"L": [{"S": '{"at":1796138653.999,"type":"step.ready"}'}]},
    "satisfied": {"SS": ["s9"]}, "expires_at": {"N": "1798730654.016"},
}
CLAIM = {
    "UpdateExpression": (
        "SET #s = :d, lease_owner = :o, lease_until = #t + :lu, wake_at = #t + :lu,"
        " started_at = if_not_exists(started_at, :now), attempt_started = :now,"
        " #h = list_append(if_not_exists(#h, :nil), :h) REMOVE due_at"),
    "ConditionExpression": ("attempt = :n AND attribute_not_exists(lease_owner)"
                            " AND #s IN (:r, :x) AND attribute_not_exists(stopping)"),
    "ExpressionAttributeNames": {"#s": "status", "#h": "history", "#t": "timeout"},
    "ExpressionAttributeValues": {
        ":d": {"S": "dispatched"}, ":o": {"S": "w"}, ":lu": {"N": "5"},
        ":now": {"N": "1796138654"}, ":n": {"N": "1"}, ":r": {"S": "ready"},
        ":x": {"S": "dispatched"}, ":nil": {"L": []},
        ":h": {"L": [{"S": '{"at":1796138654,"type":"step.started","attempt":1}'}]}},
}


def best(batches: int, fn: Callable[[int], Any], n: int,
         before: Callable[[int], Any] | None = None) -> float:
    """ms per call: the best of `batches` batches of `n` calls (`before` untimed)."""
    out = float("inf")
    for b in range(batches):
        if before is not None:
            for i in range(n):
                before(b * n + i)
        t0 = time.perf_counter()
        for i in range(n):
            fn(b * n + i)
        out = min(out, (time.perf_counter() - t0) / n * 1000)
    return out


def measure(ddb: Any, table: str, tag: str, rounds: int) -> dict[str, float]:
    def key(i: int) -> dict[str, Any]:
        return {"run_id": {"S": f"{tag}-u"}, "step": {"S": f"s{i}"}}

    def fresh(i: int) -> None:
        ddb.put_item(TableName=table, Item={**ROW, **key(i)})

    def claim(i: int) -> None:
        ddb.update_item(TableName=table, Key=key(i), ReturnValues="NONE", **CLAIM)

    one = {"run_id": {"S": "big"}, "step": {"S": "s0"}}
    return {
        "update": best(4, claim, rounds, before=fresh),
        "get": best(4, lambda i: ddb.get_item(TableName=table, Key=one), rounds),
        "query": best(3, lambda i: ddb.query(
            TableName=table, KeyConditionExpression="run_id = :r",
            ExpressionAttributeValues={":r": {"S": "big"}}), 3),
        "wake": best(3, lambda i: ddb.query(
            TableName=table, IndexName="wake",
            KeyConditionExpression="wake_shard = :s AND wake_at BETWEEN :a AND :b",
            ExpressionAttributeValues={":s": {"N": "3"}, ":a": {"N": "1796138655.5"},
                                       ":b": {"N": "1796138656"}}), 5),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100, help="requests per batch")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small tables, few rounds (smoke)")
    args = ap.parse_args(argv)
    run_rows, other_rows = (20, 200) if args.quick else (202, 2000)
    if args.quick:
        args.rounds = min(args.rounds, 5)
    with Emulator() as emu:
        settings = Settings(endpoint_url=emu.url, prefix="benchemu")
        clients = emu.attach(make_clients(settings))
        deploy_data_stack(clients, settings.prefix)
        ddb, table = clients.dynamodb, settings.names.steps_table
        for i in range(run_rows):
            ddb.put_item(TableName=table, Item={**ROW, "run_id": {"S": "big"},
                                                "step": {"S": f"s{i}"}})
        for i in range(other_rows):
            ddb.put_item(TableName=table, Item={**ROW, "run_id": {"S": f"other{i % 20}"},
                                                "step": {"S": f"s{i}"}})
        figures: dict[str, dict[str, float]] = {}
        for turn in range(2):  # interleaved: stock, memoized, stock, memoized
            for name in ("stock", "memoized"):
                if name == "stock":
                    speedups.uninstall()
                elif not speedups.install():
                    raise SystemExit("the memo does not apply to this moto version")
                got = measure(ddb, table, f"{name}{turn}", args.rounds)
                mine = figures.setdefault(name, {})
                for k, v in got.items():
                    mine[k] = min(mine.get(k, float("inf")), v)
        speedups.install()
    if args.json:
        print(json.dumps({k: {m: round(v, 2) for m, v in f.items()}
                          for k, f in figures.items()}, indent=2))
        return 0
    print(f"{'ms per request':<16}{'stock moto':>12}{'memoized':>12}")
    for m in ("update", "get", "query", "wake"):
        print(f"{m:<16}{figures['stock'][m]:>12.2f}{figures['memoized'][m]:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
