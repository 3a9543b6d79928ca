"""The compile-time checks of the expression language: every node of a parsed expression
is checked against the short list the language allows (see `orchestrator.expressions`),
and a refusal names its column in the source."""

from __future__ import annotations

import ast
import difflib
from collections.abc import Collection, Mapping

from orchestrator.expressions.values import FUNCTIONS, LITERAL_NAMES, MAX_DEPTH, ExpressionError

__all__ = ["Source", "check_tree"]

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


class Source:
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


def check_tree(tree: ast.expr, where: Source, names: Collection[str] | None) -> None:
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
            if names is not None and node.id not in names and node.id not in LITERAL_NAMES:
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


def _check_call(node: ast.Call, where: Source) -> None:
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
