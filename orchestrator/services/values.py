"""What crosses the API: one rule for names, one cap on values.

- A **name** (a signal's, the signal a hook sends, an event's) is 1-128 characters:
  letters and digits of any script, and `_ . : -` (an event's name may also hold `/`),
  starting with a letter or digit. Names are compared in Unicode NFC: `é` sent as one
  character or as `e` and a combining accent is the same name. A signal's name is a path
  segment (`/runs/{id}/signals/{name}`, percent-encoded), and it is part of the sort key
  of the signal's rows (`~s#<name>#...`): `#`, `/` and spaces are kept out of it. The
  SDK checks the same rule where a workflow declares its wait, so a run never waits for
  a name nothing can send.
- A **value** sent (a run's input, a signal's or a hook's payload, a hook's metadata, an
  event's data, a custom run event's payload) is at most MAX_VALUE_BYTES (256 KiB),
  measured as compact JSON in UTF-8. Past it the request is refused with 400
  `value_too_large` before anything is stored; under it the value is stored intact (each
  fits a DynamoDB item with room to spare, and the journal entry that records it goes to
  the blob store past ORCH_INLINE_OUTPUT_LIMIT). What steps and workflows return is
  capped apart: ORCH_OUTPUT_HARD_CAP (16 MiB), through the blob store."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from orchestrator.errors import InvalidName, ValueTooLarge
from orchestrator.strict_json import dumps

__all__ = [
    "EVENT_NAME",
    "EVENT_NAME_RULE",
    "MAX_VALUE_BYTES",
    "NAME",
    "NAME_RULE",
    "check_value",
    "checked_name",
    "value_bytes",
]

MAX_VALUE_BYTES = 256 * 1024
# `\w` is Unicode-aware on str patterns: letters and digits of any script, and `_`.
NAME = re.compile(r"[^\W_][\w.:-]{0,127}")
EVENT_NAME = re.compile(r"[^\W_][\w.:/-]{0,127}")
NAME_RULE = ("1-128 letters or digits (any script) and _ . : -, starting with a letter or"
             " digit")
EVENT_NAME_RULE = NAME_RULE.replace(": -", ": / -")


def value_bytes(value: Any) -> int:
    """A value's size as it is stored and sent: compact JSON, UTF-8."""
    return len(dumps(value).encode())


def check_value(what: str, value: Any, cap: int = MAX_VALUE_BYTES) -> None:
    """Refuse (ValueTooLarge, naming `what` and the cap) a value over `cap` bytes."""
    size = value_bytes(value)
    if size > cap:
        raise ValueTooLarge(
            f"{what}: {size} bytes, over the {cap}-byte ({cap // 1024} KiB) cap on a value"
            " sent to the orchestrator; keep large data elsewhere and send its key")


def checked_name(what: str, name: str, *, event: bool = False) -> str:
    """`name` in NFC if it follows the rule (an event's may hold `/`); InvalidName naming
    `what` and the rule otherwise."""
    normal = unicodedata.normalize("NFC", name) if isinstance(name, str) else name
    rule, text = (EVENT_NAME, EVENT_NAME_RULE) if event else (NAME, NAME_RULE)
    if not isinstance(normal, str) or not rule.fullmatch(normal):
        raise InvalidName(f"{what} {str(name)[:200]!r}: a name is {text}")
    return normal
