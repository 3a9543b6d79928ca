"""The manifest as pydantic models: backends (where functions live), workflows (DAGs
of steps, each one POST to a backend route) and webhooks (signed HTTP deliveries that
start a workflow).

Field names are snake_case in Python and camelCase in YAML/JSON (`depends_on` is
`dependsOn`). Models are frozen and refuse unknown fields, so a misspelt key is an error
rather than a silently ignored setting. Durations are stored as float seconds.

A `Workflow` checks its own graph (known dependencies, no self-dependency, no cycle), so
every instance, including one read back with `Workflow.from_json`, is a valid DAG. The
manifest loader runs the same checks itself, with file lines, and asks the models to skip
them by passing `context={DEFER_CHECKS: True}`.

Expressions and templates (`on[].if`, concurrency and throttle keys, webhook inputs) are
written in the language of `orchestrator.expressions` and compiled here once, so a
mistake in one is a manifest error; the models keep their source text. Each kind reads
a fixed set of names, the context its consumer passes: `TRIGGER_NAMES`, `KEY_NAMES`,
`WEBHOOK_NAMES`.
"""

from __future__ import annotations

import difflib
import heapq
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orchestrator.durations import parse_duration
from orchestrator.expressions import ExpressionError, compile_expression, compile_template
from orchestrator.webhook_signing import validate_secrets
from orchestrator.yamlsafe import YamlPath, dotted

__all__ = [
    "DEFER_CHECKS",
    "EVENT_PATTERN",
    "KEY_NAMES",
    "NAME_PATTERN",
    "RESERVED_PAYLOAD_KEYS",
    "TRIGGER_NAMES",
    "UNION_TAGS",
    "WEBHOOK_NAMES",
    "Backend",
    "ConcurrencyGroup",
    "EventTrigger",
    "ForEach",
    "Manifest",
    "RetryPolicy",
    "Schedule",
    "Step",
    "Throttle",
    "Verify",
    "Webhook",
    "Workflow",
    "backend_problems",
    "did_you_mean",
    "graph_problems",
    "webhook_problems",
]

DEFER_CHECKS = "defer_checks"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# The request body sent to a function already uses these keys (see DESIGN.md, "The
# function contract"); a static payload must not shadow them.
RESERVED_PAYLOAD_KEYS = ("input", "steps", "run")
EVENT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
_HEADER_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")  # an HTTP token
# The names each kind of expression may read: the context its consumer evaluates it in.
TRIGGER_NAMES = ("event",)  # on[].if
KEY_NAMES = ("input",)  # concurrency.group / concurrency.key / throttle.key
WEBHOOK_NAMES = ("body", "headers")  # webhooks.*.input values
# Tags of the `concurrency` union; pydantic puts them in error locations, and the
# loader drops them so messages show the path as written.
_POLICY_FORM = "<policy>"
_GROUP_FORM = "<group>"
UNION_TAGS = frozenset({_POLICY_FORM, _GROUP_FORM})


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, or `""`."""
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def _name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"name {value!r} must start with a letter or digit and use only letters, "
            "digits, '_', '.' and '-' (at most 128 characters)"
        )
    return value


def _payload_key(value: str) -> str:
    if value in RESERVED_PAYLOAD_KEYS:
        raise ValueError(
            f"payload key {value!r} is reserved: the request body already carries "
            f"{', '.join(RESERVED_PAYLOAD_KEYS)}"
        )
    return value


def _duration(value: Any, info: ValidationInfo) -> Any:
    return parse_duration(value, info.field_name or "duration")


def _route(value: str) -> str:
    if not value.startswith("/") or any(ch.isspace() for ch in value):
        raise ValueError(f"route {value!r} must start with '/' and contain no spaces")
    return value


def _event_name(value: str) -> str:
    if not EVENT_PATTERN.fullmatch(value):
        raise ValueError(
            f"event name {value!r} must start with a letter or digit and use only "
            "letters, digits, '_', '.', ':', '/' and '-' (at most 128 characters)"
        )
    return value


def _expression(names: Sequence[str]) -> AfterValidator:
    def check(value: str) -> str:
        try:
            compile_expression(value, names=names)
        except ExpressionError as err:
            raise ValueError(str(err)) from None
        return value

    return AfterValidator(check)


def _template(names: Sequence[str]) -> AfterValidator:
    def check(value: str) -> str:
        try:
            compile_template(value, names=names)
        except ExpressionError as err:
            raise ValueError(str(err)) from None
        return value

    return AfterValidator(check)


def _header(value: str) -> str:
    if not _HEADER_TOKEN.fullmatch(value):
        raise ValueError(f"{value!r} is not an HTTP header name")
    return value.lower()


def _secret(value: str, info: ValidationInfo) -> str:
    scheme = info.data.get("scheme")
    if scheme not in (None, "none"):  # an unknown scheme is reported on its own
        validate_secrets(scheme, [value])  # its messages never echo the secret
    return value


def _one_or_list(value: Any) -> Any:
    if isinstance(value, Mapping):
        return [value]
    if not isinstance(value, list | tuple):
        raise ValueError(
            "give one trigger mapping ({event: NAME, if: CONDITION}) or a list of them"
        )
    return value


Name = Annotated[str, AfterValidator(_name)]
Duration = Annotated[float, BeforeValidator(_duration)]
Route = Annotated[str, AfterValidator(_route)]
PayloadKey = Annotated[str, AfterValidator(_payload_key)]
EventName = Annotated[str, AfterValidator(_event_name)]
TriggerCondition = Annotated[str, _expression(TRIGGER_NAMES)]
KeyTemplate = Annotated[str, _template(KEY_NAMES)]
WebhookExpression = Annotated[str, _expression(WEBHOOK_NAMES)]
HeaderName = Annotated[str, AfterValidator(_header)]
Secret = Annotated[str, AfterValidator(_secret)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )


def _deferred(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and bool(info.context.get(DEFER_CHECKS))


class Backend(_Model):
    """A deployment of functions: steps POST to `url + route`."""

    url: str
    secret: str | None = Field(default=None, repr=False)  # HMAC key for request signatures
    openapi: str | None = None  # spec path (relative to the manifest) or http(s) URL
    timeout: Duration | None = None  # default per-call timeout for its steps

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"url {value!r} must be an absolute http:// or https:// URL")
        if parts.query or parts.fragment:
            raise ValueError(f"url {value!r} must not carry a query or fragment")
        return value.rstrip("/")


class RetryPolicy(_Model):
    """How often a step's call is retried and how long to wait in between.

    `max` and `strategy` follow the reference semantics; `delay` (the base wait) and
    `maxDelay` (the cap) are our extension so the backoff is explicit."""

    max: int = Field(default=3, ge=0, le=100, strict=True)
    strategy: Literal["linear", "exponential"] = "linear"
    delay: Duration = 1.0
    max_delay: Duration = 300.0

    @model_validator(mode="after")
    def _check_cap(self) -> Self:
        if self.max_delay < self.delay:
            raise ValueError(
                f"maxDelay ({self.max_delay:g}s) is shorter than delay ({self.delay:g}s)"
            )
        return self

    def delay_before(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 = the first retry)."""
        if retry < 1:
            raise ValueError(f"retry number must be >= 1, got {retry}")
        if self.strategy == "linear":
            wait = self.delay * retry
        else:
            wait = self.delay * 2.0 ** min(retry - 1, 64)
        return min(wait, self.max_delay)


class Step(_Model):
    """One POST to `backend`'s `route`, after every step in `depends_on` succeeded."""

    backend: str
    route: Route
    depends_on: list[str] = Field(default_factory=list)
    payload: dict[PayloadKey, Any] = Field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()
    timeout: Duration | None = None


class Schedule(_Model):
    """When a workflow fires by itself: a cron expression or a fixed interval."""

    cron: str | None = None
    every: Duration | None = None
    timezone: str = "UTC"

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                CronSim(value, datetime.now(UTC))
            except CronSimError as err:
                raise ValueError(f"cron {value!r} does not parse: {err}") from None
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r} (use an IANA name)") from None
        return value

    @model_validator(mode="after")
    def _one_cadence(self) -> Self:
        if (self.cron is None) == (self.every is None):
            raise ValueError("give exactly one of cron or every")
        return self


class ForEach(_Model):
    """Fan a workflow out: one run per row.

    Rows come from `items`, or from a POST to `backend` + `route` that answers a list.
    `query` is accepted for compatibility with reference manifests but cannot be
    executed here (lint warns)."""

    query: str | None = None
    backend: str | None = None
    route: Route | None = None
    items: list[Any] | None = None
    key: str = "id"

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.backend is None) != (self.route is None):
            raise ValueError("forEach.backend and forEach.route go together")
        sources = [
            name
            for name, present in (
                ("query", self.query is not None),
                ("backend+route", self.backend is not None),
                ("items", self.items is not None),
            )
            if present
        ]
        if len(sources) > 1:
            raise ValueError(f"give at most one row source, not {' and '.join(sources)}")
        return self


class EventTrigger(_Model):
    """Start a run when an event named `event` arrives and `if` (an expression over
    `event`, see `TRIGGER_NAMES`) is true for it; without `if`, every such event."""

    event: EventName
    if_: TriggerCondition | None = Field(default=None, alias="if")


class ConcurrencyGroup(_Model):
    """At most one running run per rendered (`group`, `key`); both are templates over
    the run's `input` (`key: "${{ input.tenant }}"`).

    `policy` says what a new run does while the group is busy: `queue` waits its turn
    (arrival order), `skip` is refused, `cancel-running` cancels the running one."""

    group: KeyTemplate = Field(min_length=1)
    key: KeyTemplate = ""
    policy: Literal["queue", "skip", "cancel-running"] = "queue"


class Throttle(_Model):
    """At most `limit` runs start per `period` for each rendered `key` (a template over
    the run's `input`; empty: one budget for the workflow), with up to `burst` at once.
    Over the rate, `queue` delays the run until a slot frees, `drop` refuses it."""

    limit: int = Field(ge=1, strict=True)
    period: Duration
    key: KeyTemplate = ""
    burst: int = Field(default=1, ge=1, strict=True)
    policy: Literal["queue", "drop"] = "queue"


Overlap = Literal["skip", "allow", "replace"]


def _concurrency_form(value: Any) -> str:
    return _GROUP_FORM if isinstance(value, Mapping | ConcurrencyGroup) else _POLICY_FORM


Concurrency = Annotated[
    Annotated[Overlap, Tag(_POLICY_FORM)] | Annotated[ConcurrencyGroup, Tag(_GROUP_FORM)],
    Discriminator(_concurrency_form),
]
_GROUP_OVERLAP: dict[str, Literal["skip", "replace", "queue"]] = {
    "queue": "queue",
    "skip": "skip",
    "cancel-running": "replace",
}


class Workflow(_Model):
    """A DAG of named steps; declaration order is irrelevant, `dependsOn` decides.

    `concurrency` is either a policy for scheduled fires (`skip`, `allow`, `replace`:
    what a fire does while the previous run for the same forEach key is still going) or
    a `ConcurrencyGroup` mapping; see the `overlap` and `group` properties."""

    steps: dict[Name, Step] = Field(min_length=1)
    on_failure: Literal["halt", "continue-independent"] = "halt"
    schedule: Schedule | None = None
    for_each: ForEach | None = None
    concurrency: Concurrency = "skip"
    throttle: Throttle | None = None
    on: Annotated[list[EventTrigger], BeforeValidator(_one_or_list)] = Field(
        default_factory=list
    )
    description: str | None = None

    @property
    def overlap(self) -> Literal["skip", "allow", "replace", "queue"]:
        """What a new run does while an earlier one it collides with is still going:
        the string form of `concurrency` as written, or for a group its policy as
        `queue`, `skip` or `replace` (= `cancel-running`)."""
        if isinstance(self.concurrency, ConcurrencyGroup):
            return _GROUP_OVERLAP[self.concurrency.policy]
        return self.concurrency

    @property
    def group(self) -> ConcurrencyGroup | None:
        """The concurrency group, when `concurrency` is given as a mapping."""
        return self.concurrency if isinstance(self.concurrency, ConcurrencyGroup) else None

    @model_validator(mode="after")
    def _check_graph(self, info: ValidationInfo) -> Self:
        if not _deferred(info):
            deps = {name: step.depends_on for name, step in self.steps.items()}
            problems = graph_problems(deps)
            if problems:
                raise ValueError("; ".join(f"{dotted(p)}: {m}" for p, m in problems))
        return self

    def roots(self) -> list[str]:
        """Steps without dependencies, in declaration order."""
        return [name for name, step in self.steps.items() if not step.depends_on]

    def dependants(self) -> dict[str, list[str]]:
        """Reverse edges: every step -> the steps that depend on it (declaration order)."""
        out: dict[str, list[str]] = {name: [] for name in self.steps}
        for name, step in self.steps.items():
            for dep in dict.fromkeys(step.depends_on):
                out[dep].append(name)
        return out

    def topological_order(self) -> list[str]:
        """Every step after its dependencies; ties keep declaration order."""
        index = {name: i for i, name in enumerate(self.steps)}
        unmet = {name: len(set(step.depends_on)) for name, step in self.steps.items()}
        dependants = self.dependants()
        ready = [index[name] for name, count in unmet.items() if count == 0]
        heapq.heapify(ready)
        names = list(self.steps)
        order: list[str] = []
        while ready:
            name = names[heapq.heappop(ready)]
            order.append(name)
            for child in dependants[name]:
                unmet[child] -= 1
                if unmet[child] == 0:
                    heapq.heappush(ready, index[child])
        if len(order) != len(names):  # only reachable for a deferred-check instance
            raise ValueError("the workflow has a dependency cycle")
        return order

    def to_json(self) -> str:
        """The definition as JSON (camelCase keys), as stored with each run."""
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Workflow:
        """Read back `to_json` output (all checks run again)."""
        return cls.model_validate_json(text)


class Verify(_Model):
    """How a webhook's deliveries are authenticated (see `orchestrator.webhook_signing`).

    `secrets` holds one secret, or two while rotating; `none` takes none and accepts
    unsigned deliveries (local development only). `tolerance` bounds the age of a
    timestamped delivery (`standard`, `stripe`)."""

    # Keep secrets out of pydantic's own error text (the loader never echoes them).
    model_config = ConfigDict(hide_input_in_errors=True)

    scheme: Literal["github", "standard", "stripe", "none"]
    secrets: list[Secret] = Field(default_factory=list, repr=False, validate_default=True)
    tolerance: Duration = 300.0

    @field_validator("secrets")
    @classmethod
    def _count_secrets(cls, value: list[str], info: ValidationInfo) -> list[str]:
        scheme = info.data.get("scheme")
        if scheme == "none" and value:
            raise ValueError("scheme 'none' checks no signature, so it takes no secrets")
        if scheme not in (None, "none") and not 1 <= len(value) <= 2:
            raise ValueError(
                f"scheme {scheme!r} needs one secret, or two while rotating (got {len(value)})"
            )
        return value


class Webhook(_Model):
    """An HTTP endpoint whose verified deliveries start `workflow`.

    `headers` lists the request headers (case-insensitive, stored lowercased) kept from a
    delivery. The run's input is `{body, headers}` (the parsed body and those headers),
    or, with `input`, one field per entry: field name -> expression over `body` and
    `headers` (`ref: body.ref`)."""

    model_config = ConfigDict(hide_input_in_errors=True)

    workflow: str
    verify: Verify
    headers: list[HeaderName] = Field(default_factory=list)
    input: dict[str, WebhookExpression] | None = None

    @field_validator("headers")
    @classmethod
    def _unique_headers(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if name in seen:
                raise ValueError(f"header {name!r} is listed twice (names are case-insensitive)")
            seen.add(name)
        return value

    @field_validator("input")
    @classmethod
    def _input_fields(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for field in value or {}:
            if not field:
                raise ValueError("an input field name must not be empty")
        return value


class Manifest(_Model):
    """Backends, workflows and webhooks; `source` is the file the manifest was read from."""

    backends: dict[Name, Backend]
    workflows: dict[Name, Workflow]
    webhooks: dict[Name, Webhook] = Field(default_factory=dict)
    _source: Path = PrivateAttr(default_factory=Path)

    @model_validator(mode="after")
    def _check_backends(self, info: ValidationInfo) -> Self:
        if not _deferred(info):
            for name, workflow in self.workflows.items():
                raw = workflow.model_dump(by_alias=True)
                problems = backend_problems(raw, list(self.backends))
                if problems:
                    raise ValueError(
                        "; ".join(f"workflows.{name}.{dotted(p)}: {m}" for p, m in problems)
                    )
            for name, webhook in self.webhooks.items():
                raw = webhook.model_dump(by_alias=True)
                problems = webhook_problems(raw, list(self.workflows))
                if problems:
                    raise ValueError(
                        "; ".join(f"webhooks.{name}.{dotted(p)}: {m}" for p, m in problems)
                    )
        return self

    @property
    def source(self) -> Path:
        return self._source


def graph_problems(deps: Mapping[str, Sequence[str]]) -> list[tuple[YamlPath, str]]:
    """Problems in a step graph given as step -> dependencies, each with its path
    relative to the workflow: duplicates, self-dependencies, unknown steps, cycles."""
    problems: list[tuple[YamlPath, str]] = []
    names = list(deps)
    for step, wanted in deps.items():
        seen: set[str] = set()
        for i, dep in enumerate(wanted):
            at: YamlPath = ("steps", step, "dependsOn", i)
            if dep in seen:
                problems.append((at, f"step {step!r} lists {dep!r} more than once"))
            elif dep == step:
                problems.append((at, f"step {step!r} depends on itself"))
            elif dep not in deps:
                others = [n for n in names if n != step]
                problems.append(
                    (
                        at,
                        f"step {step!r} depends on unknown step {dep!r}{did_you_mean(dep, others)}",
                    )
                )
            seen.add(dep)
    for cycle in _cycles(deps):
        problems.append(
            (("steps", cycle[0], "dependsOn"), f"dependency cycle: {' -> '.join(cycle)}")
        )
    return problems


def _cycles(deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Cycles found by a depth-first walk in run order (a -> b: b depends on a),
    one per back edge, ignoring self-loops and unknown steps."""
    children: dict[str, list[str]] = {name: [] for name in deps}
    for name, wanted in deps.items():
        for dep in dict.fromkeys(wanted):
            if dep != name and dep in children:
                children[dep].append(name)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    found: list[list[str]] = []
    seen_sets: set[frozenset[str]] = set()
    for start in deps:
        if start in state:
            continue
        path = [start]
        stack = [iter(children[start])]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                cycle = [*path[path.index(child) :], child]
                if frozenset(cycle) not in seen_sets:
                    seen_sets.add(frozenset(cycle))
                    found.append(cycle)
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(children[child]))
    return found


def backend_problems(workflow: Any, backends: Sequence[str]) -> list[tuple[YamlPath, str]]:
    """Steps (and forEach) of a raw workflow mapping that name an undeclared backend."""
    problems: list[tuple[YamlPath, str]] = []
    if not isinstance(workflow, Mapping):
        return problems
    targets: list[tuple[YamlPath, Any]] = []
    steps = workflow.get("steps")
    if isinstance(steps, Mapping):
        for name, step in steps.items():
            if isinstance(step, Mapping):
                targets.append((("steps", name, "backend"), step.get("backend")))
    for_each = workflow.get("forEach")
    if isinstance(for_each, Mapping):
        targets.append((("forEach", "backend"), for_each.get("backend")))
    for at, backend in targets:
        if isinstance(backend, str) and backend not in backends:
            problems.append(
                (
                    at,
                    f"unknown backend {backend!r}{did_you_mean(backend, backends)}"
                    f" (declared: {', '.join(backends) or 'none'})",
                )
            )
    return problems


def webhook_problems(webhook: Any, workflows: Sequence[str]) -> list[tuple[YamlPath, str]]:
    """The `workflow` of a raw webhook mapping, if it names an undeclared workflow."""
    if not isinstance(webhook, Mapping):
        return []
    wanted = webhook.get("workflow")
    if not isinstance(wanted, str) or wanted in workflows:
        return []
    return [
        (
            ("workflow",),
            f"unknown workflow {wanted!r}{did_you_mean(wanted, workflows)}"
            f" (declared: {', '.join(workflows) or 'none'})",
        )
    ]
