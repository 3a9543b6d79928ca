"""How events shape a workflow's runs beyond starting them (`on:` is triggers.py's):

- `Batch` (`batch: {size, timeout, key}`): the events that start a workflow are
  gathered, per rendered `key`, into one run whose input is `{"events": [...]}`
  (services/admission/batch.py);
- `CancelOn` (`cancelOn: [{event, if}]`): an event of that name for which `if` holds
  cancels the workflow's queued and running runs (services/triggers/cancel_on.py).

A batch key is a template over `event` (the event as `on[].if` sees it); a cancel
condition an expression over `input` (the open run's) and `event`, written bare or as
one `${{ }}` hole, as a step's `if:` may be."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from orchestrator.expressions import ExpressionError, compile_expression, compile_template
from orchestrator.manifest.fields import Duration, ManifestModel
from orchestrator.manifest.triggers import EVENT_PATTERN

__all__ = [
    "BATCH_KEY_NAMES",
    "CANCEL_NAMES",
    "MAX_BATCH_SIZE",
    "MAX_BATCH_TIMEOUT",
    "Batch",
    "CancelOn",
    "cancel_condition",
]

# The most events one batch holds, and the longest a batch may wait for its first
# event's companions (a queued run waits as a row, re-armed by the sweeper, but a
# batch is meant to be short-lived).
MAX_BATCH_SIZE = 1000
MAX_BATCH_TIMEOUT = 86400.0
BATCH_KEY_NAMES = ("event",)
CANCEL_NAMES = ("input", "event")
_HOLE = re.compile(r"^\s*\$\{\{(.*)\}\}\s*$", re.DOTALL)


def cancel_condition(source: str) -> str:
    """A cancel condition's expression: the text of its one `${{ }}` hole, or the
    text as written."""
    hole = _HOLE.match(source)
    return hole.group(1) if hole and "${{" not in hole.group(1) else source


def _checked(names: Sequence[str], template: bool) -> AfterValidator:
    def check(value: str) -> str:
        try:
            if template:
                compile_template(value, names=names)
            else:
                compile_expression(cancel_condition(value), names=names)
        except ExpressionError as err:
            raise ValueError(str(err)) from None
        return value

    return AfterValidator(check)


def _event_name(value: str) -> str:
    if not EVENT_PATTERN.fullmatch(value):
        raise ValueError(
            f"event name {value!r} must start with a letter or digit and use only "
            "letters, digits, '_', '.', ':', '/' and '-' (at most 128 characters)")
    return value


def _entries(value: Any) -> Any:
    """`cancelOn:` as written: one mapping, or a list of them."""
    if isinstance(value, dict):
        return [value]
    if not isinstance(value, list | tuple):
        raise ValueError("give one mapping ({event: NAME, if: CONDITION}) or a list of them")
    return value


class Batch(ManifestModel):
    """Up to `size` events (per rendered `key`, a template over `event`; empty: one
    batch for the workflow) start one run, at once when the batch is full, else
    `timeout` after its first event."""

    size: int = Field(ge=1, le=MAX_BATCH_SIZE, strict=True)
    timeout: Duration
    key: Annotated[str, _checked(BATCH_KEY_NAMES, template=True)] = ""

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be longer than 0s")
        if value > MAX_BATCH_TIMEOUT:
            raise ValueError(f"at most {MAX_BATCH_TIMEOUT:g}s (1d)")
        return value


class CancelOn(ManifestModel):
    """An event named `event` for which `if` holds (an expression over `input`, the
    open run's, and `event`; without `if`, every such event) cancels the workflow's
    queued and running runs."""

    event: Annotated[str, AfterValidator(_event_name)]
    if_: Annotated[str, _checked(CANCEL_NAMES, template=False)] | None = Field(
        default=None, alias="if")


CancelOnList = Annotated[list[CancelOn], BeforeValidator(_entries)]
