"""Hooks in the control table (`hook#<sha256>`, services/durable/hooks.py): the write that spends
one, in the same transaction as the signal it sends."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import Pk
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["HookSpends"]


class HookSpends(ControlTable):
    """The write that spends a hook."""

    def use_hook(self, pk: Pk, digest: str, now: float) -> dict[str, Any]:
        """The write that spends a hook (`used`: the digest of the request that did),
        guarded on its being unspent, as one item of a transaction: the hook is spent
        only if the signal it sends is queued in the same transaction."""
        return {"Update": {
            "TableName": self.table, "Key": self.key(pk),
            "UpdateExpression": "SET used = :d, used_at = :t",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(used)",
            "ExpressionAttributeValues": {":d": {"S": digest}, ":t": num(round(now, 3))},
        }}
