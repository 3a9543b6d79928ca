"""Shell commands and bash scripts in the manifest, run by a backend that declares
`capabilities: [shell]`.

- A `run:` step is one command. It calls its shell backend at `RUN_ROUTE` with the
  command in the payload as `command` (`Definition.of` builds that call, so the engine
  sees an ordinary step). The command is a template over `input` and the ancestors'
  `steps.<name>.output` (`COMMAND_NAMES`); only `${{` opens a hole, so the shell's own
  `$(...)`, `$VAR` and `${VAR}` pass through as written. `bind_command` turns each hole
  into a variable of the command's environment (`ORCHESTRATOR_VALUE_<n>`) holding its
  value, so a value (a webhook's body, an event's data) is never read as shell code: a
  hole in double quotes is one word, in single quotes it is not expanded.
  `render_command` gives the text with the values written in (for display).
- A `script:` workflow is a durable workflow whose code is a bash file, served by its
  shell backend at `/durable/<workflow name>`. The loader reads the file once
  (`read_script`) and the workflow keeps its text and sha256 to send with each run.
- `resolve_shell` gives each `run:` step and `script:` workflow that names no backend
  the first backend with `shell`, and names the ones that cannot have one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestrator.expressions import ExpressionError
from orchestrator.expressions.conditions import compile_condition
from orchestrator.expressions.templates import Template, compile_template, hole_texts
from orchestrator.manifest.graph import ancestors
from orchestrator.manifest.yamlsafe import YamlPath

__all__ = [
    "COMMAND_KEY",
    "COMMAND_NAMES",
    "KNOWN_CAPABILITIES",
    "MAX_SCRIPT_BYTES",
    "RUN_ROUTE",
    "SHELL",
    "VALUES_KEY",
    "VALUE_VARIABLE",
    "Script",
    "bind_command",
    "command_problems",
    "first_capable",
    "read_script",
    "render_command",
    "resolve_shell",
]

SHELL = "shell"  # the capability a backend declares to run commands and scripts
KNOWN_CAPABILITIES = (SHELL,)  # what the orchestrator acts on (lint warns of others)
RUN_ROUTE = "/run"  # where a shell backend runs one `run:` command
COMMAND_KEY = "command"  # the payload key that carries it
VALUES_KEY = "values"  # the payload key that carries its holes' values
COMMAND_NAMES = ("input", "steps")  # what a command's `${{ }}` holes may read
MAX_SCRIPT_BYTES = 1024 * 1024  # as for the manifest itself


def check_command(source: str) -> str:
    """A `run:` command's holes parse and read only `input` and `steps` (which steps
    is `command_problems`'s check, on the whole workflow)."""
    if not source.strip():
        raise ValueError("a run: command must not be empty")
    try:
        compile_template(source, names=COMMAND_NAMES)
    except ExpressionError as err:
        raise ValueError(str(err)) from None
    return source


@lru_cache(maxsize=256)
def _compiled(source: str) -> tuple[Template, tuple[str, ...]]:
    """A command compiled once per process: its template, and the expression text of
    each `${{ }}` hole (`ExpressionError` when it does not compile)."""
    return compile_template(source, names=COMMAND_NAMES), tuple(hole_texts(source))


def _holes(source: str) -> tuple[str, ...]:
    return _compiled(source)[1]


@lru_cache(maxsize=256)
def _reads(source: str, steps: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """What a command's holes read, of `steps`: (as written, step name) pairs."""
    return tuple(pair for hole in _holes(source)
                 for pair in compile_condition(hole, list(steps)).refs.items())


def command_problems(deps: Mapping[str, Sequence[str]], commands: Mapping[str, str]
                     ) -> list[tuple[YamlPath, str]]:
    """`run:` commands that read a step which does not exist or is not an ancestor
    (its output would not exist when the command is rendered). Run on a sound graph."""
    problems: list[tuple[YamlPath, str]] = []
    for step, source in commands.items():
        at: YamlPath = ("steps", step, "run")
        try:
            holes = _holes(source)
        except ExpressionError:
            continue  # the step's own field reports it
        above = ancestors(deps, step)
        for hole in holes:
            try:
                refs = compile_condition(hole, list(deps)).refs
            except ExpressionError as err:
                problems.append((at, str(err)))
                continue
            for written, name in refs.items():
                if name not in above:
                    problems.append((at, f"steps.{written} reads step {name!r}, which is not "
                                     f"an ancestor of {step!r} (add it to dependsOn, directly "
                                     "or through a step that depends on it)"))
    return problems


def command_steps(source: str, steps: Sequence[str]) -> set[str]:
    """The steps (of `steps`, a run's step names) whose outputs a command's holes read."""
    return {name for _, name in _reads(source, tuple(steps))}


# The environment variable hole number n (from 1) of a `run:` command is given as.
VALUE_VARIABLE = "ORCHESTRATOR_VALUE_{}"


def _context(source: str, input: Any, outputs: Mapping[str, Any]) -> dict[str, Any]:
    steps = {written: {"output": outputs.get(name)}
             for written, name in _reads(source, tuple(outputs))}
    return {"input": input, "steps": steps}


def bind_command(source: str, input: Any, outputs: Mapping[str, Any]
                 ) -> tuple[str, dict[str, str]]:
    """The command with hole n replaced by `${ORCHESTRATOR_VALUE_n}`, and those
    variables' values (as `render_command` would write them): what the shell backend
    runs, the values in its environment, never parsed as code. Raises
    `ExpressionError` when a hole fails to evaluate."""
    template = _compiled(source)[0]
    text, values = template.bind(_context(source, input, outputs),
                                 lambda i: "${" + VALUE_VARIABLE.format(i + 1) + "}")
    return text, {VALUE_VARIABLE.format(i + 1): v for i, v in enumerate(values)}


def render_command(source: str, input: Any, outputs: Mapping[str, Any]) -> str:
    """The command with its holes filled: `input` is the run's input, `outputs` the
    ancestors' outputs by step name (`steps.ask_lead` reads step `ask-lead`). Raises
    `ExpressionError` when a hole fails to evaluate."""
    template = _compiled(source)[0]
    return template.render(_context(source, input, outputs))


def first_capable(capabilities: Mapping[str, Sequence[str]], capability: str) -> str | None:
    """The first backend (declaration order) that declares `capability`."""
    return next((name for name, caps in capabilities.items() if capability in caps), None)


def resolve_shell(workflow: Any, capabilities: Mapping[str, Sequence[str]]
                  ) -> tuple[Any, list[tuple[YamlPath, str]]]:
    """A raw workflow mapping with the shell backend filled in where it is implied
    (`run:` steps, a `script:` workflow), and the problems: no backend declares
    `shell`, or the one named does not. `capabilities`: backend name -> its
    capabilities, for the backends that validated (others report their own errors)."""
    if not isinstance(workflow, Mapping):
        return workflow, []
    default = first_capable(capabilities, SHELL)
    problems: list[tuple[YamlPath, str]] = []

    def place(what: str, at: YamlPath, named: Any) -> str | None:
        if named is None:
            if default is None:
                problems.append((at, f"{what} needs a backend that runs shell commands, and "
                                 "none declares one: add `capabilities: [shell]` to a backend"))
            return default
        if isinstance(named, str) and named in capabilities and SHELL not in capabilities[named]:
            problems.append(((*at, "backend"), f"{what} needs a backend that runs shell "
                             f"commands, and {named!r} declares no `shell`: add "
                             "`capabilities: [shell]` to it"
                             + (f", or name {default!r}" if default else "")))
        return None

    out = dict(workflow)
    steps = workflow.get("steps")
    if isinstance(steps, Mapping):
        resolved = {}
        for name, step in steps.items():
            # (with approval: too, the step itself says the two exclude each other)
            if (isinstance(step, Mapping) and step.get("run") is not None
                    and step.get("approval") is None):
                backend = place(f"run: step {name!r}", ("steps", name), step.get("backend"))
                if backend is not None:
                    step = {**step, "backend": backend}
            resolved[name] = step
        out["steps"] = resolved
    if workflow.get("script") is not None:
        backend = place("a script: workflow", (), workflow.get("backend"))
        if backend is not None:
            out["backend"] = backend
    return out, problems


@dataclass(frozen=True)
class Script:
    """A `script:` workflow's bash text as read at load, and its hex sha256."""

    text: str
    sha256: str


def read_script(base_dir: Path, rel: str) -> Script:
    """Read the script `rel` (relative to the manifest's folder, and inside it).
    `ValueError` says why it cannot be a script: outside the folder, missing, a
    directory, too large, not UTF-8 text, binary (a NUL byte), or empty."""
    root = base_dir.resolve()
    target = (base_dir / rel).resolve()
    if not rel.strip() or not target.is_relative_to(root):
        raise ValueError(f"script {rel!r} is outside the manifest's folder {root} (paths are "
                         "relative to the manifest; '..' and symlinks may not leave it)")
    if target.is_dir():
        raise ValueError(f"script {rel!r} is a directory, not a file ({target})")
    if not target.is_file():
        raise ValueError(f"script {rel!r} not found (looked for {target})")
    data = target.read_bytes()
    if len(data) > MAX_SCRIPT_BYTES:
        raise ValueError(f"script {rel!r} is {len(data)} bytes; the limit is "
                         f"{MAX_SCRIPT_BYTES}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise ValueError(f"script {rel!r} is binary, not a bash script (a NUL byte at "
                         f"offset {nul})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"script {rel!r} is not UTF-8 text (byte {err.start})") from None
    if not text.strip():
        raise ValueError(f"script {rel!r} is empty")
    return Script(text, hashlib.sha256(data).hexdigest())
