"""The one factory for boto3 clients. It honours `AWS_ENDPOINT_URL*` (boto3 does) or an
explicit endpoint, and supplies dummy credentials when talking to a local emulator."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from orchestrator.errors import ConditionFailed, StoreError
from orchestrator.settings import Settings

__all__ = ["Clients", "make_clients", "translate_errors"]


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """botocore errors never leave the adapters: a failed guard becomes ConditionFailed,
    anything else StoreError, each naming what was being done (the cause is chained)."""
    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            item = exc.response.get("Item")
            raise ConditionFailed(f"{what}: guard did not hold", item) from exc
        raise StoreError(f"{what}: {code or exc}") from exc
    except BotoCoreError as exc:
        raise StoreError(f"{what}: {exc}") from exc


@dataclass(frozen=True)
class Clients:
    dynamodb: Any
    sqs: Any
    s3: Any
    cloudformation: Any


def make_clients(settings: Settings, *, max_pool: int = 32) -> Clients:
    """Build every client once; boto3 clients are thread-safe and reused across threads."""
    kwargs: dict[str, Any] = {"region_name": settings.region}
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
        # A local emulator accepts any credentials; never let boto3 go looking for real ones.
        kwargs["aws_access_key_id"] = "local"
        kwargs["aws_secret_access_key"] = "local"
    config = Config(
        max_pool_connections=max_pool,
        retries={"mode": "standard", "max_attempts": 4},
        connect_timeout=5,
        read_timeout=30,
    )
    # The hot path's requests are built by the adapters, not typed in by a user, and the
    # service checks them again: botocore's client-side walk of every parameter (a
    # BatchWriteItem of 25 rows is thousands of checks) is skipped on those two clients.
    hot = config.merge(Config(parameter_validation=False))
    session = boto3.session.Session()
    return Clients(
        dynamodb=session.client("dynamodb", config=hot, **kwargs),
        sqs=session.client("sqs", config=hot, **kwargs),
        s3=session.client("s3", config=config, **kwargs),
        cloudformation=session.client("cloudformation", config=config, **kwargs),
    )
