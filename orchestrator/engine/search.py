"""Finding runs by what they carried: the terms a run is indexed by, and the query
language that names them (`GET /runs?q=`, `orchestrator runs --where`, the dashboard's
search box).

A run is indexed by terms of four fields: `input` and `trigger` (written with its
creation), `output` and `error` (written with its finish). Of each field:

- `<field>.<path>=<value>` for each scalar leaf (`input.customer=acme`): the path is
  the keys from the field down, dot-joined (a list's items share their list's path),
  at most MAX_DEPTH deep; the value is its text (`norm`), lowercased, and a hash of it
  when longer than VALUE_CHARS;
- `<field>~<word>` for each word of its strings (`error~timeout`): runs of letters and
  digits, lowercased, 2 to WORD_CHARS characters.

A write indexes at most MAX_TERMS terms (the `=` terms first, shallowest paths first,
then the words in order): what a run carries past that is not searchable.

The query language: clauses joined by spaces (or `AND`), all of which a run must match:

- `input.customer = "acme"`: a leaf at that path equals the value (strings compare
  without regard to case; values compare as text: `= 1042` finds 1042 and "1042");
- `error ~ "timed out"`: every word of the text is a word of the field (of its strings,
  anywhere in it);
- `order:1042`: some field has a top-level `order` equal to 1042 (`customer.id:7`: a
  path; `input.customer:acme`, whose key starts with a field and a dot, is that path,
  as `input.customer = acme`);
- `acme`: a word of some field;
- `status = failed`, `workflow = report` (or `status:failed`): today's filters, written
  in the query.

There is no OR, NOT or `-word`: those are refused, as is a word longer than WORD_CHARS
(the index does not keep it, so dropping it would widen the search unseen), each with a
UsageError naming it.

This module is pure: the store writes and reads the terms (adapters/store/run_search.py)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import UsageError

__all__ = [
    "FIELDS", "MAX_TERMS", "Clause", "Query", "field_of", "matches", "norm", "parse_query",
    "terms_of", "words",
]

FIELDS = ("input", "output", "error", "trigger")
# What a write indexes of a run at most, and how deep and long what it indexes may be.
MAX_TERMS = 24
MAX_DEPTH = 6
VALUE_CHARS = 64
WORD_CHARS = 32
PATH_CHARS = 200
# Filters a query may name besides the fields.
FILTERS = ("status", "workflow")

_WORD = re.compile(r"[^\W_]+")
_KEY = re.compile(r"^[A-Za-z0-9_\-$@]+$")


def norm(value: Any) -> str:
    """A scalar as the index keeps it: its text, lowercased (a whole number as an
    integer: 1042.0 is 1042; true, false, null as JSON writes them); a hash of that
    text when it is longer than VALUE_CHARS."""
    if isinstance(value, bool) or value is None:
        text = json.dumps(value)
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    elif isinstance(value, int | float):
        text = repr(value)
    else:
        text = str(value).lower()
    if len(text) > VALUE_CHARS:
        return "#" + hashlib.sha256(text.encode()).hexdigest()[:20]
    return text


def words(text: str) -> list[str]:
    """The words of `text` as the index keeps them, in order, each once."""
    seen = dict.fromkeys(w.lower() for w in _WORD.findall(text)
                         if 2 <= len(w) <= WORD_CHARS)
    return list(seen)


def _leaves(value: Any, path: str, depth: int) -> Iterator[tuple[int, str, Any]]:
    """(depth, path, scalar) of each scalar leaf under `value`, breadth first."""
    level: list[tuple[str, Any]] = [(path, value)]
    for d in range(MAX_DEPTH + 1):
        below: list[tuple[str, Any]] = []
        for at, v in level:
            if isinstance(v, Mapping):
                for k, sub in v.items():
                    key = str(k)
                    if _KEY.match(key) and len(at) + len(key) < PATH_CHARS:
                        below.append((f"{at}.{key}", sub))
            elif isinstance(v, list | tuple):
                below.extend((at, sub) for sub in v)
            else:
                yield d + depth, at, v
        level = below
        if not level:
            return


def terms_of(fields: Mapping[str, Any], limit: int | None = MAX_TERMS) -> list[str]:
    """The terms a run is indexed by for `fields` (field name to its value; a missing
    or None field has none), at most `limit` (None: every one), in the order of the
    module's doc."""
    exact: list[tuple[int, str]] = []
    texts: list[str] = []
    for name in FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        for depth, path, leaf in _leaves(value, name, 0):
            exact.append((depth, f"{path}={norm(leaf)}"))
            if isinstance(leaf, str):
                texts.extend(f"{name}~{w}" for w in words(leaf))
    ordered = [t for _, t in sorted(exact, key=lambda pair: pair[0])] + texts
    return list(dict.fromkeys(ordered))[:limit]


def field_of(term: str) -> str:
    """The field a term is of (`input.customer=acme`, `input~rush`: input)."""
    return re.split(r"[.=~]", term, maxsplit=1)[0]


@dataclass(frozen=True)
class Clause:
    """One clause of a query: a run matches it if it has any of `terms`. `text` is the
    clause as written, for messages."""

    terms: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Query:
    """A parsed query: clauses all of which a run must match, and the filters it named."""

    clauses: tuple[Clause, ...] = ()
    filters: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.clauses)


def matches(query: Query, found: Collection[str], fields: Mapping[str, Any]) -> bool:
    """Whether a run matches every clause of `query`: each has a term among `found` (the
    run's terms an index holds) that its fields (as its row holds them now) have, of
    all their terms (not only the MAX_TERMS an index write keeps). A term of a field not
    in `fields`, one the caller cannot see (an output the run row does not keep), is
    taken on the index's word. The store checks what its index found with this: an index
    item written before a write that then lost (a debounce after its burst closed, a
    finish that lost to a cancel) names a run that does not carry it."""
    have = set(terms_of(fields, limit=None))
    sure = {t for t in found if t in have or field_of(t) not in fields}
    return all(any(t in sure for t in c.terms) for c in query.clauses)


_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|(!=|=|~)|([^\s=~"\']+))')


def _tokens(text: str, name: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: ("s", a quoted string), ("op", = or ~), ("w", a bare word)."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise UsageError(f"{name}: cannot read {text[pos:pos + 20]!r} (an unclosed quote?)")
        pos = m.end()
        quoted, single, op, bare = m.groups()
        if quoted is not None:
            out.append(("s", re.sub(r"\\(.)", r"\1", quoted)))
        elif single is not None:
            out.append(("s", single))
        elif op is not None:
            out.append(("op", op))
        else:
            out.append(("w", bare))
    return out


def _value(kind: str, text: str) -> Any:
    """A clause's value: a quoted string as it is, a bare word as JSON if it is a number,
    true, false or null, else as a string."""
    if kind == "s":
        return text
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed if parsed is None or isinstance(parsed, bool | int | float) else text


def _path(text: str, name: str) -> tuple[str, str]:
    """(field, rest) of a path written in a query; UsageError if it names no field."""
    head, _, rest = text.partition(".")
    if head not in FIELDS:
        raise UsageError(f"{name}: {text!r}: a path starts with one of {', '.join(FIELDS)}"
                         f" (or is {' or '.join(FILTERS)})")
    if rest and not all(_KEY.match(k) for k in rest.split(".")):
        raise UsageError(f"{name}: {text!r}: not a path of keys joined by dots")
    return head, rest


def _compare(path: str, op: str, kind: str, text: str, name: str) -> Clause | tuple[str, str]:
    """The clause (or the filter) of `path op value`."""
    written = f"{path} {op} {text!r}"
    if path in FILTERS:
        if op != "=":
            raise UsageError(f"{name}: {written}: {path} takes = only")
        return path, text
    if op == "!=":
        raise UsageError(f"{name}: {written}: != is not searchable (the index holds what a"
                         " run has, not what it lacks)")
    head, rest = _path(path, name)
    if op == "=":
        return Clause((f"{path}={norm(_value(kind, text))}",), written)
    if rest:
        raise UsageError(f"{name}: {written}: ~ searches the words of a whole field:"
                         f" write {head} ~ {json.dumps(text)}")
    found = _searched(text, written, name)
    # Each word a clause of its own: the caller splits them (see parse_query).
    return Clause(tuple(f"{head}~{w}" for w in found), written)


def _searched(text: str, written: str, name: str) -> list[str]:
    """The words of `text` a search looks for; UsageError naming a word the index does
    not keep (longer than WORD_CHARS: dropped, it would widen the search unseen), or
    naming the text when no word of it is kept."""
    every = _WORD.findall(text)
    long = [w for w in every if len(w) > WORD_CHARS]
    if long:
        raise UsageError(f"{name}: {written}: {long[0]!r} is longer than {WORD_CHARS}"
                         " letters or digits, which the index does not keep as a word"
                         " (search a path with = for a whole value)")
    found = words(text)
    if not found:
        short = f" ({', '.join(map(repr, every))}: too short)" if every else ""
        raise UsageError(f"{name}: {written}: no word to search for{short} (a word is 2 to"
                         f" {WORD_CHARS} letters or digits)")
    return found


def _free(token: str, name: str) -> list[Clause]:
    """The clauses of a bare token: `key:value` (a path in any field; a key that starts
    with a field and a dot, the path it names), else its words (each in any field)."""
    key, sep, value = token.partition(":")
    if sep and key and value:
        if not all(_KEY.match(k) for k in key.split(".")):
            raise UsageError(f"{name}: {token!r}: not a key:value (the key is keys joined"
                             " by dots)")
        v = norm(_value("w", value))
        head, dot, _ = key.partition(".")
        if dot and head in FIELDS:  # `input.customer:acme` as `input.customer = acme`
            return [Clause((f"{key}={v}",), token)]
        return [Clause(tuple(f"{f}.{key}={v}" for f in FIELDS), token)]
    if token.startswith("-") and len(token) > 1:
        raise UsageError(f"{name}: {token!r}: a query has no negation (-word): the index"
                         " holds what a run has, not what it lacks")
    if token in ("OR", "NOT"):
        raise UsageError(f"{name}: {token}: a query has no OR or NOT: a run must match"
                         " every clause (search once for each alternative)")
    return [Clause(tuple(f"{f}~{w}" for f in FIELDS), token)
            for w in _searched(token, repr(token), name)]


def parse_query(text: str | None, name: str = "q") -> Query:
    """The query `text` (None or blank: the empty query). UsageError names `name` (the
    parameter or option it came in) and what cannot be read."""
    if not text or not text.strip():
        return Query()
    tokens = _tokens(text, name)
    clauses: list[Clause] = []
    filters: dict[str, str] = {}

    def narrow(key: str, value: str) -> None:
        if filters.get(key, value) != value:
            raise UsageError(f"{name}: {key} = {filters[key]!r} and {value!r}: a run has one")
        filters[key] = value

    i = 0
    while i < len(tokens):
        kind, tok = tokens[i]
        if kind == "w" and tok.upper() == "AND":
            i += 1
            continue
        if kind == "op":
            raise UsageError(f"{name}: {tok!r} with nothing before it (write path {tok} value)")
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if nxt is not None and nxt[0] == "op":
            if kind != "w":
                raise UsageError(f"{name}: a path is not quoted: {tok!r} {nxt[1]}")
            if i + 2 >= len(tokens) or tokens[i + 2][0] == "op":
                raise UsageError(f"{name}: {tok} {nxt[1]}: no value after {nxt[1]}")
            vkind, vtext = tokens[i + 2]
            got = _compare(tok, nxt[1], vkind, vtext, name)
            if isinstance(got, Clause):
                if nxt[1] == "~":
                    clauses.extend(Clause((t,), got.text) for t in got.terms)
                else:
                    clauses.append(got)
            else:
                narrow(*got)
            i += 3
            continue
        key, sep, value = tok.partition(":")
        if kind == "w" and sep and key in FILTERS and value:
            narrow(key, value)  # `status:failed` as `status = failed`
        elif kind == "w":
            clauses.extend(_free(tok, name))
        else:
            clauses.extend(Clause(tuple(f"{f}~{w}" for f in FIELDS), tok)
                           for w in _searched(tok, repr(tok), name))
        i += 1
    if not clauses and not filters:
        raise UsageError(f"{name}: nothing to search for")
    return Query(tuple(dict.fromkeys(clauses)), filters)
