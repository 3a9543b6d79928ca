"""The expression language: what it evaluates, what it refuses (and where), null
propagation, lenient comparisons, templates."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from orchestrator.expressions import (
    MAX_DEPTH,
    MAX_EXPRESSION_LENGTH,
    MAX_STRING_LENGTH,
    Expression,
    ExpressionError,
    compile_expression,
    compile_template,
)

EVENT: dict[str, Any] = {
    "event": {
        "name": "order.paid",
        "data": {
            "total": 150,
            "ratio": 0.5,
            "currency": "EUR",
            "tags": ["vip", "eu"],
            "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
            "meta": {"x-trace": "t1", "flag": True, "none": None},
        },
    }
}


def value(source: str, context: dict[str, Any] | None = None) -> Any:
    return compile_expression(source).evaluate(EVENT if context is None else context)


def refusal(source: str, **kwargs: Any) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        compile_expression(source, **kwargs)
    return caught.value


# --- what evaluates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("event.data.total > 100 and event.data.currency == 'EUR'", True),
        ('event.data.total > 100 and event.data.currency == "USD"', False),
        ("event.data.lines[0].sku", "A-1"),
        ("event.data.lines[-1]['qty']", 1),
        ("event.data.meta['x-trace']", "t1"),
        ("event['data']['ratio'] * 4", 2.0),
        ("event.data.total - 50 + 1", 101),
        ("event.data.total / 4", 37.5),
        ("event.data.total % 7", 3),
        ("-event.data.total", -150),
        ("'order-' + event.name", "order-order.paid"),
        ("1 < event.data.total <= 150", True),
        ("'vip' in event.data.tags", True),
        ("'gold' not in event.data.tags", True),
        ("'EU' in event.data.currency", True),
        ("'meta' in event.data", True),
        ("not event.data.meta.flag", False),
        ("event.data.meta.flag == true", True),
        ("event.data.meta.flag == True", True),
        ("event.data.meta.none == null", True),
        ("event.data.meta.none == None", True),
        ("event.data.missing or 'fallback'", "fallback"),
        ("event.data.total > 1000 or event.data.currency", "EUR"),
        ("1.5e3", 1500.0),
    ],
)
def test_evaluates(source: str, expected: Any) -> None:
    assert value(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("len(event.data.tags)", 2),
        ("len(event.data.currency)", 3),
        ("len(event.data.meta)", 3),
        ("len(event.data.total)", None),
        ("lower(event.data.currency)", "eur"),
        ("upper('eur')", "EUR"),
        ("lower(event.data.missing)", None),
        ("startswith(event.name, 'order.')", True),
        ("endswith(event.name, '.paid')", True),
        ("startswith(event.data.missing, 'x')", False),
        ("contains(event.data.tags, 'eu')", True),
        ("contains(event.name, 'paid')", True),
        ("contains(event.data.total, 1)", False),
        ("exists(event.data.currency)", True),
        ("exists(event.data.meta.none)", False),
        ("exists(event.data.nope)", False),
        ("str(event.data.total)", "150"),
        ("str(event.data.tags)", '["vip","eu"]'),
        ("str(event.data.meta.none)", ""),
        ("str(event.data.meta.flag)", "true"),
        ("int(' 42 ') + 1", 43),
        ("int(event.data.ratio * 5)", 2),
        ("int(event.data.nope)", None),
        ("float('2.5') * 2", 5.0),
        ("float(event.data.total)", 150.0),
    ],
)
def test_functions(source: str, expected: Any) -> None:
    assert value(source) == expected


def test_line_breaks_count_as_spaces() -> None:
    assert value("event.data.total > 100\n  and event.data.currency == 'EUR'") is True


def test_context_values_that_look_like_aliases_do_not_shadow_literals() -> None:
    assert value("true", {"true": False}) is True


# --- missing data is null, mismatches are false ---------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "event.data.vip",
        "event.data.vip.level",
        "event.data.lines[5]",
        "event.data.lines[0].missing",
        "event.data.tags['x']",  # a string key on a list
        "event.data.meta[0]",  # an index on a mapping
        "event.data.total.digits",  # a key of a number
        "event.name[0]",  # strings are not indexed
        "event.data.lines[true]",  # a boolean is not an index
        "nothing",  # a name the context does not hold
        "nothing.at.all",
    ],
)
def test_missing_key_or_index_is_null(source: str) -> None:
    assert value(source) is None


def test_missing_key_makes_a_filter_false_not_an_error() -> None:
    condition = compile_expression("event.data.vip == true")
    assert condition.test(EVENT) is False
    assert condition.test({"event": {"data": {"vip": True}}}) is True
    assert condition.test({}) is False


@pytest.mark.parametrize(
    "source",
    [
        "event.data.missing > 1",
        "event.data.missing <= 1",
        "null < 1",
        "1 > null",
        "'a' < 1",
        "event.data.tags < event.data.lines",
        "true > false",  # booleans are not ordered
        "event.data.meta >= event.data.meta",
        "true == 1",  # JSON equality
        "1 == '1'",
        "1 in 'abc'",
        "'a' in event.data.total",
        "'a' in null",
    ],
)
def test_mismatched_comparisons_are_false(source: str) -> None:
    assert value(source) is False


def test_not_in_negates_in_even_for_mismatches() -> None:
    assert value("'a' not in null") is True
    assert value("1 not in event.data.tags") is True
    assert value("'vip' not in event.data.tags") is False


@pytest.mark.parametrize(
    ("source", "fragment", "column"),
    [
        ("event.data.missing + 1", "cannot add null and a number", 1),
        ("1 + 'a'", "cannot add a number and a string", 1),
        ("event.data.total / 0", "division by zero", 1),
        ("event.data.total % 0", "division by zero", 1),
        ("2 * (event.data.currency - 1)", "- takes two numbers, not a string and a number", 6),
        ("-event.data.currency", "cannot negate a string", 1),
        ("true + 1", "cannot add a boolean and a number", 1),
        ("int('seven')", "int() cannot convert 'seven'", 1),
        ("int(event.data.tags)", "int() cannot convert a list", 1),
        ("float('inf')", "not a finite number", 1),
        ("1e308 * 10", "not a finite number", 1),
    ],
)
def test_runtime_errors(source: str, fragment: str, column: int) -> None:
    expression = compile_expression(source)
    with pytest.raises(ExpressionError) as caught:
        expression.evaluate(EVENT)
    assert fragment in str(caught.value)
    assert caught.value.column == column
    assert expression.test(EVENT) is False


def test_numbers_and_strings_are_capped() -> None:
    big = {"n": 2**200, "s": "x" * (MAX_STRING_LENGTH // 2 + 1)}
    with pytest.raises(ExpressionError, match="too large"):
        compile_expression("n * n").evaluate(big)
    with pytest.raises(ExpressionError, match="longer than"):
        compile_expression("s + s").evaluate(big)
    with pytest.raises(ExpressionError, match="longer than"):
        compile_expression("str(d)").evaluate({"d": [big["s"], big["s"]]})


# --- refusals, at compile time --------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "fragment", "column"),
    [
        ("event.__class__", "attributes starting with '_' are not allowed (.__class__)", 7),
        ("event.data._private", "attributes starting with '_'", 12),
        ("__import__('os')", "names starting with '_' are not allowed (__import__)", 1),
        ("_secret", "names starting with '_'", 1),
        ("'a'.upper()", "method calls are not allowed: write upper(x) instead of x.upper()", 5),
        ("event.name.split('.')", "method calls are not allowed", 12),
        ("lambda: 1", "lambdas are not allowed", 1),
        ("[x for x in event.data.tags]", "comprehensions are not allowed", 1),
        ("{k: 1 for k in event}", "comprehensions are not allowed", 1),
        ("open('/etc/passwd')", "unknown function 'open'", 1),
        ("eval('1')", "unknown function 'eval'", 1),
        ("lenn(event.data.tags)", "unknown function 'lenn' (did you mean 'len'?)", 1),
        ("len(event, event)", "len() takes 1 argument, got 2", 1),
        ("startswith('a')", "startswith() takes 2 arguments, got 1", 1),
        ("lower(s='A')", "lower() takes no keyword arguments", 7),
        ("len(*event.data.tags)", "*arguments are not allowed", 5),
        ("2 ** 64", "operator ** is not allowed", 1),
        ("7 // 2", "operator // is not allowed", 1),
        ("1 << 3", "operator << is not allowed", 1),
        ("~1", "operator ~ is not allowed", 1),
        ("event is None", "'is' is not allowed (use == or !=)", 1),
        ("event.data.tags[0:1]", "slices are not allowed", 17),
        ("1 if event else 2", "conditional expressions", 1),
        ("[1, 2]", "list literals are not allowed", 1),
        ("{'a': 1}", "dict literals are not allowed", 1),
        ("(1, 2)", "tuple literals are not allowed", 1),
        ("f'{event}'", "f-strings are not allowed", 1),
        ("(x := 1)", "assignments (:=) are not allowed", 2),
        ("b'bytes'", "bytes literals are not allowed", 1),
        ("1j", "complex literals are not allowed", 1),
        ("event ==", "syntax error", 9),
        ("event = 1", "syntax error", None),
        ("import os", "syntax error", None),
        ("a; b", "syntax error", None),
        ("   ", "the expression is empty", None),
    ],
)
def test_refused_constructs(source: str, fragment: str, column: int | None) -> None:
    error = refusal(source)
    assert fragment in str(error), str(error)
    if column is not None:
        assert error.column == column, str(error)
        assert f"(column {column} of {source!r})" in str(error)


def test_too_long_and_too_deep() -> None:
    error = refusal("1 + " * 250 + "1")
    assert str(error) == (
        f"the expression is 1001 characters long; the limit is {MAX_EXPRESSION_LENGTH}"
    )
    assert compile_expression("x" * MAX_EXPRESSION_LENGTH).evaluate({}) is None
    assert "nested more than" in str(refusal("-" * (MAX_DEPTH + 1) + "1"))
    assert "nested more than" in str(refusal("not " * 200 + "x"))
    assert "syntax error" in str(refusal("(" * 300 + "1" + ")" * 300))


def test_columns_count_characters_and_leading_space() -> None:
    assert refusal("  'é' + x.__y").column == 11
    assert refusal("'é'.upper()").column == 5


def test_names_restrict_the_top_level() -> None:
    error = refusal("evnt.data.x", names=["event"])
    assert "unknown name 'evnt' (did you mean 'event'?) (available: event)" in str(error)
    assert error.column == 1
    compile_expression("event.data.x == null and true", names=["event"])


def test_not_a_string() -> None:
    with pytest.raises(ExpressionError, match="an expression is a string, not a number"):
        compile_expression(42)  # type: ignore[arg-type]


def test_compiled_once_evaluated_many_times_across_threads() -> None:
    expression = compile_expression("event.n * 2")
    results: dict[int, Any] = {}

    def run(n: int) -> None:
        results[n] = [expression.evaluate({"event": {"n": n}}) for _ in range(200)]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: [n * 2] * 200 for n in range(8)}
    assert expression == compile_expression("event.n * 2")
    assert repr(expression) == "Expression('event.n * 2')"
    assert isinstance(expression, Expression) and expression.source == "event.n * 2"


def test_mapping_lookups_never_reach_python_attributes() -> None:
    class Sneaky(dict[str, Any]):
        secret = "attribute"

    assert value("thing.secret", {"thing": Sneaky()}) is None
    assert value("thing.items", {"thing": {"a": 1}}) is None
    assert value("thing.keys", {"thing": {"keys": "k"}}) == "k"


# --- templates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("crm-${{ input.tenant }}", "crm-acme"),
        ("${{input.tenant}}", "acme"),
        ("plain text", "plain text"),
        ("", ""),
        ("${{ input.count }}/${{ input.ratio }}", "3/0.5"),
        ("[${{ input.missing }}]", "[]"),
        ("${{ input.flag }}", "true"),
        ("${{ input.tags }}", '["a","b"]'),
        ("${{ input.obj }}", '{"k":"v","n":null}'),
        ("${{ upper(input.tenant) + '-' + str(input.count) }}", "ACME-3"),
        ("${{ input.obj['k'] }}}}", "v}}"),
        ("${{ '}}' }}", "}}"),
        ('${{ "a}}b" }}', "a}}b"),
        ("cost $${{ literal }}", "cost ${{ literal }}"),
        ("$ {{ not a hole }} ${x}", "$ {{ not a hole }} ${x}"),
    ],
)
def test_template_rendering(source: str, expected: str) -> None:
    context = {
        "input": {
            "tenant": "acme",
            "count": 3,
            "ratio": 0.5,
            "flag": True,
            "tags": ["a", "b"],
            "obj": {"k": "v", "n": None},
        }
    }
    template = compile_template(source)
    assert template.render(context) == expected
    assert template.source == source


@pytest.mark.parametrize(
    ("source", "fragment", "column"),
    [
        ("crm-${{ input.tenant", "unclosed '${{'", 5),
        ("crm-${{ input.tenant }", "unclosed '${{'", 5),
        ("a${{ }}b", "empty '${{ }}'", 2),
        ("x-${{ input. }}", "syntax error", 14),
        ("x-${{ input.__dict__ }}", "attributes starting with '_'", 13),
        ("x-${{ 'a'.upper() }}", "method calls are not allowed", 11),
        ("x-${{ nope }}", "unknown name 'nope'", 7),
    ],
)
def test_template_refusals(source: str, fragment: str, column: int) -> None:
    with pytest.raises(ExpressionError) as caught:
        compile_template(source, names=["input"])
    assert fragment in str(caught.value), str(caught.value)
    assert caught.value.column == column, str(caught.value)
    assert f"of {source!r})" in str(caught.value)


def test_template_runtime_error_and_size_cap() -> None:
    with pytest.raises(ExpressionError, match="cannot add null and a number"):
        compile_template("k-${{ input.n + 1 }}").render({"input": {}})
    half = "x" * (MAX_STRING_LENGTH // 2 + 1)
    with pytest.raises(ExpressionError, match="longer than"):
        compile_template("${{ a }}${{ a }}").render({"a": half})
    with pytest.raises(ExpressionError, match="the template is"):
        compile_template("x" * (MAX_EXPRESSION_LENGTH + 1))


def test_template_is_static() -> None:
    assert compile_template("fixed").is_static
    assert compile_template("fixed $${{ x }}").is_static
    assert not compile_template("k-${{ input.x }}").is_static
