"""Load YAML into plain JSON-like data, remembering where every key came from.

Manifests are written by people and read by a program that reports mistakes, so the
loader is deliberately narrower than YAML:

- anchors and aliases are refused (they make "billion laughs" alias bombs possible and
  are never needed in a manifest);
- a mapping key must be a string and may appear once; the YAML 1.1 booleans `on`,
  `off`, `yes` and `no` written unquoted as keys stay the text they are (so `on:` is
  the key "on", not `True`, the GitHub Actions trap), while `true:` / `false:` keys and
  numbers must be quoted;
- one document per file, at most `MAX_MANIFEST_BYTES` (checked before parsing), nesting
  at most `MAX_DEPTH` levels deep;
- scalars are str, int, float, bool or null; an unquoted date stays the text it was.

Every refusal is a `ManifestError` whose line reads `FILE:LINE: ...`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.error import MarkedYAMLError
from yaml.events import AliasEvent, NodeEvent, StreamEndEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from orchestrator.errors import ManifestError

__all__ = [
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "LineMap",
    "YamlPath",
    "dotted",
    "load_yaml",
    "load_yaml_file",
]

MAX_MANIFEST_BYTES = 1024 * 1024
MAX_DEPTH = 64

YamlPath = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_PLAIN_SCALARS = {_TAG + name for name in ("str", "int", "float", "bool", "null")}
# Unquoted keys that YAML 1.1 would read as booleans but people write as words.
_WORD_KEYS = {"on", "off", "yes", "no"}


def dotted(path: YamlPath) -> str:
    """`("workflows", "x", "dependsOn", 0)` -> `workflows.x.dependsOn[0]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True)
class LineMap:
    """Source line (1-based) of every mapping entry and sequence item, by path."""

    filename: str
    lines: Mapping[YamlPath, int] = field(default_factory=dict)

    def line(self, path: YamlPath) -> int:
        """The line of `path`, or of its nearest ancestor that the file spells out
        (a missing field is reported where its parent mapping starts)."""
        for end in range(len(path), -1, -1):
            found = self.lines.get(path[:end])
            if found is not None:
                return found
        return 1

    def where(self, path: YamlPath) -> str:
        return f"{self.filename}:{self.line(path)}"


class _Refused(Exception):
    def __init__(self, mark: Any, message: str) -> None:  # a yaml Mark (pure or C)
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else 1
        self.message = message


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses anchors, aliases and deep nesting *while
    parsing*, so an alias bomb fails at its first anchor instead of expanding."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise _Refused(
                event.start_mark,
                f"alias *{event.anchor} is not allowed: manifests refuse YAML anchors and "
                "aliases (they enable alias-bomb expansion); repeat the value instead",
            )
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise _Refused(
                event.start_mark,
                f"anchor &{event.anchor} is not allowed: manifests refuse YAML anchors and "
                "aliases (they enable alias-bomb expansion); repeat the value instead",
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(
    text: str, filename: str, *, max_bytes: int = MAX_MANIFEST_BYTES
) -> tuple[Any, LineMap]:
    """Parse one YAML document into plain data plus the `LineMap` of its entries.

    An empty document gives `None`. Raises `ManifestError` (`FILE:LINE: ...`)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise ManifestError([f"{filename}:1: file is {size} bytes; the limit is {max_bytes} bytes"])
    lines: dict[YamlPath, int] = {}
    try:
        loader = _StrictLoader(text)
        try:
            root = _compose_single(loader)
            data = None if root is None else _build(loader, root, (), lines)
        finally:
            loader.dispose()
    except _Refused as refused:
        raise ManifestError([f"{filename}:{refused.line}: {refused.message}"]) from None
    except MarkedYAMLError as err:
        raise ManifestError([_syntax_problem(filename, err)]) from None
    except yaml.YAMLError as err:  # ReaderError: a character YAML does not allow
        position = getattr(err, "position", 0)
        line = text[:position].count("\n") + 1
        reason = getattr(err, "reason", None) or str(err)
        raise ManifestError([f"{filename}:{line}: YAML error: {reason}"]) from None
    if root is not None:
        lines[()] = root.start_mark.line + 1
    return data, LineMap(filename, lines)


def load_yaml_file(
    path: Path, filename: str | None = None, *, max_bytes: int = MAX_MANIFEST_BYTES
) -> tuple[Any, LineMap]:
    """`load_yaml` for a file: the size is checked before the file is read."""
    name = filename if filename is not None else str(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ManifestError([f"{name}:1: file is {size} bytes; the limit is {max_bytes} bytes"])
        raw = path.read_bytes()
    except OSError as err:
        raise ManifestError([f"{name}:1: cannot read file: {err.strerror or err}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ManifestError([f"{name}:{line}: file is not valid UTF-8"]) from None
    return load_yaml(text, name, max_bytes=max_bytes)


def _compose_single(loader: _StrictLoader) -> Node | None:
    loader.get_event()  # type: ignore[no-untyped-call]  # StreamStart
    if loader.check_event(StreamEndEvent):
        return None
    root = loader.compose_document()
    if not loader.check_event(StreamEndEvent):
        event = loader.get_event()  # type: ignore[no-untyped-call]
        raise _Refused(event.start_mark, "a second YAML document ('---'); a file holds exactly one")
    return root


def _syntax_problem(filename: str, err: MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    line = mark.line + 1 if mark is not None else 1
    problem = err.problem or "invalid YAML"
    context = ""
    if err.context and err.context_mark is not None:
        context = f" ({err.context} at line {err.context_mark.line + 1})"
    elif err.context:
        context = f" ({err.context})"
    return f"{filename}:{line}: YAML syntax error: {problem}{context}"


def _build(loader: _StrictLoader, node: Node, path: YamlPath, lines: dict[YamlPath, int]) -> Any:
    if isinstance(node, ScalarNode):
        return _scalar(loader, node)
    if isinstance(node, SequenceNode):
        if node.tag != _TAG + "seq":
            raise _Refused(node.start_mark, f"tag {node.tag} is not allowed here")
        items = []
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            items.append(_build(loader, item, (*path, index), lines))
        return items
    if isinstance(node, MappingNode):
        if node.tag != _TAG + "map":
            raise _Refused(node.start_mark, f"tag {node.tag} is not allowed here")
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = _key(loader, key_node, path)
            line = key_node.start_mark.line + 1
            if key in seen:
                where = dotted((*path, key))
                raise _Refused(
                    key_node.start_mark,
                    f"{where}: duplicate key {key!r} (first defined at line {seen[key]})",
                )
            seen[key] = line
            lines[(*path, key)] = line
            out[key] = _build(loader, value_node, (*path, key), lines)
        return out
    raise _Refused(node.start_mark, "unsupported YAML node")  # pragma: no cover


def _key(loader: _StrictLoader, node: Node, path: YamlPath) -> str:
    if isinstance(node, ScalarNode) and node.tag == _TAG + "str":
        return str(loader.construct_scalar(node))
    word = isinstance(node, ScalarNode) and str(node.value).lower() in _WORD_KEYS
    if word and node.tag == _TAG + "bool":
        return str(node.value)
    if isinstance(node, ScalarNode) and node.tag == _TAG + "merge":
        raise _Refused(node.start_mark, "merge keys ('<<') are not allowed")
    where = dotted(path) or "top level"
    shown = node.value if isinstance(node, ScalarNode) else "a collection"
    raise _Refused(
        node.start_mark,
        f"{where}: mapping key {shown!r} is not a string (YAML reads it as "
        f"{node.tag.removeprefix(_TAG)}); quote it",
    )


def _scalar(loader: _StrictLoader, node: ScalarNode) -> Any:
    if node.tag == _TAG + "timestamp":
        return node.value  # keep dates as written: manifests carry JSON values
    if node.tag not in _PLAIN_SCALARS:
        raise _Refused(node.start_mark, f"tag {node.tag} is not allowed here")
    value = loader.construct_object(node)
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused(node.start_mark, f"{node.value!r} is not a finite number")
    return value
