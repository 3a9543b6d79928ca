"""Compiled expressions: `compile_expression` parses and checks a source once, and
`Expression.evaluate` runs the tree through simpleeval with a locked-down node table,
as often as needed."""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from typing import Any

from simpleeval import SimpleEval

from orchestrator.expressions.checks import Source, check_tree
from orchestrator.expressions.values import (
    FUNCTIONS,
    LITERAL_NAMES,
    MAX_EXPRESSION_LENGTH,
    OPERATORS,
    ExpressionError,
    Fault,
    kind_of,
    lookup,
)

__all__ = ["Expression", "compile_expression"]


class _Evaluator(SimpleEval):  # type: ignore[misc]  # simpleeval ships no type hints
    """simpleeval with only the node kinds `check_tree` lets through, lookups that read
    mappings and lists (never Python attributes), and calls by name from `FUNCTIONS`."""

    def __init__(self, where: Source, context: Mapping[str, Any]) -> None:
        super().__init__(
            operators=OPERATORS,
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
        except Fault as fault:
            raise self.where.error(str(fault), node) from None

    def _eval_name(self, node: ast.Name) -> Any:
        if node.id in LITERAL_NAMES:
            return LITERAL_NAMES[node.id]
        return self.names.get(node.id)

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        return lookup(self._eval(node.value), node.attr)

    def _eval_subscript(self, node: ast.Subscript) -> Any:
        return lookup(self._eval(node.value), self._eval(node.slice))

    def _eval_call(self, node: ast.Call) -> Any:
        assert isinstance(node.func, ast.Name)  # check_tree refused everything else
        function = self.functions[node.func.id]
        return function(*(self._eval(arg) for arg in node.args))


class Expression:
    """A compiled expression: `compile_expression(source)`, then `evaluate` or `test`
    as often as needed (safe to share between threads)."""

    __slots__ = ("_tree", "_where", "source")

    def __init__(self, source: str, tree: ast.expr, where: Source) -> None:
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
        raise ExpressionError(f"an expression is a string, not {kind_of(source)}")
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(
            f"the expression is {len(source)} characters long; the limit is {MAX_EXPRESSION_LENGTH}"
        )
    where = Source(source)
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
    check_tree(tree, where, names)
    return Expression(source, tree, where)
