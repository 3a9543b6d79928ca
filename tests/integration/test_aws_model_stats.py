"""What the AWS model did, read back over the emulator's HTTP port (`GET /_aws_model/stats`,
`POST /_aws_model/reset`: infra/emulator/model_stats.py): real boto3 against real moto,
the model's clock frozen and its sleep recorded, so the counts are exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from infra.emulator import Emulator
from infra.emulator.aws_model import MODEL_VARIABLE, AwsModel
from infra.emulator.modelled import RESET_PATH, STATS_PATH, THROTTLED, AwsTiming
from infra.emulator.process import EmulatorProcess
from tests.support.aws_model import model_data, model_file, pk_sk_table

WRITES_PER_SECOND = 10  # a second's burst: ten 1-unit writes, then throttled


def _model(write: float = WRITES_PER_SECOND) -> dict[str, Any]:
    return model_data(write_units_per_second=write)


def _client(url: str) -> Any:
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                    region_name="us-east-1")
    return session.client("dynamodb", endpoint_url=url,
                          config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def _table(client: Any) -> str:
    return pk_sk_table(client, "stats")


def _put(client: Any, table: str, pk: str, sk: str) -> None:
    client.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": sk}})


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    frozen = 0.0
    timing = AwsTiming(AwsModel.model_validate(_model()), seed=7, clock=lambda: frozen,
                       sleep=lambda seconds: None)
    with Emulator(model=timing) as e:
        yield e


def test_puts_to_one_key_are_counted_with_their_units(emulator: Emulator) -> None:
    client = _client(emulator.url)
    table = _table(client)
    httpx.post(emulator.url + RESET_PATH).raise_for_status()
    for i in range(7):
        _put(client, table, "hot", f"s{i}")
    _put(client, table, "cold", "s0")
    stats = httpx.get(emulator.url + STATS_PATH).json()
    assert stats["requests"] == {"dynamodb": {"PutItem": 8}}
    assert stats["requests_total"] == 8 and stats["throttled_total"] == 0
    assert stats["units"] == {"write": 8.0, "read": 0.0}
    assert stats["partitions"] == 2
    hottest = stats["hottest_writes"][0]
    assert hottest == {"table": table, "key": "S:hot", "write_units": 7.0, "read_units": 0.0}


def test_a_throttled_request_is_counted_and_charges_nothing(emulator: Emulator) -> None:
    client = _client(emulator.url)
    table = _table(client)
    for i in range(WRITES_PER_SECOND):
        _put(client, table, "hot", f"s{i}")
    with pytest.raises(ClientError) as caught:
        _put(client, table, "hot", "over")
    assert caught.value.response["Error"]["Code"] == THROTTLED
    stats = httpx.get(emulator.url + STATS_PATH).json()
    assert stats["throttled"] == {"PutItem": 1}
    assert stats["requests"]["dynamodb"] == {"CreateTable": 1, "PutItem": WRITES_PER_SECOND + 1}
    assert stats["hottest_writes"][0]["write_units"] == WRITES_PER_SECOND


def test_reset_zeroes_the_record(emulator: Emulator) -> None:
    client = _client(emulator.url)
    _put(client, _table(client), "k", "s")
    answer = httpx.post(emulator.url + RESET_PATH)
    assert answer.status_code == 200
    assert answer.json()["requests_total"] == 0
    stats = httpx.get(emulator.url + STATS_PATH).json()
    assert stats["requests"] == {} and stats["partitions"] == 0 and stats["hottest_writes"] == []
    assert httpx.get(emulator.url + RESET_PATH).status_code == 405  # a reset is a POST


def test_without_the_model_there_is_no_stats_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)
    with Emulator() as plain:
        assert plain.timing is None
        assert httpx.get(plain.url + STATS_PATH).status_code == 404


@pytest.mark.slow
def test_the_emulator_process_serves_the_stats_of_every_path(tmp_path: Path) -> None:
    # `orchestrator dev`'s emulator: its parent's clients over the socket, others over
    # HTTP, one record for both.
    path = model_file(tmp_path, model_data(fast=True, write_units_per_second=1000))
    with EmulatorProcess(model=str(path)) as process:
        over_socket = process.attach(_client(process.url))
        table = _table(over_socket)
        httpx.post(process.url + RESET_PATH).raise_for_status()
        for i in range(3):
            _put(over_socket, table, "hot", f"s{i}")
        _put(_client(process.url), table, "hot", "http")
        stats = httpx.get(process.url + STATS_PATH).json()
        assert stats["requests"] == {"dynamodb": {"PutItem": 4}}
        assert stats["hottest_writes"][0]["write_units"] == 4
