"""Settings, built once at the edge from the environment and passed down.

Every environment variable the orchestrator reads is named here and nowhere else, and
`environment()` is the one read of the process environment (the manifest's `${VAR}`
substitution, the local stack's child processes and the CLI's defaults all go through
it). The endpoints are read here with boto3's own names and given to every client
explicitly (adapters/aws.py); the usual credential variables are boto3's alone.

| variable | read by | meaning |
|---|---|---|
| `ORCH_*` | `Settings.from_env` | the engine's settings (fields below) |
| `AWS_REGION`, `AWS_DEFAULT_REGION` | `Settings.from_env` | the region |
| `AWS_ENDPOINT_URL` | `Settings.from_env`, `dev` | every service's endpoint (no emulator then) |
| `AWS_ENDPOINT_URL_DYNAMODB` | `Settings.from_env`, `dev` | DynamoDB's, over `AWS_ENDPOINT_URL` |
| `AWS_ENDPOINT_URL_SQS`, `_S3` | `Settings.from_env`, `dev` | SQS's, S3's, likewise |
| `AWS_ENDPOINT_URL_CLOUDFORMATION` | `Settings.from_env`, `dev` | CloudFormation's, likewise |
| `ORCH_MANIFEST` | the CLI, `LambdaSettings` | the manifest's path (default `orchestrator.yml`) |
| `LAMBDA_TASK_ROOT` | `LambdaSettings` | where a Lambda container's code is (the manifest's root) |
| `ORCH_LAMBDA_MARGIN` | `LambdaSettings` | seconds a handler keeps free before its timeout (5) |
| `ORCHESTRATOR_URL` | the CLI | the API's URL (default `http://127.0.0.1:8080`) |
| `ORCHESTRATOR_API_KEY` | the CLI | the bearer key sent to the API |
| `ORCH_OTEL` | `Settings.from_env` | trace runs (orchestrator/telemetry.py): on, off |
| `OTEL_EXPORTER_OTLP_ENDPOINT` | `Settings.from_env` | set, tracing is on unless ORCH_OTEL=off |
| `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | `Settings.from_env` | likewise (OTel reads the rest) |
| `OTEL_TRACES_EXPORTER` | `Settings.from_env` | likewise unless `none`; `console` prints |
| `ORCH_EMULATOR_MODEL` | `dev` (and infra's emulator) | the AWS model: `aws`, a file, or `off` |
| `ORCH_LOG_FORMAT` | `Settings.from_env` | `text`, or `json` (the default in Lambda) |
| `AWS_LAMBDA_FUNCTION_NAME` | `Settings.from_env` | set by Lambda: logs default to `json` |"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from orchestrator.errors import UsageError

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_MANIFEST",
    "EMULATOR_MODEL_VARIABLE",
    "ENDPOINT_VARIABLE",
    "FROM_KEY_VARIABLE",
    "KEY_VARIABLE",
    "MANIFEST_VARIABLE",
    "SERVICE_ENDPOINT_VARIABLES",
    "URL_VARIABLE",
    "ClientDefaults",
    "LambdaSettings",
    "ResourceNames",
    "Settings",
    "SettingsError",
    "environment",
    "set_environment",
]


class SettingsError(UsageError, ValueError):
    """An environment variable (or a setting) the orchestrator cannot use: the message
    names it. A UsageError, so every command reports it in one line and exits non-zero."""

ENV_PREFIX = "ORCH_"
ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"
# boto3's per-service variables (AWS_ENDPOINT_URL_ + the service id, upper case), for the
# services the orchestrator has clients of: service name -> variable.
SERVICE_ENDPOINT_VARIABLES = {
    service: f"{ENDPOINT_VARIABLE}_{service.upper()}"
    for service in ("dynamodb", "sqs", "s3", "cloudformation")
}
MANIFEST_VARIABLE = "ORCH_MANIFEST"
# The embedded emulator's AWS model (infra/emulator/aws_model.py reads it too, as
# MODEL_VARIABLE, for emulators started outside the CLI: tests, benches).
EMULATOR_MODEL_VARIABLE = "ORCH_EMULATOR_MODEL"
URL_VARIABLE = "ORCHESTRATOR_URL"
KEY_VARIABLE = "ORCHESTRATOR_API_KEY"
# The key of the API `orchestrator runs pull --from` copies a run from.
FROM_KEY_VARIABLE = "ORCHESTRATOR_FROM_API_KEY"
DEFAULT_MANIFEST = "orchestrator.yml"
DEFAULT_API_URL = "http://127.0.0.1:8080"
# OpenTelemetry's own variables: any of them set turns tracing on by default.
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_TRACES_EXPORTER")
LOG_FORMATS = ("text", "json")


def environment() -> Mapping[str, str]:
    """The process environment: the one place it is read."""
    return os.environ


def set_environment(key: str, value: str | None) -> str | None:
    """Set (or, with None, remove) a variable of this process, for parts that read their
    settings from it (`dev --lambda` runs the Lambda handlers in-process); the value it
    had, to put back."""
    old = os.environ.get(key)
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
    return old


@dataclass(frozen=True)
class ClientDefaults:
    """What the CLI takes from the environment when a flag is not given."""

    manifest: str = DEFAULT_MANIFEST
    url: str = DEFAULT_API_URL
    api_key: str | None = None
    # An AWS endpoint is set (AWS_ENDPOINT_URL, else the first service's own one):
    # `orchestrator dev` uses the endpoints instead of its own emulator.
    endpoint: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClientDefaults:
        env = environment() if environ is None else environ
        endpoints = [env.get(v) for v in (ENDPOINT_VARIABLE, *SERVICE_ENDPOINT_VARIABLES.values())]
        return cls(
            manifest=env.get(MANIFEST_VARIABLE) or DEFAULT_MANIFEST,
            url=env.get(URL_VARIABLE) or DEFAULT_API_URL,
            api_key=env.get(KEY_VARIABLE) or None,
            endpoint=next((e for e in endpoints if e), None),
        )


@dataclass(frozen=True)
class LambdaSettings:
    """What a Lambda container reads beside `Settings`: its manifest's path (under the
    task root) and the margin its handlers keep before the invocation's timeout."""

    manifest_path: str = DEFAULT_MANIFEST
    margin: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LambdaSettings:
        env = environment() if environ is None else environ
        root = env.get("LAMBDA_TASK_ROOT") or "."
        manifest = env.get(MANIFEST_VARIABLE) or DEFAULT_MANIFEST
        return cls(manifest_path=os.path.join(root, manifest),
                   margin=_float(env, "LAMBDA_MARGIN", cls.margin))


@dataclass(frozen=True)
class ResourceNames:
    """Names of the tables, queues and bucket, all derived from one prefix
    (the `Prefix` parameter of template.yaml)."""

    prefix: str

    @property
    def runs_table(self) -> str:
        return f"{self.prefix}-runs"

    @property
    def steps_table(self) -> str:
        return f"{self.prefix}-steps"

    @property
    def control_table(self) -> str:
        return f"{self.prefix}-control"

    @property
    def dispatch_queue(self) -> str:
        return f"{self.prefix}-dispatch"

    @property
    def timer_queue(self) -> str:
        return f"{self.prefix}-timers"

    @property
    def dead_letter_queue(self) -> str:
        return f"{self.prefix}-dlq"

    @property
    def blob_bucket(self) -> str:
        return f"{self.prefix}-blobs"


def _endpoint(env: Mapping[str, str], variable: str) -> str | None:
    raw = (env.get(variable) or "").strip()
    if raw == "":
        return None
    # boto3 would refuse it only when the first client is made, naming no variable.
    if not raw.startswith(("http://", "https://")):
        raise SettingsError(f"{variable}={raw!r}: an endpoint is a URL (http://host:port)")
    return raw


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{ENV_PREFIX}{name}={raw!r} is not a number") from exc


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(ENV_PREFIX + name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "on", "true", "yes"):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise SettingsError(f"{ENV_PREFIX}{name}={raw!r}: use on or off")


@dataclass(frozen=True)
class Settings:
    prefix: str = "orch"
    region: str = "us-east-1"
    endpoint_url: str | None = None
    # One service's own endpoint, over `endpoint_url`, by boto3's service name ("dynamodb",
    # "sqs", "s3", "cloudformation"): e.g. DynamoDB on dynalite, SQS and S3 on moto.
    # Read through `endpoint_for`.
    service_endpoints: Mapping[str, str] = field(default_factory=dict, hash=False)
    # Sweeper cadence, and the grace after which an unclaimed dispatch counts as lost
    # (and a run's own follow-ups as overdue).
    sweep_interval: float = 5.0
    redispatch_after: float = 5.0
    # Every process's heartbeat (services/health/heartbeat.py): its item in the control
    # table and the counts for /metrics it adds, once per this many seconds.
    heartbeat_interval: float = 10.0
    # ... the longest a resent dispatch waits before being sent again (the wait doubles).
    redispatch_ceiling: float = 900.0
    # A sweep reads the wakes up to this long ago: the wake index's propagation delay
    # and the clock skew between processes.
    wake_lag: float = 1.0
    # ... and reads each wake a second time this much later: a write that landed late
    # (its process stalled between taking the time and sending it) is still seen.
    wake_late: float = 15.0
    # A backstop: every this many seconds one sweeper looks at every running run.
    full_sweep_every: float = 300.0
    # How long a received message stays invisible to other workers (kept alive while
    # it waits in a worker for a thread): a worker that dies holding it frees it then.
    visibility_timeout: float = 10.0
    # A claimed step's lease is its timeout plus this margin.
    lease_margin: float = 30.0
    default_step_timeout: float = 60.0
    # Outputs larger than this go to the blob bucket; larger than the cap fail the step.
    inline_output_limit: int = 64 * 1024
    output_hard_cap: int = 16 * 1024 * 1024
    # Retention of finished runs (seconds).
    ttl_success: float = 24 * 3600.0
    ttl_failed: float = 30 * 24 * 3600.0
    worker_threads: int = 8
    # A step with more than twice this many dependants has them promoted in slices of
    # this size, each by whichever worker takes its message (Promote).
    fanout_slice: int = 100
    # The API asks for a bearer key (`orchestrator keys create`) unless this is off.
    api_auth: bool = True
    # How long an Idempotency-Key, a webhook delivery id and an event are remembered.
    idempotency_retention: float = 24 * 3600.0
    delivery_retention: float = 72 * 3600.0
    event_retention: float = 7 * 24 * 3600.0
    # A schedule tick later than this (downtime) is not fired; the next one is.
    schedule_grace: float = 300.0
    # The key durable hooks' URL tokens are derived from (HMAC): tokens are never
    # stored, only their hashes. Unset, a random key is made once and kept in the
    # control table: set it in production, so the tables alone reveal no token.
    hook_secret: str | None = field(default=None, repr=False)
    # The API's public base URL, for the hook URLs workflows hand out (unset: a path).
    public_url: str | None = None
    # A durable workflow's call whose body would be larger sends its journal by
    # reference (a presigned URL of a blob) instead; so does one its host refused with
    # a 413. Under Lambda's 6 MB request limit.
    durable_inline_body: int = 4 * 1024 * 1024
    # The most operations one durable run may record (past it, the run fails with
    # journal_too_large and advice): its journal is read and sent whole on every call.
    durable_max_entries: int = 25_000
    # The newest durable protocol version the worker asks functions for
    # (functions/sdk/protocol/durable.py): 2 streams checkpoints; 1 is one step body per call.
    durable_protocol: int = 2
    # Traces of every run (orchestrator/telemetry.py, the `otel` extra).
    tracing: bool = False
    # How the processes log: `text` for people, `json` one object a line (logs.py).
    log_format: str = "text"

    def __post_init__(self) -> None:
        unknown = set(self.service_endpoints) - set(SERVICE_ENDPOINT_VARIABLES)
        if unknown:
            raise SettingsError(f"service_endpoints: no client for {sorted(unknown)}; the"
                             f" services are {sorted(SERVICE_ENDPOINT_VARIABLES)}")
        if self.log_format not in LOG_FORMATS:
            raise SettingsError(f"ORCH_LOG_FORMAT={self.log_format!r}: use text or json")
        if self.durable_protocol not in (1, 2):
            raise SettingsError(f"ORCH_DURABLE_PROTOCOL: {self.durable_protocol} is no durable"
                             " protocol version (1 or 2)")
        # A copy: the settings stay what they were built with.
        object.__setattr__(self, "service_endpoints", dict(self.service_endpoints))

    @property
    def names(self) -> ResourceNames:
        return ResourceNames(self.prefix)

    def endpoint_for(self, service: str) -> str | None:
        """The endpoint of `service` (a boto3 service name): its own, else the common one,
        else None (AWS's)."""
        return self.service_endpoints.get(service) or self.endpoint_url

    @property
    def has_endpoint(self) -> bool:
        """Whether any service is pointed at an endpoint of its own choosing (not AWS)."""
        return bool(self.endpoint_url) or any(self.service_endpoints.values())

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = environment() if environ is None else environ
        d = cls()
        return cls(
            prefix=env.get(ENV_PREFIX + "PREFIX", d.prefix),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or d.region,
            endpoint_url=_endpoint(env, ENDPOINT_VARIABLE),
            service_endpoints={
                service: url for service, variable in SERVICE_ENDPOINT_VARIABLES.items()
                if (url := _endpoint(env, variable))},
            sweep_interval=_float(env, "SWEEP_INTERVAL", d.sweep_interval),
            heartbeat_interval=_float(env, "HEARTBEAT_INTERVAL", d.heartbeat_interval),
            redispatch_after=_float(env, "REDISPATCH_AFTER", d.redispatch_after),
            redispatch_ceiling=_float(env, "REDISPATCH_CEILING", d.redispatch_ceiling),
            wake_lag=_float(env, "WAKE_LAG", d.wake_lag),
            wake_late=_float(env, "WAKE_LATE", d.wake_late),
            full_sweep_every=_float(env, "FULL_SWEEP_EVERY", d.full_sweep_every),
            visibility_timeout=_float(env, "VISIBILITY_TIMEOUT", d.visibility_timeout),
            lease_margin=_float(env, "LEASE_MARGIN", d.lease_margin),
            default_step_timeout=_float(env, "STEP_TIMEOUT", d.default_step_timeout),
            inline_output_limit=int(_float(env, "INLINE_OUTPUT_LIMIT", d.inline_output_limit)),
            output_hard_cap=int(_float(env, "OUTPUT_HARD_CAP", d.output_hard_cap)),
            ttl_success=_float(env, "TTL_SUCCESS", d.ttl_success),
            ttl_failed=_float(env, "TTL_FAILED", d.ttl_failed),
            worker_threads=int(_float(env, "WORKER_THREADS", d.worker_threads)),
            fanout_slice=max(1, int(_float(env, "FANOUT_SLICE", d.fanout_slice))),
            api_auth=_flag(env, "API_AUTH", d.api_auth),
            idempotency_retention=_float(env, "IDEMPOTENCY_RETENTION", d.idempotency_retention),
            delivery_retention=_float(env, "DELIVERY_RETENTION", d.delivery_retention),
            event_retention=_float(env, "EVENT_RETENTION", d.event_retention),
            schedule_grace=_float(env, "SCHEDULE_GRACE", d.schedule_grace),
            hook_secret=env.get(ENV_PREFIX + "HOOK_SECRET") or None,
            public_url=(env.get(ENV_PREFIX + "PUBLIC_URL") or "").rstrip("/") or None,
            durable_inline_body=int(_float(env, "DURABLE_INLINE_BODY", d.durable_inline_body)),
            durable_max_entries=int(_float(env, "DURABLE_MAX_ENTRIES", d.durable_max_entries)),
            durable_protocol=int(_float(env, "DURABLE_PROTOCOL", d.durable_protocol)),
            tracing=_flag(env, "OTEL", any(
                (env.get(v) or "").strip().lower() not in ("", "none") for v in OTEL_VARIABLES)),
            log_format=(env.get(ENV_PREFIX + "LOG_FORMAT") or "").strip().lower()
            or ("json" if env.get("AWS_LAMBDA_FUNCTION_NAME") else d.log_format),
        )
