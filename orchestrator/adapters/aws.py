"""The one factory for boto3 clients. It gives each client its endpoint from the settings
(`AWS_ENDPOINT_URL`, or the service's own `AWS_ENDPOINT_URL_<SERVICE>` over it), and
dummy credentials to a client whose endpoint is one of those (an emulator or another
implementation); a client with no endpoint talks to AWS with boto3's own credentials."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from orchestrator.adapters.metering import install as metered_client
from orchestrator.errors import ConditionFailed, StoreError, Throttled
from orchestrator.settings import Settings

__all__ = ["THROTTLING", "TRANSACTION_THROTTLING", "Clients", "make_clients",
           "translate_errors"]

# The codes of a request AWS refused for its throughput (it had no effect), and of a
# write refused because a transaction on its item was in flight (TransactionConflict-
# Exception: it had no effect either; botocore does not retry it).
THROTTLING = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException",
                        "RequestLimitExceeded", "Throttling", "TooManyRequestsException",
                        "TransactionConflictException"})
# The cancellation reasons of a transaction cancelled for its throughput, or because
# another transaction or write on one of its items was in flight: no effect, send again.
TRANSACTION_THROTTLING = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded",
                                    "TransactionConflict"})


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
        if code in THROTTLING:
            raise Throttled(f"{what}: {code}") from exc
        reasons = exc.response.get("CancellationReasons") or []
        if code == "TransactionCanceledException" and any(
                r.get("Code") == "ConditionalCheckFailed" for r in reasons):
            raise ConditionFailed(f"{what}: a guard of the transaction did not hold") from exc
        codes = {r.get("Code") for r in reasons} - {"None", None}
        if code == "TransactionCanceledException" and codes and codes <= TRANSACTION_THROTTLING:
            # A transaction over its capacity is cancelled, not throttled, and botocore
            # does not retry it; it had no effect.
            raise Throttled(f"{what}: {code} ({', '.join(sorted(codes))})") from exc
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

    def client(service: str, config: Config) -> Any:
        kwargs: dict[str, Any] = {"region_name": settings.region}
        endpoint = settings.endpoint_for(service)
        if endpoint:
            # Passed explicitly, it wins over boto3's own reading of the environment.
            kwargs["endpoint_url"] = endpoint
            # An emulator accepts any credentials; never let boto3 go looking for real ones.
            kwargs["aws_access_key_id"] = "local"
            kwargs["aws_secret_access_key"] = "local"
        return session.client(service, config=config, **kwargs)

    # Each request of these three is counted for the run it is made for (metering.py).
    return Clients(
        dynamodb=metered_client(client("dynamodb", hot)),
        sqs=metered_client(client("sqs", hot)),
        s3=metered_client(client("s3", config)),
        cloudformation=client("cloudformation", config),
    )
