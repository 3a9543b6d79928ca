"""functions/README.md's Context table is the reference the main README sends readers to
for every method: each public name of a durable `Context`, of `ctx.state` and of what
`ctx.lock(key)` returns has a row, and the rows of the coordination operations (state
cells, locks, approvals) show every parameter of their signatures."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from functions.sdk.durable.context import Context
from functions.sdk.durable.locks import Lock
from functions.sdk.durable.state import State

README = Path(__file__).resolve().parents[2] / "functions" / "README.md"


def _table() -> list[str]:
    """The rows of the table under `**Context.**`."""
    lines = README.read_text().splitlines()
    start = lines.index("**Context.**") + 1
    while not lines[start].startswith("|"):
        start += 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows[2:]  # past the header and its rule


def _public(cls: type, instance: object | None = None) -> list[str]:
    """A class's public names, and those its instances set in `__init__`."""
    names = {n for n in dir(cls) if not n.startswith("_")}
    if instance is not None:
        names |= {n for n in vars(instance) if not n.startswith("_")}
    return sorted(names)


# A Context made as the SDK makes one, but without a call: its own attributes are all
# that is read (the logger and `state`, set in its __init__), and a lock's (its key).
CTX = Context(None)  # type: ignore[arg-type]
CONTEXT_NAMES = _public(Context, CTX)
LOCK_NAMES = _public(Lock, CTX.lock("a-key"))


@pytest.mark.parametrize("name", CONTEXT_NAMES)
def test_every_public_name_of_the_context_has_a_row(name: str) -> None:
    assert any(re.search(rf"\bctx\.{name}\b", row) for row in _table()), (
        f"functions/README.md's Context table does not name ctx.{name}")


@pytest.mark.parametrize("name", _public(State))
def test_every_state_cell_operation_has_a_row(name: str) -> None:
    assert any(f"ctx.state.{name}(" in row for row in _table()), (
        f"functions/README.md's Context table does not name ctx.state.{name}(...)")


@pytest.mark.parametrize("name", LOCK_NAMES)
def test_every_name_of_a_lock_is_in_its_row(name: str) -> None:
    assert any(re.search(rf"\block\.{name}\b", row) for row in _table()), (
        f"functions/README.md's Context table does not name lock.{name}")


def _parameters(fn: Callable[..., Any]) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


SIGNATURES = [(f"ctx.state.{n}(", getattr(State, n)) for n in _public(State)] + [
    ("ctx.lock(", Context.lock), ("ctx.approval(", Context.approval)]


@pytest.mark.parametrize(("written", "fn"), SIGNATURES, ids=[w for w, _ in SIGNATURES])
def test_each_coordination_row_shows_its_whole_signature(
    written: str, fn: Callable[..., Any]
) -> None:
    rows = [row for row in _table() if written in row]
    assert rows, f"no row names {written}...)"
    shown = _call_at(rows[0], rows[0].index(written) + len(written))
    missing = [p for p in _parameters(fn) if not re.search(rf"\b{p}\b", shown)]
    assert not missing, f"{written}...) in functions/README.md lacks {missing}: {shown}"


def _call_at(text: str, start: int) -> str:
    """The arguments as written from `start` (just past an opening parenthesis) to the
    parenthesis that closes it (a default of `()` inside included)."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise AssertionError(f"no closing parenthesis in {text[start:]!r}")
