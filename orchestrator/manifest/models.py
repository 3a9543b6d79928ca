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
written in the language of `orchestrator.expressions` and compiled once, when a model is
validated, so a mistake in one is a manifest error; the models keep their source text.
Each kind reads a fixed set of names, the context its consumer passes: `TRIGGER_NAMES`,
`KEY_NAMES`, `WEBHOOK_NAMES`.

The models live in three modules, re-exported here: `fields` (the shared base
model and field types), `workflows` (steps, retry, forEach, the `Workflow` DAG)
and `triggers` (schedule, event triggers, concurrency, throttle, webhooks).
`Backend` and the whole `Manifest` are defined here. What a backend's `capabilities`
enable (`shell`: `run:` steps and `script:` workflows) is `shell`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from orchestrator.manifest.fields import (
    DEFER_CHECKS,
    NAME_PATTERN,
    Duration,
    ManifestModel,
    Name,
    checks_deferred,
    did_you_mean,
)
from orchestrator.manifest.graph import condition_problems, graph_problems
from orchestrator.manifest.limits import BackendLimits
from orchestrator.manifest.retries import RetryPolicy
from orchestrator.manifest.shell import first_capable, resolve_shell
from orchestrator.manifest.triggers import (
    EVENT_PATTERN,
    KEY_NAMES,
    TRIGGER_NAMES,
    UNION_TAGS,
    WEBHOOK_NAMES,
    ConcurrencyGroup,
    EventTrigger,
    Schedule,
    Throttle,
    Verify,
    Webhook,
    webhook_problems,
)
from orchestrator.manifest.workflows import (
    RESERVED_PAYLOAD_KEYS,
    ForEach,
    Step,
    Workflow,
    backend_problems,
)
from orchestrator.manifest.yamlsafe import dotted

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
    "condition_problems",
    "did_you_mean",
    "graph_problems",
    "webhook_problems",
]


VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Backend(ManifestModel):
    """A deployment of functions: steps POST to `url + route`.

    `versions` names several deployments of its code live at once (label -> URL) and
    `current` the one new runs start on; `url` is then the current one's. A durable run
    is called on the version it started on for its whole life (services/versions/)."""

    url: str
    secret: str | None = Field(default=None, repr=False)  # HMAC key for request signatures
    openapi: str | None = None  # spec path (relative to the manifest) or http(s) URL
    timeout: Duration | None = None  # default per-call timeout for its steps
    # What it can do beyond serving its routes: `shell` runs `run:` steps and `script:`
    # workflows (orchestrator/manifest/shell.py).
    capabilities: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]] = Field(
        default_factory=list, max_length=32)
    versions: dict[Annotated[str, Field(pattern=VERSION_PATTERN)], str] = Field(
        default_factory=dict, max_length=64)
    current: str | None = None
    # What protects it: calls in flight and started per period (manifest/limits.py).
    limits: BackendLimits | None = None

    @model_validator(mode="before")
    @classmethod
    def _current_url(cls, data: Any) -> Any:
        """With `versions`, `url` is the current version's (when not given; a `current`
        that names none is reported by `_check_current`)."""
        if (isinstance(data, Mapping) and "url" not in data
                and isinstance(data.get("versions"), Mapping) and data["versions"]):
            urls = data["versions"]
            url = urls.get(data.get("current"), next(iter(urls.values())))
            return {**data, "url": url}
        return data

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _absolute(value, "url")

    @field_validator("versions")
    @classmethod
    def _check_versions(cls, value: dict[str, str]) -> dict[str, str]:
        return {label: _absolute(url, f"versions.{label}") for label, url in value.items()}

    @model_validator(mode="after")
    def _check_current(self) -> Self:
        if self.versions or self.current is not None:
            if self.current is None:
                raise ValueError("versions: name the one new runs start on with current:")
            if self.current not in self.versions:
                raise ValueError(f"current {self.current!r} is not one of versions"
                                 f" ({', '.join(sorted(self.versions))})")
            if self.url != self.versions[self.current]:
                raise ValueError(f"url {self.url!r} is not versions.{self.current}'s URL"
                                 " (leave url out: it is the current version's)")
        return self


def _absolute(value: str, field: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{field} {value!r} must be an absolute http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{field} {value!r} must not carry a query or fragment")
    return value.rstrip("/")


class Manifest(ManifestModel):
    """Backends, workflows and webhooks; `source` is the file the manifest was read from."""

    backends: dict[Name, Backend]
    workflows: dict[Name, Workflow]
    webhooks: dict[Name, Webhook] = Field(default_factory=dict)
    _source: Path = PrivateAttr(default_factory=Path)

    @model_validator(mode="before")
    @classmethod
    def _fill_shell_backends(cls, data: Any) -> Any:
        """Workflows given as mappings get their implied shell backend (as the loader
        gives them); `_check_backends` reports the ones that have none."""
        if not isinstance(data, Mapping) or not isinstance(data.get("workflows"), Mapping):
            return data
        caps = _capabilities(data.get("backends"))
        workflows = {name: resolve_shell(raw, caps)[0] if isinstance(raw, Mapping) else raw
                     for name, raw in data["workflows"].items()}
        return {**data, "workflows": workflows}

    @model_validator(mode="after")
    def _check_backends(self, info: ValidationInfo) -> Self:
        if not checks_deferred(info):
            caps = _capabilities(self.backends)
            for name, workflow in self.workflows.items():
                raw = workflow.model_dump(by_alias=True)
                problems = backend_problems(raw, list(self.backends))
                problems += resolve_shell(raw, caps)[1]
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

    def capable(self, capability: str) -> str | None:
        """The first backend (declaration order) declaring `capability`, or None."""
        return first_capable(_capabilities(self.backends), capability)


def _capabilities(backends: Any) -> dict[str, list[str]]:
    """Backend name -> its capabilities, from models or raw mappings (lenient)."""
    if not isinstance(backends, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for name, backend in backends.items():
        caps = (backend.capabilities if isinstance(backend, Backend)
                else backend.get("capabilities") if isinstance(backend, Mapping) else None)
        out[str(name)] = [c for c in caps if isinstance(c, str)] if isinstance(caps, list) else []
    return out
