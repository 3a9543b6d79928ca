"""What every manifest model shares: the frozen, camelCase, unknown-field-refusing base
model (`ManifestModel`), the `Name` and `Duration` field types, the `DEFER_CHECKS`
context flag and `did_you_mean` for messages."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationInfo
from pydantic.alias_generators import to_camel

from orchestrator.manifest.durations import parse_duration

__all__ = [
    "DEFER_CHECKS",
    "NAME_PATTERN",
    "Duration",
    "ManifestModel",
    "Name",
    "checks_deferred",
    "did_you_mean",
]


DEFER_CHECKS = "defer_checks"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


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


def _duration(value: Any, info: ValidationInfo) -> Any:
    return parse_duration(value, info.field_name or "duration")


Name = Annotated[str, AfterValidator(_name)]
Duration = Annotated[float, BeforeValidator(_duration)]


class ManifestModel(BaseModel):
    """The base of every manifest model: frozen, refuses unknown fields, camelCase in
    YAML/JSON and snake_case in Python."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )


def checks_deferred(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and bool(info.context.get(DEFER_CHECKS))
