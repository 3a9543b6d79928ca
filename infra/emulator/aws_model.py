"""The AWS model's figures: the data file (infra/aws_model.yaml, or a user's own), validated.

Design of the AWS model (this module, charging.py, moto_tables.py, partitions.py,
modelled.py, model_stats.py):

- What: with the model on, the emulator answers like AWS in time. Each request waits a
  delay drawn from its service's and operation's distribution (a log-normal fitted to the
  file's p50 and p99); each DynamoDB request is charged the read or write units AWS would
  charge it (charging.py: items at their stored size, read from moto's tables by
  moto_tables.py; a write's global secondary indexes on their own partitions), per
  partition key (table or index + partition key value), against token buckets of the
  documented per-partition rates, and a request over them is answered with AWS's
  `ProvisionedThroughputExceededException` (HTTP 400, AWS's JSON body) without reaching
  moto. What only the answer shows (an update's item after, a Query's items) is debited
  once moto answered: a partition may go into debt.
- Where: on every path a request takes. `ModelledWSGI` wraps the server's WSGI app (HTTP,
  every process), `Modelled` wraps an `InProcess` before-send handler (`Emulator.attach`,
  and the emulator's own process's answers to its parent: child.py). Both call one
  `AwsTiming` (modelled.py), which holds the buckets and the random stream, so a model's
  budget is shared by every path into one emulator.
- When: the delay is slept *before* the request reaches `SerializeDynamoDB` or the
  in-process DynamoDB lock, never under it: one slow request must not serialise the whole
  emulator. The budget is charged after the delay (when the request "reaches" the
  partition), under the buckets' own small lock.
- Tests: `AwsTiming` takes a clock, a sleep and a seed; with a fake sleep that records
  and a fixed seed, delays and throttling are deterministic.
- Off: no model, no wrapper. `Emulator(model=None)` installs neither `ModelledWSGI` nor
  `Modelled`: a request meets exactly the code it met before.
- Lambda (`dev --lambda` only): the invocation delay (`latency.lambda`) and the account's
  concurrency (`lambda.concurrency`), one pool across every function of the stack, are
  applied by infra/lambda_limits.py, not by the emulator (Lambda is not emulated by moto
  here: infra/lambda_local.py invokes the handlers).

Not modelled (yet): DynamoDB's table- and account-level limits; adaptive capacity
splitting a hot partition's sort-key range (the model is the pessimistic side); a
Query's charge for the items it read before a projection or filter (it pays for what it
returns); the UnprocessedItems a throttled BatchWriteItem returns (a batch over a budget
is throttled whole); Lambda's cold starts, burst scaling rate and reserved concurrency.
What charging.py cannot key (a Scan, a Query whose key condition it cannot read, a local
secondary index) goes unthrottled.

The environment: `ORCH_EMULATOR_MODEL` (`aws`: the shipped file; a path: that file;
empty or `off`: no model), read by `from_environ` when an Emulator starts, never at
import (as infra/emulator/speedups reads ORCH_MOTO_STOCK). `model_file` reads such a
value, the variable's or `orchestrator dev --aws-model`'s, one way for both."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["DEFAULT_FILE", "MODEL_VARIABLE", "AwsModel", "AwsModelError", "Latency",
           "from_environ", "load", "log_normal", "model_file"]

MODEL_VARIABLE = "ORCH_EMULATOR_MODEL"
DEFAULT_FILE = Path(__file__).resolve().parent.parent / "aws_model.yaml"
# The standard normal's 99th percentile: p99 = p50 * exp(Z99 * sigma).
Z99 = 2.3263478740408408

Basis = Literal["documented", "typical", "assumed", "measured"]


class AwsModelError(ValueError):
    """A model file the emulator cannot use: the message names the file and the field."""


class _Sourced(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    basis: Basis
    source: str = Field(min_length=1)  # a URL, or the measurement's reference
    note: str = ""


class Latency(_Sourced):
    """One operation's delay: a log-normal through these two percentiles."""
    p50_ms: float = Field(gt=0)
    p99_ms: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Latency:
        if self.p99_ms < self.p50_ms:
            raise ValueError(f"p99_ms ({self.p99_ms}) is below p50_ms ({self.p50_ms})")
        return self

    @property
    def mu(self) -> float:
        return math.log(self.p50_ms / 1000)

    @property
    def sigma(self) -> float:
        return math.log(self.p99_ms / self.p50_ms) / Z99


class Partition(_Sourced):
    read_units_per_second: float = Field(gt=0)
    write_units_per_second: float = Field(gt=0)


class Units(_Sourced):
    write_unit_bytes: int = Field(gt=0)
    read_unit_bytes: int = Field(gt=0)
    transaction_factor: float = Field(ge=1)
    eventually_consistent_read_factor: float = Field(gt=0, le=1)


class DynamoDB(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    partition: Partition
    burst_seconds: float = Field(gt=0)
    burst_source: str = ""
    units: Units


class LambdaLimits(_Sourced):
    concurrency: int = Field(gt=0)


class AwsModel(BaseModel):
    """The whole file. `latency[service][operation]`, `default` for the others."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1]
    latency: dict[Literal["dynamodb", "sqs", "s3", "lambda"], dict[str, Latency]]
    dynamodb: DynamoDB
    lambda_: LambdaLimits = Field(alias="lambda")

    @model_validator(mode="after")
    def _defaults(self) -> AwsModel:
        for service, operations in self.latency.items():
            if "default" not in operations:
                raise ValueError(f"latency.{service} has no `default`")
        return self

    def latency_of(self, service: str, operation: str) -> Latency | None:
        """The operation's distribution, its service's default, or None (no delay)."""
        operations = self.latency.get(service)  # type: ignore[call-overload]
        if operations is None:
            return None
        found: Latency | None = operations.get(operation) or operations.get("default")
        return found


def log_normal(latency: Latency, gauss: float) -> float:
    """The delay, in seconds, at this standard normal draw."""
    return math.exp(latency.mu + latency.sigma * gauss)


def load(path: str | Path) -> AwsModel:
    """The model in this file; AwsModelError names the file and each bad field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise AwsModelError(f"{path}: cannot read the AWS model: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise AwsModelError(f"{path}: not YAML: {exc}") from exc
    try:
        return AwsModel.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise AwsModelError(f"{path}: {problems}") from exc


def model_file(value: str) -> Path | None:
    """The model file a setting names (ORCH_EMULATOR_MODEL's value, or `orchestrator dev
    --aws-model`'s), or None for no model. Surrounding blanks are dropped and the words
    are read in any case: `aws`, `on` or `1` is the shipped file (DEFAULT_FILE); empty,
    `off`, `0` or `none` is no model; anything else is a file's path."""
    value = value.strip()
    word = value.lower()
    if word in ("", "off", "0", "none"):
        return None
    return DEFAULT_FILE if word in ("aws", "on", "1") else Path(value)


def from_environ(environ: Mapping[str, str] | None = None) -> AwsModel | None:
    """The model ORCH_EMULATOR_MODEL asks for (`aws`, or a file's path), or None."""
    env = os.environ if environ is None else environ
    path = model_file(env.get(MODEL_VARIABLE, ""))
    return None if path is None else load(path)
