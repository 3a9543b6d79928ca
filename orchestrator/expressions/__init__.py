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

Where it lives
--------------

This module is the public face of the language. Values, operators, functions, limits
and `ExpressionError` are in `values`; the compile-time node checks in
`checks`; `Expression` and its simpleeval evaluator in
`evaluator`; templates in `templates`.
"""

from __future__ import annotations

from orchestrator.expressions.evaluator import Expression, compile_expression
from orchestrator.expressions.templates import Template, compile_template
from orchestrator.expressions.values import (
    FUNCTIONS,
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    MAX_STRING_LENGTH,
    ExpressionError,
)

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
