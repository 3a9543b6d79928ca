"""The benchmark must keep running: a --quick pass prints every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parents[2]


def quick(script: str) -> dict[str, Any]:
    """The figures `tests/bench/<script> --quick --json` prints."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / script), "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.slow
def test_quick_benchmark_prints_its_figures() -> None:
    r = quick("run.py")
    for key in ("floor_ms", "w1", "w2", "w3", "fan10", "fan100", "worker_peak_rss_mib",
                "h1", "h2", "d1", "d2", "d3"):
        assert key in r
    assert r["d1"]["http_calls_per_step"] > 0 and r["d1"]["requests_per_step"]["total"] > 0
    assert r["d2"]["steps_per_s"] > 0 and r["d3"]["ratio"] > 0
    assert 0 < r["h1"]["p50_ms"] <= r["h1"]["p99_ms"] and r["h1"]["p50_ratio_to_floor"] > 0
    assert r["h2"]["per_s"] > 0 and r["h2"]["requests_per_delivery"]["total"] > 0
    assert r["w1"]["per_step_ms"] > 0 and r["w1"]["ratio_to_floor"] > 0
    assert r["fan100"]["requests_per_step"]["total"] > 0
    assert set(r["targets"]) == {
        "w1_ratio_le_1.5", "requests_per_step_flat_10pct", "requests_per_step_le_6",
        "durable_requests_per_step_le_1.2", "durable_at_most_one_http_call_per_step",
        "replay_linear"}


@pytest.mark.slow
def test_the_dashboard_benchmark_times_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "dashboard.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "dashboard_open.py"), "--rounds", "2",
         "--steps", "10", "--viewer", "stream", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    for side in ("closed", "open"):
        assert r[side]["ms_per_step_median"] > 0 and r[side]["dev_rss_mb_max"] > 0
    assert r["ratio_open_over_closed"] > 0


@pytest.mark.slow
def test_the_coordination_benchmark_prints_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "coordination.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "coordination.py"), "--sizes", "5",
         "--locks", "3", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    [gate], [lock], [cells] = r["approvals"], r["locks"], r["state"]
    assert 0 < gate["round_trip_ms_p50"] <= gate["round_trip_ms_p95"]
    assert gate["requests_per_approval"] > 0 and gate["dollars_per_million_approvals"] > 0
    assert lock["handover_ms_p50"] >= 0 and lock["requests_per_locked_run"] > 0
    assert cells["api_put_per_s"] > 0 and cells["durable_incr_per_s"] > 0


@pytest.mark.slow
def test_quick_emulator_benchmark_prints_both_sides() -> None:
    r = quick("emulator.py")
    assert set(r) == {"stock", "memoized"}
    for side in r.values():
        assert set(side) == {"update", "get", "query", "wake"}
        assert all(v > 0 for v in side.values())


@pytest.mark.slow
def test_quick_aws_scale_benchmark_runs_every_workload_under_the_model() -> None:
    r = quick("aws_scale.py")
    assert r["write_units_per_second"] == 1000
    assert set(r["workloads"]) == {"w1", "start", "webhook", "durable", "fanout", "foreach",
                                   "concurrent"}
    for name, w in r["workloads"].items():
        assert "error" not in w, (name, w)
        assert w["model"]["requests"] > 0 and w["cost"]["aws_requests"] > 0
        proof = w["proof"]
        assert proof["runs_not_success"] == 0 and proof["called_twice"] == 0
        assert proof["steps_called"] == proof["steps_expected"] == w["steps"]
    assert 0 < r["workloads"]["start"]["p50_ms"] <= r["workloads"]["start"]["p99_ms"]
    for name in ("durable", "fanout", "foreach", "concurrent"):
        w = r["workloads"][name]
        assert w["wall_s"] > 0 and w["model"]["bound_s"] > 0 and w["wall_over_bound"] > 0


@pytest.mark.slow
def test_quick_cost_benchmark_prices_every_workload() -> None:
    r = quick("cost.py")
    assert set(r["workloads"]) == {"w1", "w2", "w3", "w4"}
    for w in r["workloads"].values():
        step = w["per_step"]
        assert step["wru"] > 0 and step["rru"] > 0 and step["sqs_billed"] > 0
        assert step["invocations"]["worker"] > 0 and step["gb_s"]["worker"] > 0
        assert w["dollars_per_million_steps_total"] > 0
        assert w["compare"]["step_functions_standard"] >= 25.0
    assert r["workloads"]["w4"]["per_step"]["invocations"]["api"] > 0  # the deliveries
    assert r["moto_consumed_capacity"]["put"]["aws_rule"] == 3
    assert r["sweeper"]["busy_minute"]["passes"] >= 1 and r["sweeper"]["per_pass"]["wru"] > 0
    # The durable runs: D1 (a chain) and D2 (a parallel, all at once), each at two sizes.
    assert set(r["durable"]) == {"d1_20", "d1_200", "d2_20", "d2_100"}
    for w in r["durable"].values():
        step = w["per_step"]
        assert step["requests_total"] > 0 and step["requests"]["TransactWriteItems"] > 0
        assert step["wru"] >= 2  # each checkpoint a transactional write: 2 WRU at least
        assert step["sqs_billed"] > 0 and step["gb_s"]["worker"] > 0
        assert 0 < step["durable_calls"] <= 1 and step["aws_wait_ms"]
        assert isinstance(w["target_met"], bool) and isinstance(w["requests_target_met"], bool)
        assert 0 <= w["emulator_commits"]["total_without"] <= w["dollars_per_million_steps_total"]
        assert w["dollars_per_million_steps_total"] > 0
        assert w["compare"]["lambda_durable_functions"] >= 8.0  # $8 per million operations
    assert r["moto_consumed_capacity"]["transaction"]["aws_rule"] == 8  # 2 x 2 KB, twice
    assert set(r["targets"]) == {"durable_dollars_per_million_le_2",
                                 "durable_dollars_per_million_le_2_emulator_commits_excluded",
                                 "durable_requests_per_step_le_1.2"}
    assert all(isinstance(v, bool) for v in r["targets"].values())


def test_capacity_follows_aws_rules() -> None:
    from tests.bench.capacity import Index, TableShape, item_size, read_units, write_units

    assert item_size({"pk": {"S": "abc"}}) == 5
    assert item_size({"n": {"N": "0012.3400"}}) == 1 + 3  # digits 1234: two bytes and one
    assert item_size({"b": {"BOOL": True}, "z": {"NULL": True}}) == 4
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}) == 1 + 3 + 3 + 3
    assert item_size({"m": {"M": {"k": {"S": "v"}}}, "s": {"SS": ["a", "bc"]}}) == 7 + 4
    assert (write_units(1024), write_units(1025), write_units(0)) == (1, 2, 1)
    assert (read_units(4096, True), read_units(4097, False), read_units(0, False)) == (1, 1, 0.5)
    shape = TableShape("t", ("id",), (Index("wake", ("w",), "KEYS_ONLY"),
                                      Index("all", ("g",), "ALL")))
    row = {"id": {"S": "1"}, "g": {"S": "x"}, "pad": {"S": "p" * 1500}}
    assert shape.index_units(None, row) == {"all": 2}  # enters ALL by its 1.5 KB
    woken = {**row, "w": {"N": "5"}}
    assert shape.index_units(row, woken) == {"wake": 1, "all": 2}  # enters KEYS_ONLY
    assert shape.index_units(woken, {**woken, "w": {"N": "6"}}) == {"wake": 2, "all": 2}
    assert shape.index_units(woken, {**woken, "pad": {"S": "q"}}) == {"all": 1}
    assert shape.index_units(woken, {k: v for k, v in woken.items() if k != "w"}) == {
        "wake": 1, "all": 2}  # leaves KEYS_ONLY; ALL's entry changed


def test_transactional_writes_follow_aws_rules() -> None:
    """AWS: each item of a TransactWriteItems costs two writes (prepare, commit) of 1 WRU
    per started KB; its index writes are ordinary ones."""
    from tests.bench.capacity import Index, TableShape, item_size, write_cost

    shape = TableShape("t", ("id",), (Index("wake", ("w",), "KEYS_ONLY"),))
    small = {"id": {"S": "1"}, "pad": {"S": "p" * 500}}
    large = {"id": {"S": "2"}, "pad": {"S": "p" * 1500}}
    assert item_size(small) < 1024 < item_size(large) <= 2048
    assert write_cost(shape, None, small) == {"t": 1}
    assert write_cost(shape, None, small, transactional=True) == {"t": 2}  # 2 x 1 KB
    assert write_cost(shape, None, large, transactional=True) == {"t": 4}  # 2 x 2 KB
    three_kb = {"id": {"S": "3"}, "pad": {"S": "p" * 3000}}
    # A condition check: a write of the item's size, though nothing changes.
    assert write_cost(shape, three_kb, three_kb, transactional=True) == {"t": 6}
    assert write_cost(shape, three_kb, None, transactional=True) == {"t": 6}  # a delete
    woken = {**small, "w": {"N": "5"}}
    # Entering an index: the index entry (keys only, under 1 KB) is 1, not doubled.
    assert write_cost(shape, small, woken, transactional=True) == {"t": 2, "t/wake": 1}
    assert write_cost(shape, small, woken) == {"t": 1, "t/wake": 1}


def test_meter_prices_a_transaction_on_the_emulator(emulator: Any) -> None:
    """The meter, on real requests: a committed TransactWriteItems of a 500-byte and a
    1.5 KB put is 2 + 4 WRU, the index entry one more; a cancelled one is counted and
    costed as if committed (an upper bound: AWS publishes no rule)."""
    import uuid

    from orchestrator.adapters.aws import make_clients
    from orchestrator.settings import Settings
    from tests.bench.capacity import Meter, table_shapes

    clients = make_clients(Settings(endpoint_url=emulator.url))
    reader = make_clients(Settings(endpoint_url=emulator.url)).dynamodb
    table = f"meter-{uuid.uuid4().hex[:8]}"
    clients.dynamodb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"},
                              {"AttributeName": "w", "AttributeType": "N"}],
        GlobalSecondaryIndexes=[{"IndexName": "wake", "Projection": {"ProjectionType": "KEYS_ONLY"},
                                 "KeySchema": [{"AttributeName": "w", "KeyType": "HASH"}]}])
    meter = Meter(clients, reader, table_shapes(reader, [table]))
    meter.capacity = True

    def put(item_id: str, pad: int, **extra: Any) -> dict[str, Any]:
        item = {"id": {"S": item_id}, "pad": {"S": "p" * pad}, **extra}
        return {"Put": {"TableName": table, "Item": item,
                        "ConditionExpression": "attribute_not_exists(id)"}}

    with meter.role("worker"):
        clients.dynamodb.transact_write_items(
            TransactItems=[put("a", 500), put("b", 1500, w={"N": "1"})])
    tally = meter.take()["worker"]
    assert tally.requests == {"TransactWriteItems": 1}
    assert dict(tally.wru) == {table: 6, f"{table}/wake": 1}
    assert tally.cancelled_transactions == 0
    with meter.role("worker"), pytest.raises(ClientError) as refused:
        clients.dynamodb.transact_write_items(TransactItems=[put("c", 10), put("b", 10)])
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    tally = meter.take()["worker"]
    # "c" absent (1 KB at least), "b" as it is (1.5 KB: 2 KB), each twice.
    assert tally.cancelled_transactions == 1 and dict(tally.wru) == {table: 2 + 4}
