"""What crosses the API: one rule for names, one cap on values; the rule and the cap
are the SDK's protocol's (functions/sdk/protocol/values.py, where they are explained),
so the SDK checks the very same where a workflow declares its operations.

Here they are enforced: a name that breaks the rule is a 400 `invalid_name`, a value
past MAX_VALUE_BYTES (256 KiB) a 400 `value_too_large` naming the cap, both before
anything is stored or used up. Under the cap a value is stored intact: each fits its
DynamoDB item with room to spare, and the journal entry that records it goes to the blob
store past ORCH_INLINE_OUTPUT_LIMIT. What steps and workflows return is capped apart:
ORCH_OUTPUT_HARD_CAP (16 MiB), through the blob store."""

from __future__ import annotations

from typing import Any

from functions.sdk.protocol.values import (
    EVENT_NAME,
    EVENT_NAME_RULE,
    MAX_VALUE_BYTES,
    NAME,
    NAME_RULE,
    name_problem,
    normal_name,
    value_bytes,
)
from orchestrator.errors import InvalidName, ValueTooLarge

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
    problem = name_problem(name, event=event)
    if problem is not None:
        raise InvalidName(f"{what} {str(name)[:200]!r}: {problem}")
    return normal_name(name)
