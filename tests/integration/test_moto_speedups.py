"""The emulator's memo of moto's DynamoDB expression work (infra/emulator/speedups/) answers
exactly as moto does: the same items, the same errors, also when one expression text comes
back with other names or values that make it invalid."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.emulator import Emulator, speedups
from orchestrator.adapters.aws import make_clients
from orchestrator.settings import Settings

SET_MANY = (
    "SET #s = :d, lease_owner = :o, lease_until = #t + :lu, started_at ="
    " if_not_exists(started_at, :now), #h = list_append(if_not_exists(#h, :nil), :h)"
    " REMOVE due_at"
)
GUARD = "attempt = :n AND attribute_not_exists(lease_owner) AND #s IN (:r, :x)"


def values(**extra: Any) -> dict[str, Any]:
    base = {":d": {"S": "dispatched"}, ":o": {"S": "w"}, ":lu": {"N": "5"},
            ":now": {"N": "1"}, ":nil": {"L": []}, ":h": {"L": [{"S": "e"}]},
            ":n": {"N": "1"}, ":r": {"S": "ready"}, ":x": {"S": "dispatched"}}
    base.update(extra)
    return base


NAMES = {"#s": "status", "#t": "timeout", "#h": "history"}

# (key, request) pairs; each row starts as {status: ready, attempt: 1, timeout: 60}.
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("a", {"UpdateExpression": SET_MANY, "ConditionExpression": GUARD,
           "ExpressionAttributeNames": NAMES, "ExpressionAttributeValues": values(),
           "ReturnValues": "ALL_NEW"}),
    # The same texts again: the guard is false now (lease_owner exists).
    ("a", {"UpdateExpression": SET_MANY, "ConditionExpression": GUARD,
           "ExpressionAttributeNames": NAMES, "ExpressionAttributeValues": values(),
           "ReturnValues": "ALL_NEW"}),
    ("b", {"UpdateExpression": SET_MANY, "ConditionExpression": GUARD,
           "ExpressionAttributeNames": NAMES,
           "ExpressionAttributeValues": values(**{":lu": {"N": "7"}}),
           "ReturnValues": "UPDATED_NEW"}),
    # One text, two name maps: valid, then two actions on one path, then a key attribute.
    ("c", {"UpdateExpression": "SET #a = :x, #b = :y", "ExpressionAttributeNames":
           {"#a": "p", "#b": "q"}, "ExpressionAttributeValues": {":x": {"S": "1"},
                                                                  ":y": {"S": "2"}},
           "ReturnValues": "ALL_NEW"}),
    ("c", {"UpdateExpression": "SET #a = :x, #b = :y", "ExpressionAttributeNames":
           {"#a": "p", "#b": "p"}, "ExpressionAttributeValues": {":x": {"S": "1"},
                                                                  ":y": {"S": "2"}}}),
    ("c", {"UpdateExpression": "SET #a = :x, #b = :y", "ExpressionAttributeNames":
           {"#a": "p", "#b": "step"}, "ExpressionAttributeValues": {":x": {"S": "1"},
                                                                     ":y": {"S": "2"}}}),
    ("c", {"UpdateExpression": "SET #a = :x, #b = :y", "ExpressionAttributeNames":
           {"#a": "p", "#b": "q"}, "ExpressionAttributeValues": {":x": {"S": "3"},
                                                                  ":y": {"S": "4"}},
           "ReturnValues": "UPDATED_OLD"}),
    # Values that break what the text means: arithmetic on a string, a missing value.
    ("d", {"UpdateExpression": "SET lease_until = #t + :lu", "ExpressionAttributeNames":
           {"#t": "timeout"}, "ExpressionAttributeValues": {":lu": {"S": "nope"}}}),
    ("d", {"UpdateExpression": "SET lease_until = #t + :lu", "ExpressionAttributeNames":
           {"#t": "timeout"}, "ExpressionAttributeValues": {":lu": {"N": "2"}},
           "ReturnValues": "ALL_NEW"}),
    ("d", {"UpdateExpression": "SET lease_until = #t + :lu", "ExpressionAttributeNames":
           {"#t": "timeout"}, "ExpressionAttributeValues": {":other": {"N": "2"}}}),
    # Malformed texts, each twice: errors are never memoized.
    ("e", {"UpdateExpression": "SET a = :x SET b = :x",
           "ExpressionAttributeValues": {":x": {"S": "1"}}}),
    ("e", {"UpdateExpression": "SET a = :x SET b = :x",
           "ExpressionAttributeValues": {":x": {"S": "1"}}}),
    ("e", {"UpdateExpression": "SET a = :x", "ConditionExpression": "attempt = = :x",
           "ExpressionAttributeValues": {":x": {"S": "1"}}}),
    ("e", {"UpdateExpression": "SET a = :x", "ConditionExpression": "attempt = = :x",
           "ExpressionAttributeValues": {":x": {"S": "1"}}}),
    # One condition text: a name map that lacks its placeholder, a value map that lacks
    # one, values of another type, then all there (the handler's parse is memoized).
    ("g", {"UpdateExpression": "SET a = :x", "ConditionExpression": "#s = :r AND attempt = :n",
           "ExpressionAttributeNames": {"#q": "status"},
           "ExpressionAttributeValues": {":x": {"S": "1"}, ":r": {"S": "ready"},
                                         ":n": {"N": "1"}}}),
    ("g", {"UpdateExpression": "SET a = :x", "ConditionExpression": "#s = :r AND attempt = :n",
           "ExpressionAttributeNames": {"#s": "status"},
           "ExpressionAttributeValues": {":x": {"S": "1"}, ":r": {"S": "ready"}}}),
    ("g", {"UpdateExpression": "SET a = :x", "ConditionExpression": "#s = :r AND attempt = :n",
           "ExpressionAttributeNames": {"#s": "status"},
           "ExpressionAttributeValues": {":x": {"S": "1"}, ":r": {"N": "3"},
                                         ":n": {"N": "1"}}}),
    ("g", {"UpdateExpression": "SET a = :x", "ConditionExpression": "#s = :r AND attempt = :n",
           "ExpressionAttributeNames": {"#s": "status"},
           "ExpressionAttributeValues": {":x": {"S": "1"}, ":r": {"S": "ready"},
                                         ":n": {"N": "1"}, ":unused": {"S": "u"}}}),
    ("g", {"UpdateExpression": "SET a = :x", "ConditionExpression": "#s = :r AND attempt = :n",
           "ExpressionAttributeNames": {"#s": "status"},
           "ExpressionAttributeValues": {":x": {"S": "2"}, ":r": {"S": "ready"},
                                         ":n": {"N": "1"}}, "ReturnValues": "ALL_NEW"}),
    # One condition text, values that make it true, then false.
    ("f", {"UpdateExpression": "ADD n :one", "ConditionExpression": "attempt = :n",
           "ExpressionAttributeValues": {":one": {"N": "1"}, ":n": {"N": "1"}},
           "ReturnValues": "UPDATED_NEW"}),
    ("f", {"UpdateExpression": "ADD n :one", "ConditionExpression": "attempt = :n",
           "ExpressionAttributeValues": {":one": {"N": "1"}, ":n": {"N": "2"}}}),
]


@pytest.fixture(scope="module")
def clients() -> Iterator[Any]:
    with Emulator() as emulator:
        yield emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))


@pytest.fixture(scope="module")
def ddb(clients: Any) -> Any:
    return clients.dynamodb


def paged(ddb: Any, **query: Any) -> list[Any]:
    """Every page of a query: items, counts and where the next page starts."""
    pages, start = [], None
    while True:
        extra = {"ExclusiveStartKey": start} if start else {}
        resp = ddb.query(**query, **extra)
        start = resp.get("LastEvaluatedKey")
        pages.append((resp["Items"], resp["Count"], resp["ScannedCount"], start))
        if not start:
            return pages


def on_stock_moto(play: Any, ddb: Any) -> Any:
    """`play` run on moto as shipped (the memo is put back after)."""
    speedups.uninstall()
    try:
        return play(ddb)
    finally:
        assert speedups.install()


def new_table(ddb: Any, **index: Any) -> str:
    """A table keyed like the steps table (run_id, step), with `index` if given."""
    table = f"speedups-{uuid.uuid4().hex[:8]}"
    attrs = {"run_id": "S", "step": "S", **index.pop("attributes", {})}
    ddb.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"},
                   {"AttributeName": "step", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": t}
                              for a, t in attrs.items()], **index)
    return table


def play(ddb: Any) -> list[Any]:
    table = new_table(ddb)
    for key in "abcdefg":
        # Another partition first, which no query of "r" may return.
        ddb.put_item(TableName=table, Item={"run_id": {"S": "q"}, "step": {"S": key},
                                            "status": {"S": "ready"}})
        ddb.put_item(TableName=table, Item={"run_id": {"S": "r"}, "step": {"S": key},
                                            "status": {"S": "ready"}, "attempt": {"N": "1"},
                                            "timeout": {"N": "60"}})
    out: list[Any] = []
    for key, request in SCRIPT:
        try:
            resp = ddb.update_item(TableName=table, Key={"run_id": {"S": "r"},
                                                          "step": {"S": key}}, **request)
            out.append(("ok", resp.get("Attributes")))
        except ClientError as exc:
            out.append(("error", exc.response["Error"]["Code"],
                        exc.response["Error"]["Message"]))
        except (ValueError, KeyError) as exc:  # moto raises some parse errors as they are
            out.append(("error", type(exc).__name__, str(exc)))
    rows = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    out.append(sorted(rows, key=lambda r: r["step"]["S"]))
    # Reads answer through moto's response serializer (memoized spellings).
    keys = [{"run_id": {"S": "r"}, "step": {"S": k}} for k in "abcdefg"]
    out.append([ddb.get_item(TableName=table, Key=k, ConsistentRead=True).get("Item")
                for k in keys])
    out.append(ddb.get_item(TableName=table, Key=keys[0], ProjectionExpression="#h, attempt",
                            ExpressionAttributeNames={"#h": "history"})["Item"])
    out.append(ddb.query(TableName=table, KeyConditionExpression="run_id = :r",
                         FilterExpression="attribute_exists(lease_owner)",
                         ExpressionAttributeValues={":r": {"S": "r"}})["Items"])
    for forward in (True, False):
        out.append(paged(ddb, TableName=table, KeyConditionExpression="run_id = :r", Limit=2,
                         ScanIndexForward=forward, ExpressionAttributeValues={":r": {"S": "r"}}))
    out.append(ddb.query(TableName=table, KeyConditionExpression="run_id = :r AND step > :s",
                         ExpressionAttributeValues={":r": {"S": "r"}, ":s": {"S": "b"}})["Items"])
    batch = ddb.batch_get_item(RequestItems={table: {"Keys": keys}})["Responses"][table]
    out.append(sorted(batch, key=lambda r: r["step"]["S"]))
    return out


stock_moto = pytest.mark.skipif(bool(os.environ.get("ORCH_MOTO_STOCK")),
                                reason="ORCH_MOTO_STOCK=1: the memo is off on purpose")


@stock_moto
def test_the_memo_is_installed_on_the_pinned_moto(ddb: Any) -> None:
    assert speedups.installed(), "Emulator.start installs the memo on moto 5.2"


@stock_moto
def test_memoized_moto_answers_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play, ddb)
    first = play(ddb)  # fills the memo
    again = play(ddb)  # answers from it
    assert first == stock
    assert again == stock
    # The script exercised what it meant to: successes and each kind of error.
    kinds = [r[0] for r in stock[:len(SCRIPT)]]
    assert kinds.count("ok") >= 5 and kinds.count("error") >= 8


def play_index(ddb: Any) -> list[Any]:
    """Queries of a sparse index (the wake index's shape) by sort-key ranges, paged."""
    table = new_table(
        ddb, attributes={"wake_shard": "N", "wake_at": "N"},
        GlobalSecondaryIndexes=[{
            "IndexName": "wake", "Projection": {"ProjectionType": "KEYS_ONLY"},
            "KeySchema": [{"AttributeName": "wake_shard", "KeyType": "HASH"},
                          {"AttributeName": "wake_at", "KeyType": "RANGE"}]}])
    for i in range(120):
        item = {"run_id": {"S": f"r{i % 7}"}, "step": {"S": f"s{i:03d}"},
                "wake_shard": {"N": str(i % 3)}, "pad": {"S": "x" * (i % 50)}}
        if i % 5:  # some rows are not in the index
            item["wake_at"] = {"N": str(1000 + (i * 37) % 200)}
        ddb.put_item(TableName=table, Item=item)
    out: list[Any] = []
    conditions = [
        # Bounds on values present (s023: 1051, s029: 1073, s014: 1118).
        ("wake_shard = :s AND wake_at BETWEEN :a AND :b", {":a": {"N": "1051"},
                                                         ":b": {"N": "1118"}}),
        ("wake_shard = :s AND wake_at <= :b", {":b": {"N": "1080"}}),
        ("wake_shard = :s AND wake_at > :a", {":a": {"N": "1073"}}),
        ("wake_shard = :s AND wake_at >= :a", {":a": {"N": "1073"}}),
        ("wake_shard = :s AND wake_at < :b", {":b": {"N": "1118"}}),
        ("wake_shard = :s AND wake_at = :a", {":a": {"N": "1051"}}),
        ("wake_shard = :s", {}),
    ]
    for shard in range(3):
        for text, vals in conditions:
            for forward in (True, False):
                out.append(paged(ddb, TableName=table, IndexName="wake", Limit=4,
                                 KeyConditionExpression=text, ScanIndexForward=forward,
                                 ExpressionAttributeValues={":s": {"N": str(shard)}, **vals}))
    return out


@stock_moto
def test_index_queries_answer_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_index, ddb)
    assert play_index(ddb) == stock
    assert sum(len(p) for pages in stock for p in pages) > 40  # paged, not one page each


def play_table_queries(ddb: Any) -> list[Any]:
    """Table queries paged by size (rows of ~90 KB: about eleven to a 1 MB page) and by
    count, filtered and not, projected and not, both ways; a row changed between two
    queries (nested and top-level) is read as it is now. Every type is stored, nested too:
    what each row weighs decides where each page ends."""
    table = new_table(ddb)

    def row(i: int) -> dict[str, Any]:
        return {"run_id": {"S": "q"}, "step": {"S": f"s{i:02d}"},
                "status": {"S": ("done", "ready", "failed")[i % 3]},
                "pad": {"S": "é" * (45_000 + 37 * i)}, "n": {"N": str(i * 1.5)},
                "blob": {"B": bytes(range(i % 7 + 1))}, "ok": {"BOOL": bool(i % 2)},
                "nil": {"NULL": True}, "tags": {"SS": [f"t{i}", "u"]},
                "nums": {"NS": [str(i), "10.25"]}, "bins": {"BS": [b"a", bytes([i])]},
                "m": {"M": {"a": {"N": str(i)}, "deep": {"M": {"l": {"L": [
                    {"S": "x" * i}, {"N": "3"}, {"M": {"b": {"BOOL": True}}},
                    {"SS": ["p", "q"]}]}}}}},
                "hist": {"L": [{"M": {"at": {"N": str(j)}, "type": {"S": "e" * j}}}
                               for j in range(i % 4)]}}

    for i in range(26):
        ddb.put_item(TableName=table, Item=row(i))
    live = {"FilterExpression": "NOT (#s IN (:d, :f))",
            "ExpressionAttributeValues": {":r": {"S": "q"}, ":d": {"S": "done"},
                                          ":f": {"S": "failed"}}}
    shown = {"ProjectionExpression": "run_id, step, #s, n, m.deep.l[2], hist[1].type, tags"}
    queries: list[dict[str, Any]] = [
        {**live, **shown}, {**live, **shown, "Limit": 4}, {**live},
        {**shown, "ExpressionAttributeValues": {":r": {"S": "q"}}},
        {**live, **shown, "ScanIndexForward": False},
        {"ExpressionAttributeValues": {":r": {"S": "q"}}, "Limit": 5},
    ]
    out: list[Any] = []
    for rnd in range(2):
        for extra in queries:
            names = {"#s": "status"} if "#s" in json.dumps(extra) else {}
            out.append(paged(ddb, TableName=table, KeyConditionExpression="run_id = :r",
                             **({"ExpressionAttributeNames": names} if names else {}), **extra))
        if rnd == 0:  # change rows in place: a nested value, a list, a top-level one
            ddb.update_item(TableName=table, Key={"run_id": {"S": "q"}, "step": {"S": "s04"}},
                            UpdateExpression="SET m.deep.l[0] = :big, hist = :h, #s = :r2",
                            ExpressionAttributeNames={"#s": "status"},
                            ExpressionAttributeValues={":big": {"S": "z" * 200_000},
                                                       ":h": {"L": []},
                                                       ":r2": {"S": "ready"}})
    return out


@stock_moto
def test_table_queries_answer_exactly_as_stock_moto(ddb: Any) -> None:
    assert {"query-copy", "type-size"} <= set(speedups.active())
    stock = on_stock_moto(play_table_queries, ddb)
    assert play_table_queries(ddb) == stock
    first = stock[0]
    assert len(first) > 1 and first[0][2] > first[0][1]  # paged by size; filtered
    assert stock[0] != stock[len(stock) // 2]  # the change in place is read


def play_sort_key_ranges(ddb: Any) -> list[Any]:
    """Table queries with a sort-key condition on a partition whose other items sort after
    (a durable run's rows and its journal): ranges at either end and inside, both ways,
    pages that end by count exactly at the range's last item (moto still answers a next
    page then) and by size just before or after it (rows of ~300 KB: the range's items
    near 1 MB), paged with ExclusiveStartKey, filtered and projected."""
    table = new_table(ddb)
    for i in range(12):
        ddb.put_item(TableName=table, Item={"run_id": {"S": "d"}, "step": {"S": f"r{i:02d}"},
                                            "pad": {"S": "r" * (i * 3)}})
    for i in range(40):
        ddb.put_item(TableName=table, Item={"run_id": {"S": "d"}, "step": {"S": f"~{i:03d}"},
                                            "pad": {"S": "j" * (150_000 if i == 2 else i)}})
    for i in range(4):  # a partition of big rows: the range's items near 1 MB
        ddb.put_item(TableName=table, Item={"run_id": {"S": "big"}, "step": {"S": f"a{i}"},
                                            "pad": {"S": "b" * 300_000}})
        ddb.put_item(TableName=table, Item={"run_id": {"S": "big"}, "step": {"S": f"z{i}"},
                                            "pad": {"S": "z" * (100_000 * (i + 1))}})
    conditions = [
        ("d", "step < :a", {":a": {"S": "~"}}),
        ("d", "step <= :a", {":a": {"S": "r05"}}),
        ("d", "step BETWEEN :a AND :b", {":a": {"S": "r03"}, ":b": {"S": "r07"}}),
        ("d", "begins_with(step, :a)", {":a": {"S": "r1"}}),
        ("d", "step > :a", {":a": {"S": "~030"}}),
        ("d", "step >= :a", {":a": {"S": "zz"}}),  # nothing in the range
        ("d", "step = :a", {":a": {"S": "r04"}}),
        ("d", "step BETWEEN :a AND :b", {":a": {"S": "r07"}, ":b": {"S": "r03"}}),
        ("d", "begins_with(step, :a)", {":a": {"S": "~"}}),  # the journal, to the end
        ("d", "begins_with(step, :a)", {":a": {"S": "q"}}),  # nothing
        ("d", "step = :a", {":a": {"S": "r045"}}),  # between two keys: nothing
        ("big", "step < :a", {":a": {"S": "b"}}),
        ("big", "step <= :a", {":a": {"S": "a2"}}),
    ]
    out: list[Any] = []
    for key, cond, vals in conditions:
        for forward in (True, False):
            for extra in ({}, {"Limit": 12}, {"Limit": 5}, {"Limit": 3},
                          {"ProjectionExpression": "step", "FilterExpression": "size(pad) > :z",
                           "ExpressionAttributeValues": {":z": {"N": "4"}}}):
                values = {":k": {"S": key}, **vals, **extra.pop("ExpressionAttributeValues", {})}
                try:
                    out.append(paged(ddb, TableName=table, ScanIndexForward=forward,
                                     KeyConditionExpression=f"run_id = :k AND {cond}",
                                     ExpressionAttributeValues=values, **extra))
                except ClientError as exc:
                    out.append(("error", cond, exc.response["Error"]["Message"]))
    return out


@stock_moto
def test_sort_key_ranges_answer_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_sort_key_ranges, ddb)
    assert play_sort_key_ranges(ddb) == stock
    # moto's quirks the trim keeps: a page ended by count at the range's last row still
    # names a next page (empty); the big rows' range ends its pages by size.
    pages_of = {len(p) for p in stock if not isinstance(p, tuple)}
    assert max(pages_of) > 2
    assert any(p[-1][0] == [] and len(p) > 1 for p in stock if not isinstance(p, tuple))


def test_a_value_sized_with_its_type_read_once_is_moto_s_size() -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    samples: list[dict[str, Any]] = [
        {"S": "héllo"}, {"N": "-12.50"}, {"B": b"\x00\x01"}, {"B": "AAE="}, {"BOOL": False},
        {"NULL": True}, {"SS": ["a", "bé"]}, {"NS": ["1", "2.5"]}, {"BS": [b"x", b"yz"]},
        {"L": [{"S": "a"}, {"L": [{"N": "1"}]}, {"M": {"k": {"SS": ["q"]}}}]},
        {"M": {"ké": {"M": {"x": {"L": [{"BOOL": True}, {"NULL": True}]}}}, "n": {"N": "7"}}},
        {"L": []}, {"M": {}},
    ]
    # A plain dict put in a list below a map (moto wraps it afresh when it sizes the map).
    odd = DynamoType({"M": {"a": {"L": [{"S": "x"}]}, "b": {"M": {"c": {"L": []}}}}})
    odd.value["a"].value.append({"S": "yy"})
    odd.value["b"].value["c"].value.append({"M": {"d": {"N": "12"}}})
    speedups.install()  # this test starts no emulator: it may run before any does
    assert "type-size" in speedups.active()
    sped = [DynamoType(v).size() for v in samples] + [odd.size()]
    speedups.uninstall()
    try:
        stock = [DynamoType(v).size() for v in samples] + [odd.size()]
    finally:
        assert speedups.install()
    assert sped == stock
    assert all(size > 0 for size in stock[:6])


def play_projection(ddb: Any) -> list[Any]:
    """Projected reads (one conversion of the item per read): top-level names, nested
    paths into maps and lists, a path and its parent together, names that are absent."""
    table = new_table(ddb)
    for i in range(4):
        ddb.put_item(TableName=table, Item={
            "run_id": {"S": "p"}, "step": {"S": f"s{i}"}, "status": {"S": "ready"},
            "m": {"M": {"a": {"N": str(i)}, "b": {"M": {"c": {"S": "deep"}}}}},
            "hist1": {"L": [{"M": {"at": {"N": "1"}, "type": {"S": "x"}}},
                              {"M": {"at": {"N": str(i)}}}]},
            "tg": {"SS": ["t1", "t2"]}, "pd1": {"S": "y" * i}})
    out: list[Any] = []
    names = {"#s": "status"}
    for projection in ("run_id, step, #s, pd1, absent1", "m.a, m.b.c, hist1[1].at, tg",
                       "m, m.a, hist1, hist1[0]", "m.b, m.zz, hist1[5]"):
        used = {k: v for k, v in names.items() if k in projection}
        extra = {"ExpressionAttributeNames": used} if used else {}
        try:
            out.append(paged(ddb, TableName=table, KeyConditionExpression="run_id = :r",
                             ExpressionAttributeValues={":r": {"S": "p"}}, Limit=3,
                             ProjectionExpression=projection, **extra))
            keys = [{"run_id": {"S": "p"}, "step": {"S": f"s{i}"}} for i in range(4)]
            got = ddb.batch_get_item(RequestItems={table: {
                "Keys": keys, "ProjectionExpression": projection, **extra}})
            out.append(sorted(got["Responses"][table],
                              key=lambda r: r.get("step", {}).get("S", "")))
        except ClientError as exc:
            out.append(("error", projection, exc.response["Error"]["Message"]))
    return out


@stock_moto
def test_projections_answer_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_projection, ddb)
    assert play_projection(ddb) == stock
    answered = [r for r in stock if not (isinstance(r, tuple) and r[0] == "error")]
    assert len(answered) == 8, stock


@pytest.fixture(scope="module")
def sqs(clients: Any) -> Any:
    return clients.sqs


def _seen(messages: list[dict[str, Any]]) -> list[Any]:
    # What a receive answers that does not differ by chance (ids, handles, times).
    return sorted((m["Body"], m.get("Attributes", {}).get("MessageGroupId"))
                  for m in messages)


def play_sqs(sqs: Any) -> list[Any]:
    """Sends, receives and counts on a standard queue and on FIFO queues with and
    without content-based deduplication (what SendMessage reads of the attributes)."""
    out: list[Any] = []
    tag = uuid.uuid4().hex[:8]
    plain = sqs.create_queue(QueueName=f"plain-{tag}")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=plain, Entries=[
        {"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)])
    for i in range(10, 15):
        sqs.send_message(QueueUrl=plain, MessageBody=f"m{i}")
    sqs.send_message(QueueUrl=plain, MessageBody="later", DelaySeconds=30)
    counts = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
              "ApproximateNumberOfMessagesDelayed"]
    out.append(sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=counts)["Attributes"])
    got: list[dict[str, Any]] = []
    for _ in range(3):
        got += sqs.receive_message(QueueUrl=plain, MaxNumberOfMessages=10,
                                   VisibilityTimeout=30).get("Messages", [])
    out.append(_seen(got))
    out.append(sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=counts)["Attributes"])
    for dedup in ("true", "false"):
        fifo = sqs.create_queue(QueueName=f"fifo-{dedup}-{tag}.fifo", Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": dedup})["QueueUrl"]
        for body in ("same", "same", "other"):
            try:
                sqs.send_message(QueueUrl=fifo, MessageBody=body, MessageGroupId="g")
                out.append(("sent", body))
            except ClientError as exc:
                out.append(("error", exc.response["Error"]["Code"]))
        sqs.send_message(QueueUrl=fifo, MessageBody="id", MessageGroupId="g",
                         MessageDeduplicationId="d1")
        sqs.send_message(QueueUrl=fifo, MessageBody="id", MessageGroupId="g",
                         MessageDeduplicationId="d1")
        out.append(_seen(sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10,
                                             AttributeNames=["MessageGroupId"])
                         .get("Messages", [])))
        attrs = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]
        out.append({k: v for k, v in attrs.items() if not k.endswith(("Timestamp", "Arn"))})
    return out


@stock_moto
def test_queues_answer_exactly_as_stock_moto(sqs: Any) -> None:
    stock = on_stock_moto(play_sqs, sqs)
    assert play_sqs(sqs) == stock
    assert len(stock[1]) == 15  # every visible message, the delayed one not yet
    assert ("sent", "same") in stock and ("sent", "other") in stock


def play_plain_and_binary(ddb: Any) -> list[Any]:
    """Requests read as their JSON (no binary value) and those parsed by botocore (a
    binary value, decoded from base64): both answer as stock moto does."""
    table = new_table(ddb)
    key = {"run_id": {"S": "r"}, "step": {"S": "a"}}
    out: list[Any] = []
    ddb.put_item(TableName=table, Item={**key, "blob": {"B": b"\x00\x01bytes"},
                                        "blobs": {"BS": [b"x", b"y"]}, "n": {"N": "1.50"},
                                        "m": {"M": {"l": {"L": [{"NULL": True},
                                                                {"BOOL": False}]}}}})
    ddb.put_item(TableName=table, Item={"run_id": {"S": "r"}, "step": {"S": "b"},
                                        "B": {"S": "an attribute named B"}})
    out.append(ddb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"])
    try:
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET n = :n",
                        ConditionExpression="n = :z",
                        ExpressionAttributeValues={":n": {"N": "2"}, ":z": {"N": "0"}},
                        ReturnValuesOnConditionCheckFailure="ALL_OLD")
    except ClientError as exc:
        out.append((exc.response["Error"]["Code"], exc.response.get("Item")))
    out.append(ddb.update_item(TableName=table, Key=key, UpdateExpression="SET #b = :b",
                               ExpressionAttributeNames={"#b": "blob"},
                               ExpressionAttributeValues={":b": {"B": b"new"}},
                               ReturnValues="ALL_NEW")["Attributes"])
    out.append(ddb.query(TableName=table, KeyConditionExpression="run_id = :r",
                         ExpressionAttributeValues={":r": {"S": "r"}}, Limit=1)["Items"])
    out.append(sorted(ddb.scan(TableName=table, ConsistentRead=True)["Items"],
                      key=lambda r: r["step"]["S"]))
    return out


@stock_moto
def test_requests_read_as_json_answer_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_plain_and_binary, ddb)
    assert play_plain_and_binary(ddb) == stock
    assert stock[1][0] == "ConditionalCheckFailedException" and stock[1][1]["n"] == {"N": "1.50"}
    assert stock[2]["blob"] == {"B": b"new"}


def _prepared(url: str, target: str, body: Any, **headers: Any) -> Any:
    from botocore.awsrequest import AWSPreparedRequest
    from botocore.compat import HTTPHeaders

    return AWSPreparedRequest("POST", url, HTTPHeaders.from_dict(
        {"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.0", **headers}),
        body, stream_output=False)


def _request_facts(request: Any) -> dict[str, Any]:
    """Everything of moto's Request its handlers read, and its environ."""
    environ = {k: v for k, v in request.environ.items()
               if k not in ("wsgi.input", "wsgi.errors", "werkzeug.request")}
    return {"environ": environ, "headers": sorted(request.headers.items()),
            "data": request.get_data(), "form": dict(request.form),
            "values": dict(request.values), "args": dict(request.args),
            **{attr: getattr(request, attr) for attr in (
                "method", "url", "raw_url", "path", "raw_path", "content_type", "host",
                "content_length", "from_wsgi_server", "mimetype")}}


@stock_moto
def test_requests_built_from_their_environ_are_the_requests_moto_builds(ddb: Any) -> None:
    from infra.emulator.capabilities import resolve

    if "json-request" not in speedups.active():
        pytest.skip("json-request is off on this moto")
    try:
        resolve("moto.core.request:Request.from_primitives")
    except LookupError:
        pytest.skip("moto up to 5.2.3 builds no Request of botocore's: the first variant's")
    import moto.core.request as moto_request

    def requests() -> list[Any]:
        return [
            _prepared("http://127.0.0.1:5000/", "DynamoDB_20120810.GetItem",
                      b'{"TableName": "t", "Key": {"pk": {"S": "\\u00e9"}}}',
                      Authorization="AWS4-HMAC-SHA256 Credential=local/20000101/us-east-1/"
                      "dynamodb/aws4_request, SignedHeaders=host, Signature=unsigned"),
            _prepared("http://localhost:4566", "AmazonSQS.SendMessage",
                      '{"QueueUrl": "q", "MessageBody": "caf\u00e9"}',
                      **{"User-Agent": b"Boto3/1.0", "Content-Length": "99"}),
            _prepared("https://dynamodb.us-east-1.amazonaws.com/", "DynamoDB_20120810.Query",
                      b"{}", **{"X-Amz-Date": "20260101T000000Z"}),
            # Not for the speed-up: a query string, a compressed body (moto's own build).
            _prepared("http://127.0.0.1:5000/?a=1", "DynamoDB_20120810.GetItem", b"{}"),
            _prepared("http://127.0.0.1:5000/", "DynamoDB_20120810.GetItem", b"{}",
                      **{"Content-Encoding": "gzip"}),
        ]

    built = [_request_facts(moto_request.normalize_request(r)) for r in requests()]
    speedups.uninstall()
    try:
        stock = [_request_facts(moto_request.normalize_request(r)) for r in requests()]
    finally:
        assert speedups.install()
    assert built == stock


def _key(step: str, run: str = "r") -> dict[str, Any]:
    return {"run_id": {"S": run}, "step": {"S": step}}


def _put(table: str, step: str, guarded: bool = True, **attrs: Any) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": table, "Item": {**_key(step), **attrs}}
    if guarded:
        put["ConditionExpression"] = "attribute_not_exists(step)"
    return {"Put": put}


def play_transactions(ddb: Any) -> list[Any]:
    """Transactions that land, and transactions cancelled part-way (a condition, an
    error, two operations on one item, too many), each followed by the table's state."""
    table = new_table(ddb)
    for step in "abc":
        ddb.put_item(TableName=table, Item={**_key(step), "n": {"N": "1"}, "s": {"S": "x"}})
    update = {"TableName": table, "Key": _key("a"), "UpdateExpression": "ADD n :one",
              "ExpressionAttributeValues": {":one": {"N": "1"}}}
    scripts: list[list[dict[str, Any]]] = [
        [_put(table, f"j{i}", v={"S": str(i)}) for i in range(5)],
        # The third is already there: the first two are put back.
        [_put(table, "k0"), _put(table, "k1"), _put(table, "j2"), _put(table, "k3")],
        [_put(table, "k0"), {"Put": {**_put(table, "j1")["Put"],
                                     "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}],
        # An update, a delete and a condition check that land together.
        [{"Update": update}, {"Delete": {"TableName": table, "Key": _key("b")}},
         {"ConditionCheck": {"TableName": table, "Key": _key("c"),
                             "ConditionExpression": "n = :one",
                             "ExpressionAttributeValues": {":one": {"N": "1"}}}}],
        # The same, cancelled by the check: the update and the delete are put back.
        [{"Update": update}, {"Delete": {"TableName": table, "Key": _key("c")}},
         {"ConditionCheck": {"TableName": table, "Key": _key("a"),
                             "ConditionExpression": "n = :one",
                             "ExpressionAttributeValues": {":one": {"N": "1"}}}}],
        # An update that fails on the item (ADD to a string): cancelled, put back.
        [_put(table, "k5"), {"Update": {"TableName": table, "Key": _key("c"),
                                        "UpdateExpression": "ADD s :one",
                                        "ExpressionAttributeValues": {":one": {"N": "1"}}}}],
        # Two operations on one item: refused, the first put back.
        [_put(table, "k6"), _put(table, "k7"), _put(table, "k6", guarded=False)],
        # An unguarded overwrite, then a table that does not exist.
        [_put(table, "a", guarded=False, n={"N": "9"}), _put("nope", "x")],
        [_put(table, f"m{i}") for i in range(101)],
        [_put(table, f"p{i}", guarded=False) for i in range(100)],
    ]
    out: list[Any] = []
    for items in scripts:
        try:
            resp = ddb.transact_write_items(TransactItems=items)
            resp.pop("ResponseMetadata", None)
            out.append(("ok", resp))
        except ClientError as exc:
            err = exc.response
            out.append(("error", err["Error"].get("Code"), err["Error"].get("Message"),
                        err.get("CancellationReasons")))
        scan = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
        out.append(sorted(scan, key=lambda i: i["step"]["S"]))
    return out


@stock_moto
def test_transactions_answer_and_roll_back_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_transactions, ddb)
    assert play_transactions(ddb) == stock
    answers = stock[0::2]
    assert [a[0] for a in answers].count("ok") == 3, answers
    assert [a[0] for a in answers].count("error") == 7, answers
    assert "transact-undo" in speedups.active()


# Every kind of attribute value, nested, with the edge cases of each (empty string, empty
# list and map, a false boolean, binary inside a map, map keys that look like types).
EVERY_VALUE: dict[str, Any] = {
    "s": {"S": "text"}, "empty": {"S": ""}, "n": {"N": "-1.50"}, "big": {"N": "1e30"},
    "b": {"B": b"\x00\xffbytes"}, "ss": {"SS": ["x", "y"]}, "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"a", b"\x01"]}, "t": {"BOOL": True}, "f": {"BOOL": False},
    "nil": {"NULL": True}, "l": {"L": []}, "m": {"M": {}},
    "deep": {"M": {"S": {"S": "a key named S"}, "l": {"L": [
        {"N": "1"}, {"M": {"x": {"NULL": True}, "bin": {"B": b"z"}}},
        {"L": [{"SS": ["q"]}, {"BOOL": False}]}]}, "uni": {"S": "é€😀\n\"'"}}},
    "history": {"L": [{"S": '{"at": 1.5, "type": "step.ready"}'}] * 3},
}


def play_values(ddb: Any) -> list[Any]:
    """Every answer that carries items, as the client receives it: raw JSON bodies."""
    table = new_table(ddb)
    bodies: list[Any] = []

    def keep(http_response: Any, **_: Any) -> None:
        bodies.append(json.loads(http_response.content or b"null"))

    ddb.meta.events.register("after-call.dynamodb", keep)
    try:
        key = {"run_id": {"S": "r"}, "step": {"S": "a"}}
        ddb.put_item(TableName=table, Item={**key, **EVERY_VALUE})
        ddb.put_item(TableName=table, Item={**key, "step": {"S": "b"}, "s": {"S": "x"}})
        ddb.get_item(TableName=table, Key=key, ConsistentRead=True)
        ddb.query(TableName=table, KeyConditionExpression="run_id = :r",
                  ExpressionAttributeValues={":r": {"S": "r"}})
        ddb.query(TableName=table, KeyConditionExpression="run_id = :r",
                  ProjectionExpression="deep, ss, nil",
                  ExpressionAttributeValues={":r": {"S": "r"}})
        ddb.update_item(TableName=table, Key=key, UpdateExpression="SET extra = :e",
                        ExpressionAttributeValues={":e": {"M": {"k": {"L": [{"S": ""}]}}}},
                        ReturnValues="ALL_NEW")
        ddb.batch_get_item(RequestItems={table: {"Keys": [key]}})
        ddb.scan(TableName=table)
        try:
            ddb.put_item(TableName=table, Item=key, ConditionExpression="attribute_not_exists(s)",
                         ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except ClientError as exc:
            bodies.append(exc.response.get("Item"))
    finally:
        ddb.meta.events.unregister("after-call.dynamodb", keep)
    # A new table each play; the refused put's row carries binary (parsed to bytes).
    return json.loads(json.dumps(bodies, default=bytes.hex).replace(table, "T"))


@stock_moto
def test_answers_of_every_attribute_value_are_stock_motos(ddb: Any) -> None:
    stock = on_stock_moto(play_values, ddb)
    assert "answer-values" in speedups.active()
    assert play_values(ddb) == stock
    assert len(stock) == 10 and stock[-1] is not None  # the refused put carried the row


def play_sizes(ddb: Any) -> list[Any]:
    """Items around DynamoDB's 400 KB limit (moto's: 405,000 bytes), put, copied by
    reads and grown by updates: what each answers, and the items kept."""
    table = new_table(ddb)
    out: list[Any] = []
    # 405,027: the largest of these that moto takes (its sum of keys and values).
    for pad in (404_900, 405_027, 405_028, 405_100, 200_000):
        key = {"run_id": {"S": "r"}, "step": {"S": f"p{pad}"}}
        item = {**key, "a": {"S": "x" * (pad - 100_000)}, "b": {"L": [{"S": "y" * 99_950}]},
                "c": {"M": {"k": {"N": "1"}}}}
        try:
            ddb.put_item(TableName=table, Item=item)
            out.append(("ok", pad))
        except ClientError as exc:
            out.append(("error", exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    try:
        ddb.update_item(TableName=table, Key={"run_id": {"S": "r"}, "step": {"S": "p200000"}},
                        UpdateExpression="SET d = :d", ExpressionAttributeValues={
                            ":d": {"S": "z" * 300_000}})
        out.append("grown")
    except ClientError as exc:
        out.append(("error", exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
    items = ddb.query(TableName=table, KeyConditionExpression="run_id = :r",
                      ExpressionAttributeValues={":r": {"S": "r"}})["Items"]
    out.append(sorted((i["step"]["S"], sorted(i)) for i in items))
    return out


@stock_moto
def test_items_at_the_size_limit_answer_exactly_as_stock_moto(ddb: Any) -> None:
    stock = on_stock_moto(play_sizes, ddb)
    assert "item-size" in speedups.active()
    assert play_sizes(ddb) == stock
    assert stock[1] == ("ok", 405_027) and stock[2][0] == "error"  # the limit, to the byte
    assert stock[5] != "grown"  # an update past the limit is refused too
