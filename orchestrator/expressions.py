"""A small, safe expression language for manifests: event filters, concurrency and
throttle keys, webhook input mappings.

Expressions are parsed once (`compile_expression`) and evaluated many times against a
context of JSON-like data (`{"event": ...}`, `{"input": ...}`, `{"body": ..., "headers":
...}`). Nothing is ever handed to Python's `eval`: the text is parsed with `ast`, every
node is checked against the short list below at compile time, and evaluation goes
through `simpleeval` with a locked-down node table.

The language
------------

- Literals: numbers (`42`, `-1.5`), strings (`'EUR'`, `"EUR"`), `true` / `false` /
  `null` (also written `True` / `False` / `None`).
- Names: a top-level key of the context (`event`, `input`, `body`). A name the context
  does not hold is `null`.
- Lookups: `event.data.total` and `body['x-y']` read a key of a mapping;
  `input.items[0]` (or `[-1]`) reads a list item. A missing key or index, or a lookup on
  something that is not a mapping or list, is `null` rather than an error, so
  `event.data.vip == true` on an event without `vip` is simply false.
- Comparisons: `==  !=  <  <=  >  >=  in  not in` (chains like `1 < x < 5` work).
  `==` is JSON equality (`true == 1` is false). An ordering comparison between values
  that are not both numbers or both strings (including `null`) is false, never an
  error. `a in b` tests a substring (two strings), an item (a list) or a key (a
  mapping); anything else is false, and `not in` is its negation.
- Logic: `and`, `or`, `not` (`and` / `or` return an operand, as in Python).
- Arithmetic: `+ - * / %` on numbers, `+` on two strings, unary `-`. A mismatch
  (`null + 1`), a division by zero or a result that is too large is a runtime error.
- Functions (the whole list; call them by name, `lower(x)`, never `x.lower()`):

  ==================== ========================================================
  `len(x)`             length of a string, list or mapping; else `null`
  `lower(s)`           `s` in lower case (`null` unless `s` is a string)
  `upper(s)`           `s` in upper case (`null` unless `s` is a string)
  `startswith(s, p)`   `s` starts with `p` (false unless both are strings)
  `endswith(s, p)`     `s` ends with `p` (false unless both are strings)
  `contains(h, n)`     `n in h` (see `in` above)
  `exists(x)`          `x` is not `null`
  `str(x)`             `x` as text, the way a template hole renders it
  `int(x)`             a number or numeric string as an integer (`null` stays `null`)
  `float(x)`           a number or numeric string as a float (`null` stays `null`)
  ==================== ========================================================

Refused when compiling (`ExpressionError`, with the column): method calls, names and
attributes starting with `_`, unknown functions, keyword arguments, `**`, `//`, bit
operators, `is`, slices, `x if c else y`, lambdas, comprehensions, list / dict / set /
tuple literals, f-strings, `:=`, and any source longer than `MAX_EXPRESSION_LENGTH`
characters or nested deeper than `MAX_DEPTH` levels. Strings built at run time (`+`,
`str`, template output) are capped at `MAX_STRING_LENGTH` characters. Line breaks in
the source count as spaces.

Templates
---------

A template is text with `${{ expression }}` holes: `"tenant-${{ input.tenant }}"`. A
hole renders a string as-is, `null` as the empty string and anything else as compact
JSON (`true`, `42`, `["a",1]`). `$${{` writes a literal `${{`. Text outside holes is
kept verbatim; templates are never touched by `${VAR}` environment substitution.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import operator
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from simpleeval import SimpleEval

__all__ = [
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_EXPRESSION_LENGTH",
    "MAX_STRING_LENGTH",
    "Expression",
    "ExpressionError",
    "Template",
    "compile_expression",
    "compile_template",
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


class _Fault(Exception):
    """A runtime failure inside an operator or function; `_Evaluator` adds the column."""


# --- values ----------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
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


def _text(value: Any) -> str:
    """How a template hole (and `str()`) renders a value."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    if len(text) > MAX_STRING_LENGTH:
        raise _Fault(f"the text would be longer than {MAX_STRING_LENGTH} characters")
    return text


def _number(value: _N) -> _N:
    if isinstance(value, int) and abs(value) > _MAX_INT:
        raise _Fault("the number is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Fault(f"the result is not a finite number ({value})")
    return value


def _lookup(container: Any, key: Any) -> Any:
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
            raise _Fault(f"the string would be longer than {MAX_STRING_LENGTH} characters")
        return left + right
    raise _Fault(f"cannot add {_kind(left)} and {_kind(right)} (+ takes numbers or strings)")


def _arithmetic(symbol: str, apply: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def run(left: Any, right: Any) -> Any:
        if not (_is_number(left) and _is_number(right)):
            raise _Fault(f"{symbol} takes two numbers, not {_kind(left)} and {_kind(right)}")
        if symbol in "/%" and right == 0:
            raise _Fault("division by zero")
        try:
            return _number(apply(left, right))
        except OverflowError:
            raise _Fault("the number is too large") from None

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
        raise _Fault(f"cannot negate {_kind(value)}")
    return -value


_OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
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
        raise _Fault(f"int() cannot convert {value!r}")
    if isinstance(value, int | float):
        return _number(int(value))
    if isinstance(value, str):
        try:
            return _number(int(value.strip()))
        except ValueError:
            raise _Fault(f"int() cannot convert {value[:50]!r}") from None
    raise _Fault(f"int() cannot convert {_kind(value)}")


def _float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float | str):
        try:
            return _number(float(value))
        except (ValueError, OverflowError):
            shown = value[:50] if isinstance(value, str) else value
            raise _Fault(f"float() cannot convert {shown!r}") from None
    raise _Fault(f"float() cannot convert {_kind(value)}")


# name -> (function, number of arguments)
FUNCTIONS: Mapping[str, tuple[Callable[..., Any], int]] = {
    "len": (_len, 1),
    "lower": (_lower, 1),
    "upper": (_upper, 1),
    "startswith": (_startswith, 2),
    "endswith": (_endswith, 2),
    "contains": (lambda haystack, needle: _contains(haystack, needle), 2),
    "exists": (lambda value: value is not None, 1),
    "str": (_text, 1),
    "int": (_int, 1),
    "float": (_float, 1),
}
_LITERAL_NAMES: Mapping[str, Any] = {"true": True, "false": False, "null": None}


# --- compiling -------------------------------------------------------------------------

_REFUSED_NODES: Mapping[type[ast.AST], str] = {
    ast.Lambda: "lambdas are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.IfExp: "conditional expressions (x if c else y) are not allowed",
    ast.List: "list literals are not allowed",
    ast.Tuple: "tuple literals are not allowed",
    ast.Dict: "dict literals are not allowed",
    ast.Set: "set literals are not allowed",
    ast.JoinedStr: "f-strings are not allowed (use + or a template)",
    ast.NamedExpr: "assignments (:=) are not allowed",
    ast.Slice: "slices are not allowed",
    ast.Starred: "*arguments are not allowed",
    ast.Await: "await is not allowed",
}
_BINARY = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Mod)
_UNARY = (ast.USub, ast.Not)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_SYMBOLS: Mapping[type[ast.AST], str] = {
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.Invert: "~",
    ast.UAdd: "unary +",
    ast.Is: "is",
    ast.IsNot: "is not",
}


class _Source:
    """The text that was parsed (one line) and how its offsets map back to `source`."""

    def __init__(self, source: str) -> None:
        self.source = source
        flat = source.replace("\r", " ").replace("\n", " ")
        self.text = flat.lstrip()
        self.shift = len(flat) - len(self.text)

    def column(self, node: ast.AST) -> int | None:
        """1-based column in `source` of `node` (of the name, for `x.name`)."""
        offset = getattr(node, "col_offset", None)
        if offset is None:
            return None
        if isinstance(node, ast.Attribute) and node.end_col_offset is not None:
            offset = node.end_col_offset - len(node.attr.encode("utf-8"))
        # col_offset counts UTF-8 bytes; report characters.
        chars = len(self.text.encode("utf-8")[:offset].decode("utf-8", errors="ignore"))
        return self.shift + chars + 1

    def error(self, reason: str, node: ast.AST | None = None) -> ExpressionError:
        return ExpressionError(reason, self.source, self.column(node) if node else None)


def _suggest(word: str, candidates: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check(tree: ast.expr, where: _Source, names: Collection[str] | None) -> None:
    """Refuse every node outside the language; iterative, so depth is checked first."""
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise where.error(f"the expression is nested more than {MAX_DEPTH} levels deep", node)
        children: list[ast.AST] = []
        if isinstance(node, ast.Constant):
            if node.value is not None and not isinstance(node.value, str | int | float):
                raise where.error(f"{type(node.value).__name__} literals are not allowed", node)
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise where.error(f"names starting with '_' are not allowed ({node.id})", node)
            if names is not None and node.id not in names and node.id not in _LITERAL_NAMES:
                raise where.error(
                    f"unknown name {node.id!r}{_suggest(node.id, names)}"
                    f" (available: {', '.join(sorted(names))})",
                    node,
                )
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise where.error(
                    f"attributes starting with '_' are not allowed (.{node.attr})", node
                )
            children = [node.value]
        elif isinstance(node, ast.Subscript):
            children = [node.value, node.slice]
        elif isinstance(node, ast.Compare):
            for op in node.ops:
                if not isinstance(op, _COMPARE):
                    raise where.error(_refused_operator(op), node)
            children = [node.left, *node.comparators]
        elif isinstance(node, ast.BoolOp):
            children = list(node.values)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, _UNARY):
                raise where.error(_refused_operator(node.op), node)
            children = [node.operand]
        elif isinstance(node, ast.BinOp):
            if not isinstance(node.op, _BINARY):
                raise where.error(_refused_operator(node.op), node)
            children = [node.left, node.right]
        elif isinstance(node, ast.Call):
            _check_call(node, where)
            children = list(node.args)
        else:
            reason = _REFUSED_NODES.get(type(node), f"{type(node).__name__} is not allowed")
            raise where.error(reason, node)
        stack.extend((child, depth + 1) for child in reversed(children))


def _refused_operator(op: ast.AST) -> str:
    symbol = _SYMBOLS.get(type(op), type(op).__name__)
    if isinstance(op, ast.Is | ast.IsNot):
        return f"'{symbol}' is not allowed (use == or !=)"
    return f"operator {symbol} is not allowed"


def _check_call(node: ast.Call, where: _Source) -> None:
    if not isinstance(node.func, ast.Name):
        hint = (
            f": write {node.func.attr}(x) instead of x.{node.func.attr}()"
            if isinstance(node.func, ast.Attribute) and node.func.attr in FUNCTIONS
            else ""
        )
        raise where.error(f"method calls are not allowed{hint}", node.func)
    name = node.func.id
    if name.startswith("_"):
        raise where.error(f"names starting with '_' are not allowed ({name})", node.func)
    if name not in FUNCTIONS:
        raise where.error(
            f"unknown function {name!r}{_suggest(name, FUNCTIONS)}"
            f" (available: {', '.join(FUNCTIONS)})",
            node.func,
        )
    if node.keywords:
        raise where.error(f"{name}() takes no keyword arguments", node.keywords[0])
    wanted = FUNCTIONS[name][1]
    if len(node.args) != wanted and not any(isinstance(a, ast.Starred) for a in node.args):
        plural = "s" if wanted != 1 else ""
        raise where.error(f"{name}() takes {wanted} argument{plural}, got {len(node.args)}", node)


# --- evaluating ------------------------------------------------------------------------


class _Evaluator(SimpleEval):  # type: ignore[misc]  # simpleeval ships no type hints
    """simpleeval with only the node kinds `_check` lets through, lookups that read
    mappings and lists (never Python attributes), and calls by name from `FUNCTIONS`."""

    def __init__(self, where: _Source, context: Mapping[str, Any]) -> None:
        super().__init__(
            operators=_OPERATORS,
            functions={name: entry[0] for name, entry in FUNCTIONS.items()},
            names=context,
        )
        self.where = where
        self.nodes = {
            ast.Constant: self._eval_constant,
            ast.Name: self._eval_name,
            ast.Attribute: self._eval_attribute,
            ast.Subscript: self._eval_subscript,
            ast.Compare: self._eval_compare,
            ast.BoolOp: self._eval_boolop,
            ast.UnaryOp: self._eval_unaryop,
            ast.BinOp: self._eval_binop,
            ast.Call: self._eval_call,
        }

    def _eval(self, node: ast.AST) -> Any:
        # simpleeval's own _eval also walks every result looking for forbidden callables;
        # values here are the caller's JSON data and our functions' results, and a walk
        # of a whole request body per lookup would be costly.
        try:
            return self.nodes[type(node)](node)
        except _Fault as fault:
            raise self.where.error(str(fault), node) from None

    def _eval_name(self, node: ast.Name) -> Any:
        if node.id in _LITERAL_NAMES:
            return _LITERAL_NAMES[node.id]
        return self.names.get(node.id)

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        return _lookup(self._eval(node.value), node.attr)

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        return _lookup(self._eval(node.value), self._eval(node.slice))

    def _eval_call(self, node: ast.Call) -> Any:
        assert isinstance(node.func, ast.Name)  # _check refused everything else
        function = self.functions[node.func.id]
        return function(*(self._eval(arg) for arg in node.args))


class Expression:
    """A compiled expression: `compile_expression(source)`, then `evaluate` or `test`
    as often as needed (safe to share between threads)."""

    __slots__ = ("_tree", "_where", "source")

    def __init__(self, source: str, tree: ast.expr, where: _Source) -> None:
        self.source = source
        self._tree = tree
        self._where = where

    def evaluate(self, context: Mapping[str, Any]) -> Any:
        """The value of the expression, with the top-level names read from `context`.
        Raises `ExpressionError` on a runtime failure (e.g. `null + 1`)."""
        evaluator = _Evaluator(self._where, context)
        try:
            return evaluator.eval(self.source, previously_parsed=self._tree)
        except ExpressionError:
            raise
        except RecursionError:
            raise self._where.error("the data is nested too deeply") from None
        except (TypeError, ValueError, ArithmeticError) as err:  # safety net: odd inputs
            raise self._where.error(f"evaluation failed: {err}") from None

    def test(self, context: Mapping[str, Any]) -> bool:
        """Whether the value is truthy; `False` when evaluation fails."""
        try:
            return bool(self.evaluate(context))
        except ExpressionError:
            return False

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.source == self.source

    def __hash__(self) -> int:
        return hash(("Expression", self.source))


def compile_expression(source: str, *, names: Collection[str] | None = None) -> Expression:
    """Parse and check `source`; `ExpressionError` (with the column) for a syntax error
    or a construct outside the language. With `names`, a top-level name outside that
    set is refused too (e.g. `{"body", "headers"}` for webhook inputs)."""
    if not isinstance(source, str):
        raise ExpressionError(f"an expression is a string, not {_kind(source)}")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(
            f"the expression is {len(source)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    where = _Source(source)
    if not where.text.strip():
        raise ExpressionError("the expression is empty", source)
    try:
        tree = ast.parse(where.text, mode="eval").body
    except SyntaxError as err:
        at_end = len(where.text) + 1  # CPython reports some errors at offset 0
        offset = err.offset if err.offset and err.lineno == 1 else at_end
        column = where.shift + min(offset, at_end)
        raise ExpressionError(f"syntax error: {err.msg}", source, column) from None
    except (ValueError, RecursionError, MemoryError):  # NUL bytes, pathological nesting
        raise ExpressionError("the expression cannot be parsed", source) from None
    _check(tree, where, names)
    return Expression(source, tree, where)


# --- templates -------------------------------------------------------------------------

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
                    text = _text(part.evaluate(context))
                except _Fault as fault:
                    raise ExpressionError(str(fault), self.source) from None
            size += len(text)
            if size > MAX_STRING_LENGTH:
                raise ExpressionError(
                    f"the rendered text is longer than {MAX_STRING_LENGTH} characters",
                    self.source,
                )
            out.append(text)
        return "".join(out)

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
        raise ExpressionError(f"a template is a string, not {_kind(source)}")
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
