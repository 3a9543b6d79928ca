"""Load and lint a manifest file: YAML -> checked `Manifest`, or every problem at once.

Loading goes section by section so one mistake never hides another:

1. the YAML is read safely (`yamlsafe`: no aliases, no duplicate keys, size cap) with
   the line of every key;
2. `${VAR}` / `${VAR:-default}` are substituted in `backends:` string values and in
   `webhooks.*.verify.secrets` entries, nowhere else (so `${{ expr }}` templates in
   workflows are never touched);
3. `workflows:` entries that are file paths are read (confined to the manifest's folder);
   `run:` steps and `script:` workflows that name no backend get the first backend with
   `capabilities: [shell]` (`shell`), and a `script:` file is read once the workflow
   validates;
4. each backend, workflow and webhook is validated by the pydantic models (which also
   compile every expression and template), the step graph, backend references and
   webhook workflow references are checked on the raw data, and declared OpenAPI specs
   are checked for the routes steps call.

Every problem is one line `FILE:LINE: dotted.field: message`; `ManifestError.problems`
holds them all, ordered by file and line.

This module holds the entry points and the section-by-section loader. Problem lines and
pydantic error messages are in `problems`, `${VAR}` substitution in
`variables`, the OpenAPI route check in `routes`, and the models in
`models`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from functions.sdk.protocol import DURABLE_PREFIX
from orchestrator.errors import ManifestError
from orchestrator.manifest.hosts import SCRIPTS_BACKEND, script_host
from orchestrator.manifest.models import (
    DEFER_CHECKS,
    NAME_PATTERN,
    Backend,
    Manifest,
    Webhook,
    Workflow,
    backend_problems,
    condition_problems,
    did_you_mean,
    graph_problems,
    webhook_problems,
)
from orchestrator.manifest.problems import ALIASES, Findings, Sources, as_written, explain
from orchestrator.manifest.routes import MAX_SPEC_BYTES, OPENAPI_TIMEOUT, Call, SpecRoutes
from orchestrator.manifest.shell import (
    KNOWN_CAPABILITIES,
    RUN_ROUTE,
    command_problems,
    read_script,
    resolve_shell,
)
from orchestrator.manifest.variables import Variables
from orchestrator.manifest.yamlsafe import LineMap, YamlPath, load_yaml, load_yaml_file
from orchestrator.settings import environment

__all__ = [
    "MAX_SPEC_BYTES",
    "OPENAPI_TIMEOUT",
    "LintReport",
    "lint_manifest",
    "lint_text",
    "load_manifest",
    "manifest_from_text",
]

_TOP_LEVEL = ("backends", "workflows", "webhooks")


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
class _Loaded:
    manifest: Manifest
    sources: Sources

    def lint(self) -> LintReport:
        notes = Findings(self.sources)
        used: set[str] = set()
        for name, wf in self.manifest.workflows.items():
            at: YamlPath = ("workflows", name)
            used.update(step.backend for step in wf.steps.values() if step.backend)
            if wf.backend is not None:
                used.add(wf.backend)
            if wf.for_each is not None and wf.for_each.query is not None:
                notes.add(
                    (*at, "forEach", "query"),
                    f"workflow {name!r}: forEach.query "
                    "cannot be executed (there is no query engine); use "
                    "forEach.backend + forEach.route, or forEach.items",
                )
            if wf.priority and not wf.limits:
                notes.add(
                    (*at, "priority"),
                    f"workflow {name!r}: priority orders only runs waiting for a "
                    "concurrency limit, and this workflow has none (add concurrency: "
                    "{limit: N})",
                )
        for name, backend in self.manifest.backends.items():
            for capability in backend.capabilities:
                if capability not in KNOWN_CAPABILITIES:
                    notes.add(
                        ("backends", name, "capabilities"),
                        f"backend {name!r} declares capability {capability!r}, which the "
                        "orchestrator does not use"
                        f"{did_you_mean(capability, KNOWN_CAPABILITIES)}"
                        f" (known: {', '.join(KNOWN_CAPABILITIES)})",
                    )
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
        self.environ = environment() if environ is None else environ
        self.variables = Variables(self.environ)
        self.check_openapi = check_openapi
        self.routes = SpecRoutes(base_dir)

    def load_file(self, path: Path) -> _Loaded:
        data, lines = load_yaml_file(path, self.filename)
        return self._load(data, lines, path)

    def load(self, text: str) -> _Loaded:
        data, lines = load_yaml(text, self.filename)
        return self._load(data, lines, self.base_dir / Path(self.filename).name)

    def _load(self, data: Any, lines: LineMap, source: Path) -> _Loaded:
        sources = Sources(lines)
        found = Findings(sources)
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
            raw = self.variables.substitute(raw, at, found)
            model = self._validate(Backend, raw, at, found)
            if isinstance(model, Backend):
                backends[name] = model

        host = script_host(backends, self.environ)
        if host is not None:  # the script host a stack serves beside (SCRIPTS_URL)
            backends[SCRIPTS_BACKEND] = host
            raw_backends = {**raw_backends, SCRIPTS_BACKEND: {}}

        workflows: dict[str, Workflow] = {}
        calls: list[Call] = []
        capabilities = {name: backend.capabilities for name, backend in backends.items()}
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
            # `run:` steps and a `script:` get their shell backend when they name none.
            raw, shell = resolve_shell(raw, capabilities)
            for path, message in shell:
                found.add((*at, *path), message)
            # Graph, backend and route checks read the raw mapping, so they still run
            # when a field elsewhere in the workflow is invalid.
            deps, targets = _raw_edges(name, raw)
            calls.extend(targets)
            graph = graph_problems(deps)
            for path, message in graph:
                found.add((*at, *_as_spelled(raw, path)), message)
            if not graph:
                for path, message in condition_problems(deps, _raw_conditions(raw)):
                    found.add((*at, *path), message)
                for path, message in condition_problems(deps, _raw_conditions(raw, "fanOut"),
                                                        field="fanOut.items"):
                    found.add((*at, *path), message)
                for path, message in command_problems(deps, _raw_commands(raw)):
                    found.add((*at, *path), message)
            for path, message in backend_problems(raw, list(raw_backends)):
                found.add((*at, *path), message)
            model = self._validate(Workflow, raw, at, found)
            if isinstance(model, Workflow) and model.script is not None:
                try:
                    script = read_script(self.base_dir, model.script)
                except ValueError as err:
                    found.add((*at, "script"), f"workflow {name!r}: {err}")
                    continue
                model = model.with_script(script.text, script.sha256)
            if isinstance(model, Workflow):
                workflows[name] = model

        webhooks: dict[str, Webhook] = {}
        for name, raw in raw_webhooks.items():
            at = ("webhooks", name)
            self._check_name(at, name, found)
            raw = self.variables.substitute_secrets(raw, at, found)
            for path, message in webhook_problems(raw, list(raw_workflows)):
                found.add((*at, *path), message)
            model = self._validate(Webhook, raw, at, found)
            if isinstance(model, Webhook):
                webhooks[name] = model

        if self.check_openapi:
            self.routes.check(backends, calls, found)
        if found.items:
            raise ManifestError(found.lines())
        manifest = Manifest.model_validate(
            {"backends": backends, "workflows": workflows, "webhooks": webhooks},
            context={DEFER_CHECKS: True},
        )
        manifest._source = source
        return _Loaded(manifest, sources)

    def _section(
        self, data: dict[str, Any], key: str, found: Findings, *, required: bool = True
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

    def _check_name(self, at: YamlPath, name: str, found: Findings) -> None:
        if not NAME_PATTERN.fullmatch(name):
            found.add(
                at,
                f"name {name!r} must start with a letter or digit and use only "
                "letters, digits, '_', '.' and '-' (at most 128 characters)",
            )

    def _validate(
        self, model: type[BaseModel], raw: Any, at: YamlPath, found: Findings
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
                    loc = tuple(ALIASES.get(p, p) if isinstance(p, str) else p for p in loc)
                model_loc, yaml_loc = as_written(raw, loc)
                found.add((*at, *yaml_loc), explain(model, model_loc, error))
            return None


    def _include(self, name: str, rel: str, sources: Sources, found: Findings) -> Any:
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


def _raw_conditions(raw: dict[str, Any], within: str | None = None) -> dict[str, str]:
    """Each step's `if:` (or its `fanOut.items`) that is a string, read leniently from a
    raw workflow."""
    steps = raw.get("steps")
    if not isinstance(steps, dict):
        return {}
    out = {}
    for name, step in steps.items():
        if within is not None:
            step = step.get(within) if isinstance(step, dict) else None
        field = "items" if within is not None else "if"
        if isinstance(step, dict) and isinstance(step.get(field), str):
            out[name] = step[field]
    return out


def _as_spelled(raw: dict[str, Any], path: YamlPath) -> YamlPath:
    """A graph problem's path with `depends_on` where the step spells it so."""
    steps = raw.get("steps")
    if len(path) > 2 and path[0] == "steps" and path[2] == "dependsOn" and isinstance(
            steps, dict):
        step = steps.get(path[1])
        if isinstance(step, dict) and "depends_on" in step and "dependsOn" not in step:
            return (*path[:2], "depends_on", *path[3:])
    return path


def _raw_commands(raw: dict[str, Any]) -> dict[str, str]:
    """Each step's `run:` command that is a string, read leniently from a raw workflow."""
    steps = raw.get("steps")
    if not isinstance(steps, dict):
        return {}
    return {name: step["run"] for name, step in steps.items()
            if isinstance(step, dict) and isinstance(step.get("run"), str)}


def _raw_edges(workflow: str, raw: dict[str, Any]) -> tuple[dict[str, list[str]], list[Call]]:
    """Dependencies by step and the routes called, read leniently from a raw workflow."""
    deps: dict[str, list[str]] = {}
    callers: list[tuple[str, YamlPath, dict[str, Any]]] = []
    steps = raw.get("steps")
    if isinstance(steps, dict):
        for name, step in steps.items():
            step = step if isinstance(step, dict) else {}
            wanted = step.get("dependsOn", step.get("depends_on"))
            deps[name] = (
                [d for d in wanted if isinstance(d, str)] if isinstance(wanted, list) else []
            )
            if isinstance(step.get("run"), str) and "route" not in step:
                # A `run:` step calls its shell backend's /run (filled in above).
                step = {**step, "route": RUN_ROUTE, "_at": ("steps", name, "run")}
            callers.append((name, ("steps", name), step))
    for_each = raw.get("forEach")
    if isinstance(for_each, dict):
        callers.append(("forEach", ("forEach",), for_each))
    if isinstance(raw.get("backend"), str) and raw.get("script") is None:
        # A durable workflow: its backend must serve it (the SDK publishes the route).
        # A `script:` workflow is not checked: its shell backend serves any script.
        named = raw.get("workflow")
        served: str = named if isinstance(named, str) else workflow
        at: YamlPath = ("workflow",) if "workflow" in raw else ("backend",)
        callers.append((served, at[:-1], {"backend": raw["backend"],
                                          "route": DURABLE_PREFIX + served, "_at": at}))
    calls = [
        Call(
            entry["backend"],
            entry["route"],
            ("workflows", workflow, *entry["_at"]) if "_at" in entry
            else ("workflows", workflow, *at, "route"),
            f"{workflow}.{label}",
        )
        for label, at, entry in callers
        if isinstance(entry.get("backend"), str) and isinstance(entry.get("route"), str)
    ]
    return deps, calls
