"""Step conditions: a step's `if:`, an expression over `input` and
`steps.<name>.output`, evaluated once the step's dependencies are done.

- Written bare (`steps.ask.output.timed_out`) or as one hole (`${{ ... }}`), as
  reference 000 writes it.
- `!`, `&&` and `||` are accepted as spellings of `not`, `and` and `or` (outside
  string literals), so a condition copied from a YAML pipeline reads as written.
- A step whose name has dashes is addressed with underscores (`steps.ask_lead` is step
  `ask-lead`, since `ask-lead` would read as a subtraction); a reference that could mean
  two steps is refused.
- `condition_refs` names the steps a condition reads, so lint can refuse one that is
  not an ancestor (its output would not exist yet when the condition is evaluated)."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Mapping
from typing import Any

from orchestrator.expressions.evaluator import Expression, compile_expression
from orchestrator.expressions.values import ExpressionError

__all__ = ["CONDITION_NAMES", "Condition", "compile_condition", "condition_context"]

CONDITION_NAMES = ("input", "steps")
_HOLE = re.compile(r"^\s*\$\{\{(.*)\}\}\s*$", re.DOTALL)


def _spelled(text: str) -> str:
    """`text` with `!x`, `&&` and `||` outside string literals spelled `not x`, `and`
    and `or` (`!=` is left alone)."""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote is not None:
            out.append(c)
            if c == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            out.append(c)
        elif text.startswith("&&", i):
            out.append(" and ")
            i += 1
        elif text.startswith("||", i):
            out.append(" or ")
            i += 1
        elif c == "!" and not text.startswith("!=", i):
            out.append(" not ")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _unwrapped(source: str) -> str:
    hole = _HOLE.match(source)
    return hole.group(1) if hole and "${{" not in hole.group(1) else source


class Condition:
    """A compiled `if:`: `refs` maps each step name as written (`ask_lead`) to the step it
    names (`ask-lead`)."""

    __slots__ = ("expression", "refs", "source")

    def __init__(self, source: str, expression: Expression, refs: Mapping[str, str]) -> None:
        self.source = source
        self.expression = expression
        self.refs = dict(refs)

    def test(self, input: Any, outputs: Mapping[str, Any]) -> bool:
        """Whether the condition holds, given the run's input and the outputs of the
        steps it reads (by step name). One that fails to evaluate is false."""
        return self.expression.test(condition_context(input, self.refs, outputs))

    def value(self, input: Any, outputs: Mapping[str, Any]) -> Any:
        """The expression's value (ExpressionError if it fails to evaluate)."""
        return self.expression.evaluate(condition_context(input, self.refs, outputs))


def condition_context(input: Any, refs: Mapping[str, str], outputs: Mapping[str, Any]
                      ) -> dict[str, Any]:
    return {"input": input,
            "steps": {written: {"output": outputs.get(step)} for written, step in refs.items()}}


def _written_refs(tree: ast.AST, source: str) -> list[str]:
    refs: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "steps":
            continue
        if isinstance(node, ast.Attribute | ast.Subscript):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "steps":
                if isinstance(node, ast.Attribute):
                    refs.append(node.attr)
                elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                    refs.append(node.slice.value)
                else:
                    raise ExpressionError("name the step: steps.<name> or steps['name']", source)
    bare = sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "steps")
    if bare > len(refs):
        raise ExpressionError("read a step's output as steps.<name>.output, not steps itself",
                              source)
    return refs


def compile_condition(source: str, steps: Collection[str] | None) -> Condition:
    """Parse and check `source` against the workflow's `steps`; ExpressionError names
    what is wrong (a syntax error, a name outside `input` and `steps`, a step that
    does not exist or that two steps could be). `steps` None: the syntax alone (each
    name as written is taken for a step)."""
    text = _spelled(_unwrapped(source))
    expression = compile_expression(text, names=CONDITION_NAMES)
    tree = ast.parse(text.strip(), mode="eval")
    refs: dict[str, str] = {}
    for written in _written_refs(tree, source):
        if steps is None:
            refs[written] = written
            continue
        dashed = written.replace("_", "-")
        found = [n for n in dict.fromkeys((written, dashed)) if n in steps]
        if not found:
            raise ExpressionError(f"steps.{written}: no such step", source)
        if len(found) > 1:
            raise ExpressionError(f"steps.{written} could be step {written!r} or {dashed!r}:"
                                  " rename one", source)
        refs[written] = found[0]
    return Condition(source, expression, refs)
