"""What starts a workflow and what paces it: a `Schedule`, `on:` event triggers
(`EventTrigger`), a `ConcurrencyGroup` (or the `concurrency` policy string), a `Throttle`,
and signed webhooks (`Webhook`, authenticated as its `Verify` says).

Conditions, keys and webhook inputs are expressions and templates in the language of
`orchestrator.expressions`, compiled when the model is validated; each kind reads a fixed
set of names: `TRIGGER_NAMES`, `KEY_NAMES`, `WEBHOOK_NAMES`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.expressions import ExpressionError, compile_expression, compile_template
from orchestrator.manifest.fields import Duration, ManifestModel, did_you_mean
from orchestrator.manifest.yamlsafe import YamlPath
from orchestrator.webhook_signing import validate_secrets

__all__ = [
    "EVENT_PATTERN",
    "KEY_NAMES",
    "MAX_LIMIT",
    "TRIGGER_NAMES",
    "UNION_TAGS",
    "WEBHOOK_NAMES",
    "Concurrency",
    "ConcurrencyGroup",
    "EventTrigger",
    "KeyTemplate",
    "Overlap",
    "Priority",
    "Schedule",
    "Throttle",
    "Verify",
    "Webhook",
    "one_or_list",
    "webhook_problems",
]


EVENT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}")
_HEADER_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")  # an HTTP token
# The names each kind of expression may read: the context its consumer evaluates it in.
TRIGGER_NAMES = ("event",)  # on[].if
KEY_NAMES = ("input",)  # concurrency.group / .key, throttle.key, priority
WEBHOOK_NAMES = ("body", "headers")  # webhooks.*.input values
# Tags of the `concurrency` union; pydantic puts them in error locations, and the
# loader drops them so messages show the path as written.
_POLICY_FORM = "<policy>"
_GROUP_FORM = "<group>"
_LIMITS_FORM = "<limits>"
UNION_TAGS = frozenset({_POLICY_FORM, _GROUP_FORM, _LIMITS_FORM})


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


def one_or_list(value: Any) -> Any:
    """`on:` as written: one trigger mapping, or a list of them."""
    if isinstance(value, Mapping):
        return [value]
    if not isinstance(value, list | tuple):
        raise ValueError(
            "give one trigger mapping ({event: NAME, if: CONDITION}) or a list of them"
        )
    return value


EventName = Annotated[str, AfterValidator(_event_name)]
TriggerCondition = Annotated[str, _expression(TRIGGER_NAMES)]
KeyTemplate = Annotated[str, _template(KEY_NAMES)]
WebhookExpression = Annotated[str, _expression(WEBHOOK_NAMES)]
HeaderName = Annotated[str, AfterValidator(_header)]
Secret = Annotated[str, AfterValidator(_secret)]


class Schedule(ManifestModel):
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


class EventTrigger(ManifestModel):
    """Start a run when an event named `event` arrives and `if` (an expression over
    `event`, see `TRIGGER_NAMES`) is true for it; without `if`, every such event."""

    event: EventName
    if_: TriggerCondition | None = Field(default=None, alias="if")


MAX_LIMIT = 1000  # the run ids of a limit's holders share one item (its writes' size)


class ConcurrencyGroup(ManifestModel):
    """At most `limit` running runs per rendered (`group`, `key`); both are templates
    over the run's `input` (`key: "${{ input.tenant }}"`). Without `group`, the limit is
    the workflow's own.

    `policy` says what a new run does while the limit is full: `queue` waits its turn
    (keys take turns, then priority and arrival: README "Flow control"), `skip` is
    refused, `cancel-running` cancels the oldest running one."""

    group: KeyTemplate | None = None
    key: KeyTemplate = ""
    limit: int = Field(default=1, ge=1, le=MAX_LIMIT, strict=True)
    policy: Literal["queue", "skip", "cancel-running"] = "queue"

    @field_validator("group")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("String should have at least 1 character (or leave group out:"
                             " the limit is then the workflow's own)")
        return value


class Throttle(ManifestModel):
    """At most `limit` runs start per `period` for each rendered `key` (a template over
    the run's `input`; empty: one budget for the workflow), with up to `burst` at once.
    Over the rate, `queue` delays the run until a slot frees, `drop` refuses it."""

    limit: int = Field(ge=1, strict=True)
    period: Duration
    key: KeyTemplate = ""
    burst: int = Field(default=1, ge=1, strict=True)
    policy: Literal["queue", "drop"] = "queue"


class Overlap(StrEnum):
    """What a run does while another of its workflow is going (a workflow's
    `concurrency` as one word, and a schedule fire's): the one definition, which the
    engine's policies use too."""

    SKIP = "skip"
    ALLOW = "allow"
    REPLACE = "replace"


def _concurrency_form(value: Any) -> str:
    if isinstance(value, list | tuple):
        return _LIMITS_FORM
    return _GROUP_FORM if isinstance(value, Mapping | ConcurrencyGroup) else _POLICY_FORM


def _distinct_limits(value: list[ConcurrencyGroup]) -> list[ConcurrencyGroup]:
    seen = set()
    for n, c in enumerate(value):
        if (c.group, c.key) in seen:
            raise ValueError(f"[{n}] repeats the group and key of an earlier limit")
        seen.add((c.group, c.key))
    return value


Concurrency = Annotated[
    Annotated[Overlap, Tag(_POLICY_FORM)] | Annotated[ConcurrencyGroup, Tag(_GROUP_FORM)]
    | Annotated[list[ConcurrencyGroup], Field(min_length=1, max_length=4),
                AfterValidator(_distinct_limits), Tag(_LIMITS_FORM)],
    Discriminator(_concurrency_form),
]


def _priority(value: Any) -> Any:
    """`priority`: an integer 0-100, or a template over `input` rendering one."""
    if isinstance(value, bool):
        raise ValueError("priority is an integer 0-100 or a ${{ }} template, not a boolean")
    if isinstance(value, int):
        if not 0 <= value <= 100:
            raise ValueError(f"priority {value} is outside 0-100")
        return value
    if isinstance(value, str):
        try:
            compile_template(value, names=KEY_NAMES)
        except ExpressionError as err:
            raise ValueError(str(err)) from None
        return value
    raise ValueError("priority is an integer 0-100 or a ${{ }} template over input")


Priority = Annotated[int | str, BeforeValidator(_priority)]


class Verify(ManifestModel):
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


class Webhook(ManifestModel):
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
