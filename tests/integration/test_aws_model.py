"""The AWS model in the emulator (infra/emulator/aws_model.py): real boto3 against real moto,
over HTTP and in-process, with an injected clock and a sleep that records."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.retries.standard import ThrottledRetryableChecker

from infra.emulator import Emulator
from infra.emulator.aws_model import (
    DEFAULT_FILE,
    MODEL_VARIABLE,
    AwsModel,
    AwsModelError,
    from_environ,
    load,
)
from infra.emulator.dynamodb_lock import DYNAMODB_LOCK, SerializeDynamoDB
from infra.emulator.inprocess import InProcess
from infra.emulator.modelled import THROTTLED, AwsTiming, Modelled, ModelledWSGI
from infra.emulator.process import EmulatorProcess
from tests.support.aws_model import model_data, model_file, pk_sk_table, validated


class FakeTime:
    """A clock that moves only when told, and a sleep that records (and checks that no
    one sleeps holding the DynamoDB lock)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self.under_lock = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.under_lock += DYNAMODB_LOCK.locked()
        self.slept.append(seconds)


def _data(**dynamodb: Any) -> dict[str, Any]:
    return model_data(**dynamodb)


def _small(write: float = 10, read: float = 30) -> AwsModel:
    return validated(model_data(write_units_per_second=write, read_units_per_second=read))


def _client(emulator: Emulator, in_process: bool) -> Any:
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name="us-east-1")
    client = session.client("dynamodb", endpoint_url=emulator.url,
                            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    return emulator.attach(client) if in_process else client


def _table(client: Any) -> str:
    return pk_sk_table(client, "model")


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def modelled(fake: FakeTime) -> Iterator[Emulator]:
    with Emulator(model=AwsTiming(_small(), seed=7, clock=fake.clock, sleep=fake.sleep)) as e:
        yield e


def test_the_shipped_file_is_valid_and_every_figure_has_a_source() -> None:
    model = load(DEFAULT_FILE)
    assert model.dynamodb.partition.write_units_per_second == 1000
    assert model.dynamodb.partition.read_units_per_second == 3000
    for operations in model.latency.values():
        assert all(latency.source.startswith("https://") for latency in operations.values())


def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    data = _data()
    data["latency"]["dynamodb"]["default"]["p99_ms"] = 1  # below its p50
    del data["latency"]["sqs"]["default"]["source"]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(AwsModelError) as caught:
        load(path)
    message = str(caught.value)
    assert str(path) in message
    assert "latency.dynamodb.default" in message and "p99_ms" in message
    assert "latency.sqs.default.source" in message


def test_the_environment_names_the_model() -> None:
    assert from_environ({}) is None
    assert from_environ({MODEL_VARIABLE: "off"}) is None
    assert from_environ({MODEL_VARIABLE: "aws"}) == load(DEFAULT_FILE)
    with pytest.raises(AwsModelError, match=r"nowhere\.yaml"):
        from_environ({MODEL_VARIABLE: "/nowhere.yaml"})


def test_delays_are_deterministic_under_a_seed_and_fit_the_distribution() -> None:
    model = load(DEFAULT_FILE)
    first = [AwsTiming(model, seed=3).delay("dynamodb", "PutItem") for _ in range(3)]
    again = [AwsTiming(model, seed=3).delay("dynamodb", "PutItem") for _ in range(3)]
    assert first == again
    timing = AwsTiming(model, seed=11)
    delays = sorted(timing.delay("dynamodb", "GetItem") for _ in range(20_000))
    latency = model.latency_of("dynamodb", "GetItem")
    assert latency is not None
    p50, p99 = delays[len(delays) // 2], delays[int(len(delays) * 0.99)]
    assert math.isclose(p50 * 1000, latency.p50_ms, rel_tol=0.05)
    assert math.isclose(p99 * 1000, latency.p99_ms, rel_tol=0.10)
    assert timing.delay("cloudformation", "CreateStack") == 0.0


@pytest.mark.parametrize("in_process", [False, True], ids=["http", "in-process"])
def test_each_request_waits_its_delay_with_the_lock_released(
        modelled: Emulator, fake: FakeTime, in_process: bool) -> None:
    client = _client(modelled, in_process)
    table = _table(client)
    fake.slept.clear()
    for i in range(200):
        client.put_item(TableName=table, Item={"pk": {"S": f"p{i}"}, "sk": {"S": "x"}})
    assert len(fake.slept) == 200  # one delay per request, on this path
    assert fake.under_lock == 0
    latency = _small().latency_of("dynamodb", "PutItem")
    assert latency is not None
    median = statistics.median(fake.slept) * 1000
    assert latency.p50_ms * 0.75 < median < latency.p50_ms * 1.25
    assert max(fake.slept) * 1000 <= 10 * latency.p99_ms


@pytest.mark.parametrize("in_process", [False, True], ids=["http", "in-process"])
def test_a_partition_over_its_budget_is_throttled_as_aws_throttles(
        modelled: Emulator, fake: FakeTime, in_process: bool) -> None:
    client = _client(modelled, in_process)
    table = _table(client)

    def put(pk: str, sk: str) -> None:
        client.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": sk}})

    for i in range(10):  # 10 write units a second, a second's burst: ten 1-unit writes
        put("hot", f"s{i}")
    with pytest.raises(ClientError) as caught:
        put("hot", "over")
    error = caught.value.response
    assert error["Error"]["Code"] == THROTTLED
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert THROTTLED in ThrottledRetryableChecker._THROTTLED_ERROR_CODES  # botocore retries it
    # The throttled write never reached moto.
    assert "Item" not in client.get_item(TableName=table, Key={"pk": {"S": "hot"},
                                                               "sk": {"S": "over"}})
    put("cold", "s0")  # another partition has its own budget
    fake.now += 0.1  # a tenth of a second: one more unit
    put("hot", "later")
    with pytest.raises(ClientError):
        put("hot", "again")


def test_a_transaction_costs_double(modelled: Emulator, fake: FakeTime) -> None:
    client = _client(modelled, True)
    table = _table(client)
    for i in range(5):  # 5 x 2 units = the 10 a second holds
        client.transact_write_items(TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "t"}, "sk": {"S": f"{i}"}}}}])
    with pytest.raises(ClientError) as caught:
        client.put_item(TableName=table, Item={"pk": {"S": "t"}, "sk": {"S": "x"}})
    assert caught.value.response["Error"]["Code"] == THROTTLED


def test_reads_have_their_own_budget_and_queries_are_keyed(
        modelled: Emulator, fake: FakeTime) -> None:
    client = _client(modelled, False)
    table = _table(client)
    key = {"pk": {"S": "r"}, "sk": {"S": "0"}}
    for _ in range(30):  # 30 strongly consistent reads of 1 unit
        client.get_item(TableName=table, Key=key, ConsistentRead=True)
    with pytest.raises(ClientError) as caught:
        client.query(TableName=table, KeyConditionExpression="#p = :p",
                     ExpressionAttributeNames={"#p": "pk"},
                     ExpressionAttributeValues={":p": {"S": "r"}}, ConsistentRead=True)
    assert caught.value.response["Error"]["Code"] == THROTTLED
    client.put_item(TableName=table, Item=key)  # writes: another budget


def test_off_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)
    with Emulator() as emulator:
        assert emulator.timing is None
        assert type(emulator._server.app) is SerializeDynamoDB  # type: ignore[union-attr]
        client = _client(emulator, True)
        client.list_tables(Limit=1)
        handlers = list(client.meta.events._emitter._handlers.prefix_search(
            "before-send.dynamodb.ListTables"))
        assert any(isinstance(h, InProcess) for h in handlers)
        assert not any(isinstance(h, Modelled) for h in handlers)
    monkeypatch.setenv(MODEL_VARIABLE, "aws")
    with Emulator() as emulator:
        assert emulator.timing is not None
        assert type(emulator._server.app) is ModelledWSGI  # type: ignore[union-attr]


@pytest.mark.slow
def test_the_emulator_process_applies_the_model_of_its_file(tmp_path: Path) -> None:
    path = model_file(tmp_path, model_data(fast=True, write_units_per_second=5))
    with EmulatorProcess(model=str(path)) as emulator:
        session = boto3.session.Session(aws_access_key_id="local",
                                        aws_secret_access_key="local", region_name="us-east-1")
        client = emulator.attach(session.client(
            "dynamodb", endpoint_url=emulator.url,
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"})))
        table = _table(client)
        codes = []
        for i in range(8):
            try:
                client.put_item(TableName=table, Item={"pk": {"S": "p"}, "sk": {"S": f"{i}"}})
                codes.append("ok")
            except ClientError as exc:
                codes.append(exc.response["Error"]["Code"])
        assert codes[:5] == ["ok"] * 5
        assert THROTTLED in codes[5:]
