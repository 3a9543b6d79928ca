"""What the AWS model charges a request (infra/emulator/charging.py), as AWS charges it:
items by their stored size, the larger of before and after a write, every global
secondary index a write reaches, a Query by what it returns, a partition in debt after a
request larger than its burst. Real boto3 against real moto, over HTTP and in-process,
with a clock that moves only when told."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from infra.emulator import Emulator
from infra.emulator.modelled import THROTTLED, AwsTiming
from orchestrator.adapters.aws import translate_errors
from orchestrator.errors import Throttled
from tests.support.aws_model import model_data, validated


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def emulator(clock: Clock) -> Iterator[Emulator]:
    model = validated(model_data(write_units_per_second=10, read_units_per_second=30))
    timing = AwsTiming(model, seed=1, clock=clock, sleep=lambda seconds: None)
    with Emulator(model=timing) as e:
        yield e


@pytest.fixture(params=[False, True], ids=["http", "in-process"])
def client(emulator: Emulator, request: pytest.FixtureRequest) -> Any:
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name="us-east-1")
    c = session.client("dynamodb", endpoint_url=emulator.url,
                       config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    return emulator.attach(c) if request.param else c


def _table(client: Any, *, index: str | None = None, projection: str = "KEYS_ONLY") -> str:
    name = f"charge-{uuid.uuid4().hex[:8]}"
    attrs = [{"AttributeName": "pk", "AttributeType": "S"}]
    extra: dict[str, Any] = {}
    if index is not None:
        attrs.append({"AttributeName": index, "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [{
            "IndexName": index, "Projection": {"ProjectionType": projection},
            "KeySchema": [{"AttributeName": index, "KeyType": "HASH"},
                          {"AttributeName": "pk", "KeyType": "RANGE"}]}]
    client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=attrs,
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], **extra)
    return name


def _units(emulator: Emulator) -> dict[tuple[str, str], tuple[float, float]]:
    assert emulator.timing is not None
    snap = emulator.timing.stats.snapshot()
    rows = {(r["table"], r["key"]): (r["write_units"], r["read_units"])
            for r in snap["hottest_writes"] + snap["hottest_reads"]}
    return rows


def _throttled(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == THROTTLED
        return True
    return False


def test_an_index_with_one_key_is_a_partition_of_its_own(
        emulator: Emulator, client: Any, clock: Clock) -> None:
    # Ten runs on ten partitions of the table, all under one value of the index: the
    # index's partition (10 units a second here) throttles the eleventh, as on AWS.
    table = _table(client, index="active")
    for i in range(10):
        client.put_item(TableName=table, Item={"pk": {"S": f"r{i}"}, "active": {"S": "1"}})
    assert _units(emulator)[(f"{table}#active", "S:1")] == (10.0, 0.0)
    assert _throttled(lambda: client.put_item(
        TableName=table, Item={"pk": {"S": "r10"}, "active": {"S": "1"}}))
    # Leaving the index is a write there too.
    clock.now += 1.0
    client.update_item(TableName=table, Key={"pk": {"S": "r0"}}, UpdateExpression="REMOVE active")
    assert _units(emulator)[(f"{table}#active", "S:1")] == (11.0, 0.0)
    # A write that leaves a keys-only index's keys alone costs the index nothing.
    client.update_item(TableName=table, Key={"pk": {"S": "r1"}}, UpdateExpression="SET n = :n",
                       ExpressionAttributeValues={":n": {"N": "1"}})
    assert _units(emulator)[(f"{table}#active", "S:1")] == (11.0, 0.0)


def test_an_index_entry_that_moves_is_two_writes_and_a_refused_write_none(
        emulator: Emulator, client: Any, clock: Clock) -> None:
    table = f"charge-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "shard", "AttributeType": "N"},
                              {"AttributeName": "at", "AttributeType": "N"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[{
            "IndexName": "wake", "Projection": {"ProjectionType": "KEYS_ONLY"},
            "KeySchema": [{"AttributeName": "shard", "KeyType": "HASH"},
                          {"AttributeName": "at", "KeyType": "RANGE"}]}])
    slot = (f"{table}#wake", "N:1")
    client.put_item(TableName=table, Item={"pk": {"S": "w"}, "shard": {"N": "1"},
                                           "at": {"N": "10"}})
    assert _units(emulator)[slot] == (1.0, 0.0)
    # Its sort key moves within the partition: the old entry deleted, the new one put.
    client.update_item(TableName=table, Key={"pk": {"S": "w"}}, UpdateExpression="SET #a = :a",
                       ExpressionAttributeNames={"#a": "at"},
                       ExpressionAttributeValues={":a": {"N": "20"}})
    assert _units(emulator)[slot] == (3.0, 0.0)
    # A write whose condition fails pays for the table's item, not for an index entry.
    clock.now += 1.0
    with pytest.raises(ClientError):
        client.put_item(TableName=table, ConditionExpression="attribute_not_exists(pk)",
                        Item={"pk": {"S": "w"}, "shard": {"N": "1"}, "at": {"N": "30"}})
    assert _units(emulator)[slot] == (3.0, 0.0)
    assert _units(emulator)[(table, "S:w")][0] == 3.0  # the put, the update, the refused put


def test_a_write_pays_for_the_larger_of_the_item_before_and_after(
        emulator: Emulator, client: Any, clock: Clock) -> None:
    table = _table(client)
    big = "x" * 4000  # about 4 KB: 4 write units
    client.put_item(TableName=table, Item={"pk": {"S": "a"}, "blob": {"S": big}})
    assert _units(emulator)[(table, "S:a")][0] == 4.0
    clock.now += 1.0
    # A small update of a 4 KB item: 4 units, not the 1 its own key and value make.
    client.update_item(TableName=table, Key={"pk": {"S": "a"}}, UpdateExpression="SET n = :n",
                       ExpressionAttributeValues={":n": {"N": "1"}})
    assert _units(emulator)[(table, "S:a")][0] == 8.0
    # An update that grows the item: charged what it grew to (settled once it ran).
    clock.now += 1.0
    client.update_item(TableName=table, Key={"pk": {"S": "b"}}, UpdateExpression="SET payload = :b",
                       ExpressionAttributeValues={":b": {"S": big + big}})
    assert _units(emulator)[(table, "S:b")][0] == 8.0
    clock.now += 1.0
    client.delete_item(TableName=table, Key={"pk": {"S": "b"}})  # the item deleted: 8 KB
    assert _units(emulator)[(table, "S:b")][0] == 16.0


def test_reads_pay_for_the_stored_item_and_a_query_for_what_it_returns(
        emulator: Emulator, client: Any, clock: Clock) -> None:
    table = _table(client)
    client.put_item(TableName=table, Item={"pk": {"S": "r"}, "blob": {"S": "y" * 9000}})
    client.get_item(TableName=table, Key={"pk": {"S": "r"}}, ConsistentRead=True)  # 3 units
    client.get_item(TableName=table, Key={"pk": {"S": "r"}})  # eventually: 1.5
    client.get_item(TableName=table, Key={"pk": {"S": "r"}}, ConsistentRead=True,
                    ProjectionExpression="pk")  # a projection reads the whole item: 3
    client.get_item(TableName=table, Key={"pk": {"S": "none"}}, ConsistentRead=True)  # 1
    assert _units(emulator)[(table, "S:r")][1] == 7.5
    assert _units(emulator)[(table, "S:none")][1] == 1.0
    client.query(TableName=table, KeyConditionExpression="pk = :p", ConsistentRead=True,
                 ExpressionAttributeValues={":p": {"S": "r"}})
    assert _units(emulator)[(table, "S:r")][1] == 10.5  # 9 KB returned: 3 units


def test_a_request_larger_than_a_burst_leaves_its_partition_in_debt(
        emulator: Emulator, client: Any, clock: Clock) -> None:
    table = _table(client)
    # 15 units where a second's burst holds 10: admitted (a full bucket pays any
    # charge), and the partition owes 5 units. The next put replaces the 15 KB item, so
    # it costs 15 too: it waits until the bucket is full again.
    client.put_item(TableName=table, Item={"pk": {"S": "d"}, "blob": {"S": "z" * 15000}})
    small = {"pk": {"S": "d"}, "n": {"N": "1"}}
    clock.now += 0.55
    assert _throttled(lambda: client.put_item(TableName=table, Item=small))
    clock.now += 0.2  # 0.75 s: 2.5 units
    assert _throttled(lambda: client.put_item(TableName=table, Item=small))
    clock.now += 2.0  # full again
    client.put_item(TableName=table, Item=small)


def test_a_request_the_model_cannot_read_is_answered_by_moto(
        emulator: Emulator, client: Any) -> None:
    # An attribute value that is not a value (botocore would refuse it; a client that
    # does not check its parameters sends it): moto answers, not the model.
    # moto takes it (it reads the first type); the model charges it nothing, and does
    # not turn it into a 500 (its reading of the value raised).
    table = _table(client)
    loose = _loose(emulator, client)
    loose.put_item(TableName=table, Item={"pk": {"S": "m"}, "bad": {"S": "a", "N": "1"}})
    assert "Item" in client.get_item(TableName=table, Key={"pk": {"S": "m"}})
    assert _units(emulator)[(table, "S:m")] == (0.0, 0.5)  # an eventually consistent get


def _loose(emulator: Emulator, like: Any) -> Any:
    """A client as `like` (HTTP or in-process), that does not check its parameters."""
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name="us-east-1")
    c = session.client("dynamodb", endpoint_url=emulator.url,
                       config=Config(retries={"total_max_attempts": 1, "mode": "standard"},
                                     parameter_validation=False))
    in_process = any(type(h).__name__ == "Modelled" for h in like.meta.events._emitter
                     ._handlers.prefix_search("before-send.dynamodb.PutItem"))
    return emulator.attach(c) if in_process else c


def test_a_transaction_over_its_budget_is_cancelled_as_aws_cancels_it(
        emulator: Emulator, client: Any) -> None:
    # AWS cancels a transaction over its capacity (reason ThrottlingError) rather than
    # throttling it; botocore does not retry that, and the orchestrator's adapters take
    # it for what it is: a request throttled, with no effect (orchestrator/adapters/aws.py).
    table = _table(client)
    item = {"Put": {"TableName": table, "Item": {"pk": {"S": "t"}, "blob": {"S": "q" * 3000}}}}
    for _ in range(2):  # 2 x 3 units x 2 (a transaction): 12 > the 10 a second holds
        try:
            client.transact_write_items(TransactItems=[item])
        except ClientError as exc:
            caught = exc
            break
    else:
        raise AssertionError("the transaction was never over its budget")
    error = caught.response
    assert error["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in error["CancellationReasons"]] == ["ThrottlingError"]
    with pytest.raises(Throttled), translate_errors("a transaction"):
        raise caught
