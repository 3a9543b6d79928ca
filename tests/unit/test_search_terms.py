"""The search index's terms of a run and the query language (engine/search.py)."""

from __future__ import annotations

import pytest

from orchestrator.engine.search import MAX_TERMS, matches, norm, parse_query, terms_of, words
from orchestrator.errors import UsageError


def test_a_runs_terms_are_its_leaves_then_its_words() -> None:
    terms = terms_of({"input": {"customer": "Acme Corp", "order": 1042.0,
                                "lines": [{"sku": "x-1"}], "rush": True, "gift": None},
                      "trigger": {"source": "webhook"}})
    assert terms[:4] == ["input.customer=acme corp", "input.order=1042", "input.rush=true",
                         "input.gift=null"]
    assert "input.lines.sku=x-1" in terms and "trigger.source=webhook" in terms
    assert terms.index("input.lines.sku=x-1") < terms.index("input~acme")
    assert {"input~acme", "input~corp", "trigger~webhook"} <= set(terms)


def test_terms_are_bounded_and_long_values_hashed() -> None:
    many = terms_of({"input": {f"k{i}": i for i in range(100)}})
    assert len(many) == MAX_TERMS
    long = "x" * 500
    (term,) = [t for t in terms_of({"input": {"blob": long}}) if "=" in t]
    assert term == f"input.blob={norm(long)}" and len(term) < 40
    assert terms_of({"input": None, "output": None}) == []


def test_words_are_letters_and_digits_lowercased_once() -> None:
    assert words("Timed out: upstream TIMED-out (503) a") == ["timed", "out", "upstream", "503"]


def test_a_query_names_clauses_and_filters() -> None:
    q = parse_query('input.customer = "Acme" AND error ~ "timed out" order:7 rush '
                    "status = failed")
    assert [c.terms for c in q.clauses] == [
        ("input.customer=acme",), ("error~timed",), ("error~out",),
        ("input.order=7", "output.order=7", "error.order=7", "trigger.order=7"),
        ("input~rush", "output~rush", "error~rush", "trigger~rush"),
    ]
    assert q.filters == {"status": "failed"}
    assert not parse_query("  ") and not parse_query(None)
    only_filter = parse_query("workflow = report")
    assert not only_filter and only_filter.filters == {"workflow": "report"}


def test_a_query_error_names_its_parameter() -> None:
    with pytest.raises(UsageError, match=r"^where: 'nope.x': a path starts with"):
        parse_query("nope.x = 1", "where")


def test_a_run_matches_by_the_indexed_terms_its_fields_still_have() -> None:
    q = parse_query("input.customer = zeta rush")
    found = {"input.customer=zeta", "input~rush", "output~rush"}
    # The row's input is another (a debounce that lost left the index's terms).
    assert not matches(q, found, {"input": {"customer": "acme", "note": "rush"}})
    assert matches(q, found, {"input": {"customer": "Zeta", "note": "rush"}})
    # An output the caller cannot see is taken on the index's word; one it knows is
    # absent is not.
    assert matches(q, found, {"input": {"customer": "zeta"}})
    assert not matches(q, found, {"input": {"customer": "zeta"}, "output": None})
    # Every term of a field counts, not only the first MAX_TERMS.
    wide = {f"k{i}": i for i in range(100)}
    assert matches(parse_query("input.k99 = 99"), {"input.k99=99"}, {"input": wide})


@pytest.mark.parametrize(("q", "says"), [
    ("acme OR globex", "q: OR: a query has no OR or NOT"),
    ("NOT acme", "q: NOT: a query has no OR or NOT"),
    ("acme -globex", "q: '-globex': a query has no negation"),
])
def test_or_not_and_negation_are_refused_not_searched_as_words(q: str, says: str) -> None:
    with pytest.raises(UsageError, match=f"^{says}"):
        parse_query(q)
    # As words of a value, quoted or after =, they are what they say.
    assert parse_query('error ~ "not found"').clauses[1].terms == ("error~found",)
    assert parse_query("input.x = -3").clauses[0].terms == ("input.x=-3",)


def test_a_key_value_whose_key_starts_with_a_field_is_that_path() -> None:
    (clause,) = parse_query("input.customer:acme").clauses
    assert clause.terms == parse_query("input.customer = acme").clauses[0].terms
    assert clause.terms == ("input.customer=acme",)
    (clause,) = parse_query("error.code:timeout").clauses
    assert clause.terms == ("error.code=timeout",)
    # A key that is not a field's path is a path in any field, as before.
    (clause,) = parse_query("customer.id:7").clauses
    assert clause.terms == ("input.customer.id=7", "output.customer.id=7",
                            "error.customer.id=7", "trigger.customer.id=7")


def test_status_and_workflow_as_key_value_are_the_filters() -> None:
    q = parse_query("acme status:failed workflow:report")
    assert q.filters == {"status": "failed", "workflow": "report"}
    assert [c.text for c in q.clauses] == ["acme"]
    with pytest.raises(UsageError, match=r"^q: status = 'failed' and 'done': a run has one"):
        parse_query("status:failed status = done")


def test_a_word_the_index_does_not_keep_is_named() -> None:
    long = "y" * 40
    with pytest.raises(UsageError, match=r"^q: error ~ 'a b': no word to search for"
                                         r" \('a', 'b': too short\)"):
        parse_query('error ~ "a b"')
    # A word too long to be indexed would be dropped and widen the search: refused.
    for q in (f'error ~ "timeout {long}"', long, f'"{long}"'):
        with pytest.raises(UsageError, match=f"'{long}' is longer than 32 letters or digits"):
            parse_query(q)
    # A short word beside a kept one is dropped, as the index drops it.
    assert [c.terms for c in parse_query('error ~ "a timeout"').clauses] == [("error~timeout",)]
