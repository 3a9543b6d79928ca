"""What expressions compute with: the limits, the errors, how JSON-like values are looked
up, compared, combined and rendered as text, the operator table and the function table
(`FUNCTIONS`). The language itself is described in `orchestrator.expressions`."""

from __future__ import annotations

import ast
import json
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "FUNCTIONS",
    "LITERAL_NAMES",
    "MAX_DEPTH",
    "MAX_EXPRESSION_LENGTH",
    "MAX_STRING_LENGTH",
    "OPERATORS",
    "ExpressionError",
    "Fault",
    "as_text",
    "kind_of",
    "lookup",
]

MAX_EXPRESSION_LENGTH = 1000
MAX_STRING_LENGTH = 65_536
MAX_DEPTH = 32
# Integers stay far from sizes whose arithmetic could be slow; JSON ids fit easily.
_MAX_INT = 2**256
_N = TypeVar("_N")


class ExpressionError(ValueError):
    """An expression or template that does not compile, or failed while evaluating.

    `reason` says what is wrong; `column` (1-based, into `source`) says where, when known.
    """

    def __init__(self, reason: str, source: str = "", column: int | None = None) -> None:
        self.reason = reason
        self.source = source
        self.column = column
        if column is not None:
            where = f" (column {column} of {source!r})"
        elif source:
            where = f" (in {source!r})"
        else:
            where = ""
        super().__init__(f"{reason}{where}")


class Fault(Exception):
    """A runtime failure inside an operator or function; the evaluator adds the column."""


# --- values ----------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):  # e.g. a request's header mapping
        return dict(value)
    return str(value)


def as_text(value: Any) -> str:
    """How a template hole (and `str()`) renders a value."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    if len(text) > MAX_STRING_LENGTH:
        raise Fault(f"the text would be longer than {MAX_STRING_LENGTH} characters")
    return text


def _number(value: _N) -> _N:
    if isinstance(value, int) and abs(value) > _MAX_INT:
        raise Fault("the number is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise Fault(f"the result is not a finite number ({value})")
    return value


def lookup(container: Any, key: Any) -> Any:
    """`container[key]` for JSON-like data; `None` when there is no such item."""
    if isinstance(container, Mapping):
        if not isinstance(key, str):
            return None
        return container.get(key)
    if isinstance(container, list | tuple) and _is_number(key) and isinstance(key, int):
        try:
            return container[key]
        except IndexError:
            return None
    return None


# --- operators -------------------------------------------------------------------------


def _add(left: Any, right: Any) -> Any:
    if _is_number(left) and _is_number(right):
        return _number(left + right)
    if isinstance(left, str) and isinstance(right, str):
        if len(left) + len(right) > MAX_STRING_LENGTH:
            raise Fault(f"the string would be longer than {MAX_STRING_LENGTH} characters")
        return left + right
    raise Fault(f"cannot add {kind_of(left)} and {kind_of(right)} (+ takes numbers or strings)")


def _arithmetic(symbol: str, apply: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def run(left: Any, right: Any) -> Any:
        if not (_is_number(left) and _is_number(right)):
            raise Fault(f"{symbol} takes two numbers, not {kind_of(left)} and {kind_of(right)}")
        if symbol in "/%" and right == 0:
            raise Fault("division by zero")
        try:
            return _number(apply(left, right))
        except OverflowError:
            raise Fault("the number is too large") from None

    return run


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) != isinstance(right, bool):
        return False  # JSON equality: true is not 1
    return bool(left == right)


def _ordering(apply: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def run(left: Any, right: Any) -> bool:
        if (_is_number(left) and _is_number(right)) or (
            isinstance(left, str) and isinstance(right, str)
        ):
            return apply(left, right)
        return False

    return run


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, str):
        return isinstance(needle, str) and needle in haystack
    if isinstance(haystack, Mapping):
        return isinstance(needle, str) and needle in haystack
    if isinstance(haystack, list | tuple):
        return any(_equal(needle, item) for item in haystack)
    return False


def _negate(value: Any) -> Any:
    if not _is_number(value):
        raise Fault(f"cannot negate {kind_of(value)}")
    return -value


OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: _add,
    ast.Sub: _arithmetic("-", operator.sub),
    ast.Mult: _arithmetic("*", operator.mul),
    ast.Div: _arithmetic("/", operator.truediv),
    ast.Mod: _arithmetic("%", operator.mod),
    ast.USub: _negate,
    ast.Not: operator.not_,
    ast.Eq: _equal,
    ast.NotEq: lambda left, right: not _equal(left, right),
    ast.Lt: _ordering(operator.lt),
    ast.LtE: _ordering(operator.le),
    ast.Gt: _ordering(operator.gt),
    ast.GtE: _ordering(operator.ge),
    ast.In: lambda left, right: _contains(right, left),
    ast.NotIn: lambda left, right: not _contains(right, left),
}


# --- functions -------------------------------------------------------------------------


def _len(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | tuple | Mapping) else None


def _lower(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) else None


def _upper(value: Any) -> str | None:
    return value.upper() if isinstance(value, str) else None


def _startswith(value: Any, prefix: Any) -> bool:
    return isinstance(value, str) and isinstance(prefix, str) and value.startswith(prefix)


def _endswith(value: Any, suffix: Any) -> bool:
    return isinstance(value, str) and isinstance(suffix, str) and value.endswith(suffix)


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        raise Fault(f"int() cannot convert {value!r}")
    if isinstance(value, int | float):
        return _number(int(value))
    if isinstance(value, str):
        try:
            return _number(int(value.strip()))
        except ValueError:
            raise Fault(f"int() cannot convert {value[:50]!r}") from None
    raise Fault(f"int() cannot convert {kind_of(value)}")


def _float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float | str):
        try:
            return _number(float(value))
        except (ValueError, OverflowError):
            shown = value[:50] if isinstance(value, str) else value
            raise Fault(f"float() cannot convert {shown!r}") from None
    raise Fault(f"float() cannot convert {kind_of(value)}")


# name -> (function, number of arguments)
FUNCTIONS: Mapping[str, tuple[Callable[..., Any], int]] = {
    "len": (_len, 1),
    "lower": (_lower, 1),
    "upper": (_upper, 1),
    "startswith": (_startswith, 2),
    "endswith": (_endswith, 2),
    "contains": (lambda haystack, needle: _contains(haystack, needle), 2),
    "exists": (lambda value: value is not None, 1),
    "str": (as_text, 1),
    "int": (_int, 1),
    "float": (_float, 1),
}
LITERAL_NAMES: Mapping[str, Any] = {"true": True, "false": False, "null": None}
