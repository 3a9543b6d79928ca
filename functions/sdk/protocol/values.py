"""What a value and a name sent to the orchestrator must be, shared by both sides: the
orchestrator refuses anything else at its API (orchestrator/services/values.py), and the
SDK checks the same where a workflow declares the operation, so the error comes at that
call and not as a run waiting for what nothing can send.

- A **name** (a signal's, the signal a hook sends, an event's) is 1-128 characters:
  letters and digits of any script and `_ . : -` (an event's may also hold `/`),
  starting with a letter or digit. It is compared in Unicode NFC: `é` sent as one
  character or as `e` and a combining accent is one name. A signal's name is a path
  segment (`/runs/{id}/signals/{name}`, percent-encoded) and part of its rows' sort key
  (`~s#<name>#...`): `#`, `/` and spaces are kept out.
- A **value** sent (a run's or a child run's input, a signal's or a hook's payload, a
  hook's metadata, an event's data, a custom run event's payload) is at most
  MAX_VALUE_BYTES (256 KiB) as compact JSON in UTF-8.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

__all__ = [
    "EVENT_NAME",
    "EVENT_NAME_RULE",
    "MAX_VALUE_BYTES",
    "NAME",
    "NAME_RULE",
    "name_problem",
    "normal_name",
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
    """A value's size as the orchestrator stores it: compact JSON, UTF-8."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(text.encode())


def normal_name(name: str) -> str:
    """A name as it is compared and stored: Unicode NFC."""
    return unicodedata.normalize("NFC", name)


def name_problem(name: Any, *, event: bool = False) -> str | None:
    """None if `name` (in NFC) follows the rule (an event's: with `/`); otherwise the
    rule it breaks, to quote."""
    rule, text = (EVENT_NAME, EVENT_NAME_RULE) if event else (NAME, NAME_RULE)
    if isinstance(name, str) and rule.fullmatch(normal_name(name)):
        return None
    return f"a name is {text}"
