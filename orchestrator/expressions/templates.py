"""Templates: text with `${{ expression }}` holes (`compile_template`, `Template.render`);
see "Templates" in `orchestrator.expressions`."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from orchestrator.expressions.evaluator import Expression, compile_expression
from orchestrator.expressions.values import (
    MAX_EXPRESSION_LENGTH,
    MAX_STRING_LENGTH,
    ExpressionError,
    Fault,
    as_text,
    kind_of,
)

__all__ = ["Template", "compile_template", "hole_texts"]

_OPEN = re.compile(r"\$\$\{\{|\$\{\{")


class Template:
    """Text with `${{ expression }}` holes, compiled by `compile_template`."""

    __slots__ = ("_parts", "source")

    def __init__(self, source: str, parts: list[str | Expression]) -> None:
        self.source = source
        self._parts = parts

    @property
    def is_static(self) -> bool:
        """True when the template has no holes (it renders to the same text always)."""
        return all(isinstance(part, str) for part in self._parts)

    def render(self, context: Mapping[str, Any]) -> str:
        """The text with every hole evaluated against `context`: a string as-is, `null`
        as `""`, anything else as compact JSON. Raises `ExpressionError`."""
        out: list[str] = []
        size = 0
        for part in self._parts:
            if isinstance(part, str):
                text = part
            else:
                try:
                    text = as_text(part.evaluate(context))
                except Fault as fault:
                    raise ExpressionError(str(fault), self.source) from None
            size += len(text)
            if size > MAX_STRING_LENGTH:
                raise ExpressionError(
                    f"the rendered text is longer than {MAX_STRING_LENGTH} characters",
                    self.source,
                )
            out.append(text)
        return "".join(out)

    def bind(self, context: Mapping[str, Any], placeholder: Callable[[int], str]
             ) -> tuple[str, list[str]]:
        """The text with hole number i (from 0) replaced by `placeholder(i)`, and each
        hole's value as `render` gives it, in order: for a consumer that must never read
        a value as code (a shell command gets them as variables). Raises
        `ExpressionError`."""
        out: list[str] = []
        values: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            try:
                values.append(as_text(part.evaluate(context)))
            except Fault as fault:
                raise ExpressionError(str(fault), self.source) from None
            out.append(placeholder(len(values) - 1))
        if sum(map(len, values)) > MAX_STRING_LENGTH:
            raise ExpressionError(
                f"the values are longer than {MAX_STRING_LENGTH} characters", self.source)
        return "".join(out), values

    def __repr__(self) -> str:
        return f"Template({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.source == self.source

    def __hash__(self) -> int:
        return hash(("Template", self.source))


def compile_template(source: str, *, names: Collection[str] | None = None) -> Template:
    """Split `source` into text and compiled holes; `ExpressionError` for an unclosed
    or empty `${{`, or a hole that does not compile (columns count from the start of
    the template). `names` is passed on to `compile_expression`."""
    if not isinstance(source, str):
        raise ExpressionError(f"a template is a string, not {kind_of(source)}")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(
            f"the template is {len(source)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    parts: list[str | Expression] = []
    text = ""
    position = 0
    while (found := _OPEN.search(source, position)) is not None:
        text += source[position : found.start()]
        if found.group() == "$${{":
            text += "${{"
            position = found.end()
            continue
        end = _hole_end(source, found.end())
        if end < 0:
            raise ExpressionError(
                "unclosed '${{' (end the hole with '}}')", source, found.start() + 1
            )
        inner = source[found.end() : end]
        if not inner.strip():
            raise ExpressionError("empty '${{ }}'", source, found.start() + 1)
        try:
            expression = compile_expression(inner, names=names)
        except ExpressionError as err:
            column = found.end() + err.column if err.column is not None else found.start() + 1
            raise ExpressionError(err.reason, source, column) from None
        if text:
            parts.append(text)
            text = ""
        parts.append(expression)
        position = end + 2
    text += source[position:]
    if text:
        parts.append(text)
    return Template(source, parts)


def hole_texts(source: str) -> list[str]:
    """The expression text of each `${{ }}` hole of `source` (a template that compiles:
    `compile_template` first), in order; `$${{` is literal text."""
    out: list[str] = []
    position = 0
    while (found := _OPEN.search(source, position)) is not None:
        position = found.end()
        if found.group() == "$${{":
            continue
        end = _hole_end(source, position)
        if end < 0:
            break
        out.append(source[position:end])
        position = end + 2
    return out


def _hole_end(source: str, start: int) -> int:
    """Index of the `}}` closing a hole whose expression starts at `start` (quoted
    strings inside the expression may contain `}}`), or -1."""
    quote = ""
    index = start
    while index < len(source):
        char = source[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif source.startswith("}}", index):
            return index
        index += 1
    return -1
