"""The AWS model's data for tests: the shipped file (infra/aws_model.yaml) with a few
figures changed, as data, a validated model, or a file an emulator process reads."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml

from infra.emulator.aws_model import DEFAULT_FILE, AwsModel

__all__ = ["model_data", "model_file", "pk_sk_table", "validated"]


def model_data(*, fast: bool = False, **partition: float) -> dict[str, Any]:
    """The shipped figures, `partition` (write_units_per_second=…, …) changed; `fast`:
    every delay a tenth of a millisecond or so (a test waits on nothing but the limits)."""
    data: dict[str, Any] = yaml.safe_load(DEFAULT_FILE.read_text())
    data["dynamodb"]["partition"].update(partition)
    if fast:
        for operations in data["latency"].values():
            for latency in operations.values():
                latency.update(p50_ms=0.1, p99_ms=0.2)
    return data


def validated(data: dict[str, Any]) -> AwsModel:
    return AwsModel.model_validate(data)


def model_file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def pk_sk_table(client: Any, prefix: str) -> str:
    """A new on-demand table keyed `pk` (hash) and `sk` (range), both strings: its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                   {"AttributeName": "sk", "KeyType": "RANGE"}])
    return name
