"""A DAG's columns for drawing: each step one column right of its deepest dependency
(the longest path from a root), as the terminal diagram and the dashboard lay them out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["columns_by_longest_path"]


def columns_by_longest_path(deps: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each step's column (0 for a root). Dependencies that are not steps of `deps` are
    left out; a cycle (which lint refuses) is cut where it closes."""
    column: dict[str, int] = {}

    def place(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in column:
            up = [d for d in deps[name] if d in deps and d not in seen]
            column[name] = 1 + max((place(d, seen | {name}) for d in up), default=-1)
        return column[name]

    for name in deps:
        place(name)
    return column
