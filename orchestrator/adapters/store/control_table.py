"""The control table's generic reads and writes (`ControlTable`): one item by its keys
(created unless a live one exists, read, updated or deleted under a condition), one
partition in sort-key order, and an id claimed once. The keys are made in
control_keys.py; the named writes of each item kind build on this class (control.py).

Items with `expires_at` expire by TTL, and reads here ignore an expired item that
DynamoDB has not deleted yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import NO_SK, Item, Pk, Sk, doc_of
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["REPAIR_WITHIN", "Claim", "ControlTable"]

# How long after an id was first claimed a duplicate may still complete what the first
# request left undone (its process died between the claim and the run's creation).
# Later, a run that is missing has expired and must stay gone.
REPAIR_WITHIN = 600.0


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming an id: was this the first claim, what the first claim
    stored (with `at`, when), and is it recent enough for a duplicate to repair it."""

    first: bool
    doc: dict[str, Any]
    recent: bool


def _live(item: Item | None, now: float) -> Item | None:
    if not item:
        return None
    exp = item.get("expires_at", {}).get("N")
    if exp is not None and float(exp) <= now:
        return None
    return item


class ControlTable:
    """Reads and conditional writes of the control table's items, by keys made in
    control_keys.py."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.ddb = dynamodb
        self.table = table

    @staticmethod
    def key(pk: Pk, sk: Sk = NO_SK) -> Item:
        return {"pk": {"S": pk}, "sk": {"S": sk}}

    def put_new(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        now: float,
        doc: Any = None,
        attrs: Item | None = None,
        expires_at: float | None = None,
    ) -> bool:
        """Create an item unless a live one exists. True if this call created it."""
        item = {**self.key(pk, sk), **(attrs or {})}
        if doc is not None:
            item["doc"] = {"S": dumps(doc)}
        if expires_at is not None:
            item["expires_at"] = num(expires_at)
        try:
            with _translate(f"control {pk}: create"):
                self.ddb.put_item(
                    TableName=self.table,
                    Item=item,
                    # An expired item DynamoDB has not deleted yet counts as absent.
                    ConditionExpression="attribute_not_exists(pk) OR expires_at <= :now",
                    ExpressionAttributeValues={":now": num(now)},
                )
        except ConditionFailed:
            return False
        return True

    def claim(self, pk: Pk, *, now: float, doc: dict[str, Any], expires_at: float) -> Claim:
        """Claim an id (a delivery id, an event id, an Idempotency-Key) with one
        conditional put; a duplicate reads what the first claim stored."""
        mine = {**doc, "at": now}
        if self.put_new(pk, now=now, doc=mine, expires_at=expires_at):
            return Claim(True, mine, True)
        stored = doc_of(self.get(pk, now=now) or {})
        if stored is None:  # expired between the two calls: claim it again
            return self.claim(pk, now=now, doc=doc, expires_at=expires_at)
        return Claim(False, stored, now - float(stored.get("at", now)) < REPAIR_WITHIN)

    def get(self, pk: Pk, sk: Sk = NO_SK, *, now: float) -> Item | None:
        with _translate(f"control {pk}: read"):
            resp = self.ddb.get_item(
                TableName=self.table, Key=self.key(pk, sk), ConsistentRead=True
            )
        return _live(resp.get("Item"), now)

    def _request(
        self, pk: Pk, sk: Sk, condition: str | None, values: Item | None,
        names: dict[str, str] | None, **extra: Any,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"TableName": self.table, "Key": self.key(pk, sk), **extra}
        if condition:
            request["ConditionExpression"] = condition
        if values:
            request["ExpressionAttributeValues"] = values
        if names:
            request["ExpressionAttributeNames"] = names
        return request

    def update(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        update: str,
        values: Item | None = None,
        names: dict[str, str] | None = None,
        condition: str | None = None,
    ) -> Item:
        """One UpdateItem; raises ConditionFailed when `condition` does not hold."""
        request = self._request(pk, sk, condition, values, names, UpdateExpression=update,
                                ReturnValues="ALL_NEW")
        with _translate(f"control {pk}: update"):
            resp = self.ddb.update_item(**request)
        attrs: Item = resp.get("Attributes", {})
        return attrs

    def update_if(
        self, pk: Pk, update: str, values: Item, condition: str,
        names: dict[str, str] | None = None,
    ) -> bool:
        """One guarded UpdateItem: False when `condition` did not hold."""
        try:
            self.update(pk, update=update, values=values, names=names, condition=condition)
        except ConditionFailed:
            return False
        return True

    def delete(
        self,
        pk: Pk,
        sk: Sk = NO_SK,
        *,
        condition: str | None = None,
        values: Item | None = None,
        names: dict[str, str] | None = None,
    ) -> bool:
        """Delete an item; False when `condition` did not hold."""
        request = self._request(pk, sk, condition, values, names)
        try:
            with _translate(f"control {pk}: delete"):
                self.ddb.delete_item(**request)
        except ConditionFailed:
            return False
        return True

    def query(
        self,
        pk: Pk,
        *,
        now: float,
        limit: int = 100,
        newest_first: bool = False,
        after: Sk | None = None,
        with_expired: bool = False,
    ) -> list[Item]:
        """Items of one partition in sort-key order (live ones only, unless
        `with_expired`: those DynamoDB has not deleted yet too)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk" + (" AND sk > :after" if after else ""),
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
            "Limit": limit,
        }
        if after:
            kwargs["ExpressionAttributeValues"][":after"] = {"S": after}
        with _translate(f"control {pk}: query"):
            resp = self.ddb.query(**kwargs)
        items: list[Item] = resp.get("Items", [])
        return items if with_expired else [i for i in items if _live(i, now) is not None]
