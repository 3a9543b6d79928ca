"""How manifest problems are reported: every problem is one line `FILE:LINE: dotted.field:
message`. `Sources` knows which file and line each path was written at (the manifest, or
an included workflow file), `Findings` collects the lines in file and line order, and
`explain` turns a pydantic error into a sentence about the YAML field, as written."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from orchestrator.manifest.models import (
    UNION_TAGS,
    Backend,
    ConcurrencyGroup,
    EventTrigger,
    ForEach,
    Manifest,
    RetryPolicy,
    Schedule,
    Step,
    Throttle,
    Verify,
    Webhook,
    Workflow,
    did_you_mean,
)
from orchestrator.manifest.yamlsafe import LineMap, YamlPath, dotted

__all__ = ["ALIASES", "Findings", "Sources", "as_written", "explain"]

_MODELS: tuple[type[BaseModel], ...] = (
    Backend,
    RetryPolicy,
    Step,
    Schedule,
    ForEach,
    EventTrigger,
    ConcurrencyGroup,
    Throttle,
    Workflow,
    Verify,
    Webhook,
    Manifest,
)
# Python field name -> YAML key, for messages (pydantic reports aliases, but a field
# validated by name would be reported by name).
ALIASES = {
    name: info.alias
    for model in _MODELS
    for name, info in model.model_fields.items()
    if info.alias and info.alias != name
}
_SECRET_FIELDS = ("secret", "secrets")
# Keys a field also accepts (workflows.py): YAML key -> the other spelling.
_SPELLINGS: dict[str | int, str] = {"dependsOn": "depends_on"}


@dataclass
class Sources:
    """Where each path of the manifest was written: the manifest itself, or a workflow
    file (whose own lines are used below `workflows.<name>`)."""

    root: LineMap
    files: dict[str, tuple[LineMap, YamlPath, int]] = field(default_factory=dict)

    def locate(self, path: YamlPath) -> tuple[str, int, int]:
        """(file name, line, file order) for `path`."""
        if len(path) > 2 and path[0] == "workflows" and str(path[1]) in self.files:
            lines, prefix, order = self.files[str(path[1])]
            return lines.filename, lines.line((*prefix, *path[2:])), order
        return self.root.filename, self.root.line(path), 0


@dataclass
class Findings:
    """The problem lines found so far, each placed at its file and line by `sources`."""

    sources: Sources
    items: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, path: YamlPath, message: str) -> None:
        filename, line, order = self.sources.locate(path)
        where = f" {dotted(path)}:" if path else ""
        self.items.append((order, line, f"{filename}:{line}:{where} {message}"))

    def add_raw(self, problems: list[str], order: int) -> None:
        self.items.extend((order, 0, problem) for problem in problems)

    def lines(self) -> list[str]:
        return [text for _, _, text in sorted(self.items, key=lambda item: item[:2])]


def as_written(raw: Any, loc: YamlPath) -> tuple[YamlPath, YamlPath]:
    """`loc` for `_model_at` (union tags dropped) and as the YAML spells it (also
    without the list index pydantic adds when one mapping stands for a list of one)."""
    model_loc: list[str | int] = []
    yaml_loc: list[str | int] = []
    node = raw
    for part in loc:
        if part in UNION_TAGS and not (isinstance(node, dict) and part in node):
            continue
        model_loc.append(part)
        if isinstance(part, int) and isinstance(node, dict):
            continue  # YAML keys are strings: this index is pydantic's wrapping
        if isinstance(node, dict) and part not in node and _SPELLINGS.get(part) in node:
            part = _SPELLINGS[str(part)]  # the key as written: `depends_on`
        yaml_loc.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(model_loc), tuple(yaml_loc)


def explain(model: type[BaseModel], loc: YamlPath, error: Mapping[str, Any]) -> str:
    """A pydantic error as a sentence about the YAML field at `loc`."""
    kind, message, value = error["type"], str(error["msg"]), error.get("input")
    message = message.removeprefix("Value error, ")
    last = loc[-1] if loc else ""
    if isinstance(last, str):
        message = message.removeprefix(f"{last}: ")
    if kind == "extra_forbidden":
        owner = _model_at(model, loc[:-1])
        known = [info.alias or name for name, info in owner.model_fields.items()] if owner else []
        hint = did_you_mean(str(last), known) if known else ""
        allowed = f" (allowed: {', '.join(known)})" if known and not hint else ""
        return f"unknown field {last!r}{hint}{allowed}"
    if kind == "missing":
        return f"required field {last!r} is missing"
    if kind == "too_short":
        return "must not be empty"
    if any(part in _SECRET_FIELDS for part in loc):
        return message  # never echo a secret, not even a mistyped one
    if kind == "model_type":
        return f"must be a mapping (got {'a list' if isinstance(value, list) else repr(value)})"
    if kind.endswith("_type") and not isinstance(value, dict | list):
        return f"{message} (got {value!r})"
    if kind.endswith("_type"):
        return f"{message} (got a {'mapping' if isinstance(value, dict) else 'list'})"
    if kind != "value_error" and isinstance(value, str | int | float | bool):
        return f"{message} (got {value!r})"
    return message


def _model_at(model: type[BaseModel], loc: YamlPath) -> type[BaseModel] | None:
    """The model class that validates the mapping at `loc` below `model`."""
    current: Any = model
    for part in loc:
        current = _unwrap_optional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {info.alias or name: info for name, info in current.model_fields.items()}
            if part not in fields:
                return None
            current = fields[str(part)].annotation
        elif get_origin(current) in (dict, list):
            current = get_args(current)[-1]
        else:
            return None
    current = _unwrap_optional(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap_optional(annotation: Any) -> Any:
    """`X` for `X | None`, `Annotated[X, ...]`, or a union with one model member."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap_optional(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        args = [_unwrap_optional(arg) for arg in get_args(annotation) if arg is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(args) == 1:
            return args[0]
        return models[0] if len(models) == 1 else annotation
    return annotation
