"""The sort-key range a query's cut finds by bisection
(infra/emulator/speedups/dynamodb_range.py) is the set moto's comparison functions keep, on
every pair of keys from a small alphabet."""

from __future__ import annotations

import itertools

from infra.emulator.speedups.dynamodb_range import _window

KEYS = sorted({"".join(p) for n in range(3) for p in itertools.product("ab~", repeat=n)})
TESTS = {
    "=": lambda v, a, b: v == a, "EQ": lambda v, a, b: v == a,
    "<": lambda v, a, b: v < a, "LT": lambda v, a, b: v < a,
    "<=": lambda v, a, b: v <= a, "LE": lambda v, a, b: v <= a,
    ">": lambda v, a, b: v > a, "GT": lambda v, a, b: v > a,
    ">=": lambda v, a, b: v >= a, "GE": lambda v, a, b: v >= a,
    "BETWEEN": lambda v, a, b: a <= v <= b,
    "BEGINS_WITH": lambda v, a, b: v.startswith(a),
}


def test_the_window_holds_exactly_the_keys_the_comparison_keeps() -> None:
    bounds = [*KEYS, "aa!", "b~~", ""]
    for comparison, test in TESTS.items():
        for a, b in itertools.product(bounds, repeat=2):
            values = [a, b] if comparison == "BETWEEN" else [a]
            window = _window(KEYS, comparison, values)
            assert window is not None
            lo, hi = window
            got = KEYS[lo:hi] if lo < hi else []
            assert got == [k for k in KEYS if test(k, a, b)], (comparison, a, b)


def test_a_comparison_that_keeps_no_one_run_of_keys_is_left_to_moto() -> None:
    for comparison in ("NE", "IN", "CONTAINS", "NOT_NULL"):
        assert _window(KEYS, comparison, ["a"]) is None
