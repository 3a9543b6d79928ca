"""Load and lint a manifest file: YAML -> checked `Manifest`, or every problem at once.

Loading goes section by section so one mistake never hides another:

1. the YAML is read safely (`yamlsafe`: no aliases, no duplicate keys, size cap) with
   the line of every key;
2. `${VAR}` / `${VAR:-default}` are substituted in `backends:` string values and in
   `webhooks.*.verify.secrets` entries, nowhere else (so `${{ expr }}` templates in
   workflows are never touched);
3. `workflows:` entries that are file paths are read (confined to the manifest's folder);
4. each backend, workflow and webhook is validated by the pydantic models (which also
   compile every expression and template), the step graph, backend references and
   webhook workflow references are checked on the raw data, and declared OpenAPI specs
   are checked for the routes steps call.

Every problem is one line `FILE:LINE: dotted.field: message`; `ManifestError.problems`
holds them all, ordered by file and line.
"""

from __future__ import annotations

import json
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import httpx
from pydantic import BaseModel, ValidationError

from orchestrator.errors import ManifestError
from orchestrator.manifest_models import (
    DEFER_CHECKS,
    NAME_PATTERN,
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
    backend_problems,
    did_you_mean,
    graph_problems,
    webhook_problems,
)
from orchestrator.yamlsafe import LineMap, YamlPath, dotted, load_yaml, load_yaml_file

__all__ = [
    "MAX_SPEC_BYTES",
    "OPENAPI_TIMEOUT",
    "LintReport",
    "lint_manifest",
    "lint_text",
    "load_manifest",
    "manifest_from_text",
]

MAX_SPEC_BYTES = 10 * 1024 * 1024
OPENAPI_TIMEOUT = 5.0
_TOP_LEVEL = ("backends", "workflows", "webhooks")
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
_ALIASES = {
    name: info.alias
    for model in _MODELS
    for name, info in model.model_fields.items()
    if info.alias and info.alias != name
}
_SECRET_FIELDS = ("secret", "secrets")
_VAR_REF = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)(?P<close>\}?)")
_VAR_BODY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


@dataclass(frozen=True)
class LintReport:
    """A manifest that loads, plus what will not behave as a reader might expect."""

    manifest: Manifest
    warnings: list[str]


def load_manifest(
    path: str | Path, environ: Mapping[str, str] | None = None, *, check_openapi: bool = True
) -> Manifest:
    """Read and check the manifest at `path`; `ManifestError` lists every problem."""
    return _read(Path(path), environ, check_openapi).manifest


def lint_manifest(path: str | Path, environ: Mapping[str, str] | None = None) -> LintReport:
    """`load_manifest` (with OpenAPI checks) plus warnings about settings that will not
    behave as a reader might expect. Raises `ManifestError` like `load_manifest`."""
    return _read(Path(path), environ, check_openapi=True).lint()


def manifest_from_text(
    text: str,
    filename: str = "manifest.yml",
    base_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    check_openapi: bool = True,
) -> Manifest:
    """Load a manifest held in memory; relative paths (workflow files, specs) resolve
    against `base_dir` (default: the folder of `filename`)."""
    return _Loader(filename, _base(filename, base_dir), environ, check_openapi).load(text).manifest


def lint_text(
    text: str,
    filename: str = "manifest.yml",
    base_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LintReport:
    """`lint_manifest` for a manifest held in memory."""
    return _Loader(filename, _base(filename, base_dir), environ, True).load(text).lint()


def _base(filename: str, base_dir: str | Path | None) -> Path:
    return Path(base_dir) if base_dir is not None else Path(filename).parent


def _read(path: Path, environ: Mapping[str, str] | None, check_openapi: bool) -> _Loaded:
    loader = _Loader(str(path), path.parent, environ, check_openapi)
    return loader.load_file(path)


@dataclass
class _Sources:
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
class _Findings:
    sources: _Sources
    items: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, path: YamlPath, message: str) -> None:
        filename, line, order = self.sources.locate(path)
        where = f" {dotted(path)}:" if path else ""
        self.items.append((order, line, f"{filename}:{line}:{where} {message}"))

    def add_raw(self, problems: list[str], order: int) -> None:
        self.items.extend((order, 0, problem) for problem in problems)

    def lines(self) -> list[str]:
        return [text for _, _, text in sorted(self.items, key=lambda item: item[:2])]


@dataclass
class _Loaded:
    manifest: Manifest
    sources: _Sources

    def lint(self) -> LintReport:
        notes = _Findings(self.sources)
        used: set[str] = set()
        for name, wf in self.manifest.workflows.items():
            at: YamlPath = ("workflows", name)
            used.update(step.backend for step in wf.steps.values())
            if wf.for_each is not None and wf.for_each.query is not None:
                notes.add(
                    (*at, "forEach", "query"),
                    f"workflow {name!r}: forEach.query "
                    "cannot be executed (there is no query engine); use "
                    "forEach.backend + forEach.route, or forEach.items",
                )
        for name, backend in self.manifest.backends.items():
            if backend.openapi is None and name in used:
                notes.add(
                    ("backends", name),
                    f"backend {name!r} declares no openapi spec, "
                    "so the routes its steps call are not checked",
                )
        for name, webhook in self.manifest.webhooks.items():
            if webhook.verify.scheme == "none":
                notes.add(
                    ("webhooks", name, "verify", "scheme"),
                    f"webhook {name!r} accepts unsigned deliveries: for local development only",
                )
        return LintReport(self.manifest, notes.lines())


class _Loader:
    def __init__(
        self,
        filename: str,
        base_dir: Path,
        environ: Mapping[str, str] | None,
        check_openapi: bool,
    ) -> None:
        self.filename = filename
        self.base_dir = base_dir
        self.environ = os.environ if environ is None else environ
        self.check_openapi = check_openapi
        self.specs: dict[str, set[str] | str] = {}

    def load_file(self, path: Path) -> _Loaded:
        data, lines = load_yaml_file(path, self.filename)
        return self._load(data, lines, path)

    def load(self, text: str) -> _Loaded:
        data, lines = load_yaml(text, self.filename)
        return self._load(data, lines, self.base_dir / Path(self.filename).name)

    def _load(self, data: Any, lines: LineMap, source: Path) -> _Loaded:
        sources = _Sources(lines)
        found = _Findings(sources)
        if not isinstance(data, dict):
            raise ManifestError(
                [
                    f"{self.filename}:{lines.line(())}: a manifest is a mapping "
                    "with backends: and workflows:"
                ]
            )
        for key in data:
            if key not in _TOP_LEVEL:
                found.add(
                    (key,),
                    f"unknown top-level key {key!r}{did_you_mean(key, _TOP_LEVEL)}"
                    f" (expected {', '.join(_TOP_LEVEL[:-1])} or {_TOP_LEVEL[-1]})",
                )
        raw_backends = self._section(data, "backends", found)
        raw_workflows = self._section(data, "workflows", found)
        raw_webhooks = self._section(data, "webhooks", found, required=False)

        backends: dict[str, Backend] = {}
        for name, raw in raw_backends.items():
            at: YamlPath = ("backends", name)
            self._check_name(at, name, found)
            raw = self._substitute(raw, at, found)
            model = self._validate(Backend, raw, at, found)
            if isinstance(model, Backend):
                backends[name] = model

        workflows: dict[str, Workflow] = {}
        calls: list[_Call] = []
        for name, raw in raw_workflows.items():
            at = ("workflows", name)
            self._check_name(at, name, found)
            if isinstance(raw, str):
                raw = self._include(name, raw, sources, found)
                if raw is None:
                    continue
            if not isinstance(raw, dict):
                found.add(at, "a workflow is a mapping (with steps:) or a path to a YAML file")
                continue
            # Graph, backend and route checks read the raw mapping, so they still run
            # when a field elsewhere in the workflow is invalid.
            deps, targets = _raw_edges(name, raw)
            calls.extend(targets)
            for path, message in graph_problems(deps):
                found.add((*at, *path), message)
            for path, message in backend_problems(raw, list(raw_backends)):
                found.add((*at, *path), message)
            model = self._validate(Workflow, raw, at, found)
            if isinstance(model, Workflow):
                workflows[name] = model

        webhooks: dict[str, Webhook] = {}
        for name, raw in raw_webhooks.items():
            at = ("webhooks", name)
            self._check_name(at, name, found)
            raw = self._substitute_secrets(raw, at, found)
            for path, message in webhook_problems(raw, list(raw_workflows)):
                found.add((*at, *path), message)
            model = self._validate(Webhook, raw, at, found)
            if isinstance(model, Webhook):
                webhooks[name] = model

        if self.check_openapi:
            self._check_routes(backends, calls, found)
        if found.items:
            raise ManifestError(found.lines())
        manifest = Manifest.model_validate(
            {"backends": backends, "workflows": workflows, "webhooks": webhooks},
            context={DEFER_CHECKS: True},
        )
        manifest._source = source
        return _Loaded(manifest, sources)

    def _section(
        self, data: dict[str, Any], key: str, found: _Findings, *, required: bool = True
    ) -> dict[str, Any]:
        value = data.get(key)
        if value is None and not required:
            return {}
        if value is None:
            found.add(
                (key,) if key in data else (),
                f"{key}: is required (a mapping of name -> definition)",
            )
            return {}
        if not isinstance(value, dict):
            found.add((key,), f"{key}: must be a mapping of name -> definition")
            return {}
        return value

    def _check_name(self, at: YamlPath, name: str, found: _Findings) -> None:
        if not NAME_PATTERN.fullmatch(name):
            found.add(
                at,
                f"name {name!r} must start with a letter or digit and use only "
                "letters, digits, '_', '.' and '-' (at most 128 characters)",
            )

    def _validate(
        self, model: type[BaseModel], raw: Any, at: YamlPath, found: _Findings
    ) -> BaseModel | None:
        try:
            # by_name=False: YAML must use the documented camelCase keys.
            return model.model_validate(
                raw, by_alias=True, by_name=False, context={DEFER_CHECKS: True}
            )
        except ValidationError as err:
            for error in err.errors(include_url=False):
                loc = tuple(part for part in error["loc"] if part != "[key]")
                if error["type"] != "extra_forbidden":  # there the key is the user's own
                    loc = tuple(_ALIASES.get(p, p) if isinstance(p, str) else p for p in loc)
                model_loc, yaml_loc = _as_written(raw, loc)
                found.add((*at, *yaml_loc), _explain(model, model_loc, error))
            return None

    def _substitute_secrets(self, raw: Any, at: YamlPath, found: _Findings) -> Any:
        """`_substitute` on each `verify.secrets` entry of a raw webhook. An entry that
        becomes empty is dropped, so `${OLD_SECRET:-}` makes a rotation secret optional;
        an entry whose substitution failed stays as written, so it is reported once."""
        if not isinstance(raw, dict) or not isinstance(raw.get("verify"), dict):
            return raw
        verify: dict[str, Any] = raw["verify"]
        secrets = verify.get("secrets")
        if not isinstance(secrets, list):
            return raw
        expanded = []
        for index, secret in enumerate(secrets):
            before = len(found.items)
            value = self._substitute(secret, (*at, "verify", "secrets", index), found)
            if len(found.items) > before:
                expanded.append(secret)
            elif value != "" or secret == "":
                expanded.append(value)
        return {**raw, "verify": {**verify, "secrets": expanded}}

    def _substitute(self, raw: Any, at: YamlPath, found: _Findings) -> Any:
        """Expand `${VAR}` / `${VAR:-default}` in string values; `$${` is a literal `${`."""
        if isinstance(raw, dict):
            return {key: self._substitute(value, (*at, key), found) for key, value in raw.items()}
        if isinstance(raw, list):
            return [self._substitute(value, (*at, i), found) for i, value in enumerate(raw)]
        if not isinstance(raw, str):
            return raw

        def expand(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            if match.group("body").startswith("{"):
                found.add(
                    at,
                    "'${{ ... }}' expressions are not evaluated here: only ${NAME} and "
                    "${NAME:-default} are substituted ($${ for a literal ${)",
                )
                return match.group(0)
            body = _VAR_BODY.fullmatch(match.group("body"))
            if not match.group("close") or body is None:
                found.add(
                    at,
                    f"malformed variable reference {match.group(0)!r} (write "
                    "${NAME} or ${NAME:-default}; $${ for a literal ${)",
                )
                return match.group(0)
            value = self.environ.get(body.group("name"))
            if value:
                return value
            if body.group("default") is not None:
                return body.group("default")
            if value is None:
                found.add(
                    at,
                    f"environment variable {body.group('name')} is not set (set it, "
                    f"or give a default: ${{{body.group('name')}:-value}})",
                )
            return ""

        return _VAR_REF.sub(expand, raw)

    def _include(self, name: str, rel: str, sources: _Sources, found: _Findings) -> Any:
        """Read the workflow file `rel`, which must stay inside the manifest's folder."""
        at: YamlPath = ("workflows", name)
        root = self.base_dir.resolve()
        target = (self.base_dir / rel).resolve()
        if not rel.strip() or not target.is_relative_to(root):
            found.add(
                at,
                f"workflow file {rel!r} is outside the manifest's folder {root} "
                "(paths are relative to the manifest; '..' and symlinks may not leave it)",
            )
            return None
        if not target.is_file():
            found.add(at, f"workflow file {rel!r} not found (looked for {target})")
            return None
        shown = os.path.normpath(os.path.join(os.path.dirname(self.filename), rel))
        order = len(sources.files) + 1
        try:
            data, lines = load_yaml_file(target, shown)
        except ManifestError as err:
            found.add_raw(err.problems, order)
            return None
        prefix: YamlPath = ()
        # Accept the file holding the workflow body, or `name:` wrapping it.
        if isinstance(data, dict) and list(data) == [name] and isinstance(data[name], dict):
            prefix, data = (name,), data[name]
        sources.files[name] = (lines, prefix, order)
        return data

    def _check_routes(
        self, backends: dict[str, Backend], calls: list[_Call], found: _Findings
    ) -> None:
        """Every route called on a backend with `openapi:` must be a POST in its spec."""
        for name, backend in backends.items():
            if backend.openapi is None:
                continue
            operations = self._spec_routes(backend.openapi)
            if isinstance(operations, str):
                users = ", ".join(call.label for call in calls if call.backend == name)
                needed = f"; it is needed to check steps {users}" if users else ""
                found.add(
                    ("backends", name, "openapi"),
                    f"cannot read OpenAPI spec {backend.openapi!r}: {operations}{needed}",
                )
                continue
            for call in calls:
                if call.backend != name:
                    continue
                if not any(_route_matches(call.route, op) for op in operations):
                    route, label = call.route, call.label
                    found.add(
                        call.path,
                        f"step {label} calls POST {route}, which is not a POST "
                        f"operation in backend {name!r}'s spec {backend.openapi!r}"
                        f"{did_you_mean(route, sorted(operations))}",
                    )

    def _spec_routes(self, where: str) -> set[str] | str:
        """POST paths of the spec at `where`, or why it could not be read (cached)."""
        if where not in self.specs:
            self.specs[where] = _read_spec(where, self.base_dir)
        return self.specs[where]


@dataclass(frozen=True)
class _Call:
    """A route some step (or forEach) POSTs to, as written in the raw manifest."""

    backend: str
    route: str
    path: YamlPath
    label: str


def _raw_edges(workflow: str, raw: dict[str, Any]) -> tuple[dict[str, list[str]], list[_Call]]:
    """Dependencies by step and the routes called, read leniently from a raw workflow."""
    deps: dict[str, list[str]] = {}
    callers: list[tuple[str, YamlPath, dict[str, Any]]] = []
    steps = raw.get("steps")
    if isinstance(steps, dict):
        for name, step in steps.items():
            step = step if isinstance(step, dict) else {}
            wanted = step.get("dependsOn")
            deps[name] = (
                [d for d in wanted if isinstance(d, str)] if isinstance(wanted, list) else []
            )
            callers.append((name, ("steps", name), step))
    for_each = raw.get("forEach")
    if isinstance(for_each, dict):
        callers.append(("forEach", ("forEach",), for_each))
    calls = [
        _Call(
            entry["backend"],
            entry["route"],
            ("workflows", workflow, *at, "route"),
            f"{workflow}.{label}",
        )
        for label, at, entry in callers
        if isinstance(entry.get("backend"), str) and isinstance(entry.get("route"), str)
    ]
    return deps, calls


def _read_spec(where: str, base_dir: Path) -> set[str] | str:
    try:
        if where.startswith(("http://", "https://")):
            response = httpx.get(where, timeout=OPENAPI_TIMEOUT, follow_redirects=True)
            response.raise_for_status()
            if len(response.content) > MAX_SPEC_BYTES:
                return f"spec is larger than {MAX_SPEC_BYTES} bytes"
            text = response.text
        else:
            path = base_dir / where
            if path.stat().st_size > MAX_SPEC_BYTES:
                return f"spec is larger than {MAX_SPEC_BYTES} bytes"
            text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("{"):
            spec = json.loads(text)
        else:
            spec, _ = load_yaml(text, where, max_bytes=MAX_SPEC_BYTES)
    except httpx.HTTPError as err:
        return f"fetching it failed: {err}"
    except OSError as err:
        return err.strerror or str(err)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"not valid JSON: {err}"
    except ManifestError as err:
        return err.message
    paths = spec.get("paths") if isinstance(spec, dict) else None
    if not isinstance(paths, dict):
        return "it has no 'paths' mapping"
    return {route for route, item in paths.items() if isinstance(item, dict) and "post" in item}


def _route_matches(route: str, operation: str) -> bool:
    """`/users/42` matches `/users/{id}`; a literal template matches itself."""
    if route == operation:
        return True
    pattern = "".join(
        "[^/]+" if part.startswith("{") else re.escape(part)
        for part in re.split(r"(\{[^}/]*\})", operation)
    )
    return re.fullmatch(pattern, route) is not None


def _as_written(raw: Any, loc: YamlPath) -> tuple[YamlPath, YamlPath]:
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
        yaml_loc.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(model_loc), tuple(yaml_loc)


def _explain(model: type[BaseModel], loc: YamlPath, error: Mapping[str, Any]) -> str:
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
