"""Approval gates in the control table: one record per gate (`approval#<run>`, `<step>`),
the single truth of its outcome, and one inbox item per open gate (`approvals#pending`,
sorted by when it opened).

Every resolution (an answer, a timeout) is one transaction: the record moves from
`pending` under a guard that names the resolution's side of the deadline, and the inbox
item goes with it. So two answers, or an answer and the timeout, resolve a gate once;
the loser's transaction is cancelled and changes nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import (
    APPROVALS_PENDING,
    NO_SK,
    approval_key,
    approval_link_key,
    approval_sk,
    inbox_sk,
)
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["PENDING", "ApprovalStore", "Gate"]

PENDING = "pending"


@dataclass(frozen=True)
class Gate:
    """One approval gate: what was asked, of whom, until when, and how it ended."""

    run_id: str
    step: str
    workflow: str
    prompt: str
    created_at: float
    deadline: float
    approvers: tuple[str, ...] = ()
    status: str = PENDING  # pending | approved | rejected | timed_out
    by: str | None = None
    at: float | None = None
    comment: str | None = None
    link: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return self.status == PENDING

    def output(self) -> dict[str, Any]:
        """What the gate's step (or `ctx.approval`) returns once it has ended."""
        return {"approved": self.status == "approved", "timed_out": self.status == "timed_out",
                "by": self.by, "at": self.at, "comment": self.comment}

    def doc(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "workflow": self.workflow,
                "prompt": self.prompt, "approvers": list(self.approvers),
                "created_at": self.created_at, "deadline": self.deadline,
                "status": self.status, "by": self.by, "at": self.at, "comment": self.comment}


def _gate(item: dict[str, Any]) -> Gate:
    doc = json.loads(item["doc"]["S"])
    answer = json.loads(item["answer"]["S"]) if "answer" in item else {}
    return Gate(
        run_id=doc["run_id"], step=doc["step"], workflow=doc.get("workflow", ""),
        prompt=doc.get("prompt", ""), created_at=float(doc["created_at"]),
        deadline=float(item["deadline"]["N"]), approvers=tuple(doc.get("approvers") or ()),
        status=item["gate"]["S"], by=answer.get("by"), at=answer.get("at"),
        comment=answer.get("comment"), link=bool(doc.get("link")),
    )


class ApprovalStore:
    def __init__(self, control: Control) -> None:
        self.control = control
        self.ddb = control.ddb
        self.table = control.table

    def _record(self, gate: Gate) -> dict[str, Any]:
        doc = {k: v for k, v in gate.doc().items() if k not in ("status", "by", "at", "comment")}
        doc["link"] = gate.link
        return {**Control.key(approval_key(gate.run_id), approval_sk(gate.step)),
                "doc": {"S": dumps(doc)}, "gate": {"S": PENDING},
                "deadline": num(gate.deadline)}

    def open(self, gate: Gate, link_sha: str | None = None) -> Gate:
        """Open `gate` (and its inbox item, and its link) unless it exists: the gate as
        stored either way."""
        writes: list[dict[str, Any]] = [
            {"Put": {"TableName": self.table, "Item": self._record(gate),
                     "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Put": {"TableName": self.table, "Item": {
                **Control.key(APPROVALS_PENDING, inbox_sk(gate.created_at, gate.run_id,
                                                          gate.step)),
                "doc": {"S": dumps({**gate.doc(), "link": gate.link})}}}},
        ]
        if link_sha is not None:
            writes.append({"Put": {"TableName": self.table, "Item": {
                **Control.key(approval_link_key(link_sha)),
                "doc": {"S": dumps({"run_id": gate.run_id, "step": gate.step})},
                "expires_at": num(gate.deadline + 86400.0)}}})
        try:
            with _translate(f"approval {gate.run_id}/{gate.step}: open"):
                self.ddb.transact_write_items(TransactItems=writes)
        except ConditionFailed:
            stored = self.get(gate.run_id, gate.step)
            if stored is not None:
                return stored
            raise
        return gate

    def get(self, run_id: str, step: str) -> Gate | None:
        with _translate(f"approval {run_id}/{step}: read"):
            item = self.ddb.get_item(TableName=self.table, ConsistentRead=True,
                                     Key=Control.key(approval_key(run_id),
                                                     approval_sk(step))).get("Item")
        return None if item is None else _gate(item)

    def resolve(self, gate: Gate, status: str, now: float, *, by: str | None = None,
                comment: str | None = None) -> bool:
        """Resolve an open gate: an answer (`approved`, `rejected`) only before its
        deadline, `timed_out` only at or after it. False: it was resolved already, or
        the deadline is on the other side (nothing changed)."""
        side = "deadline <= :now" if status == "timed_out" else "deadline > :now"
        answer = {"by": by, "at": round(now, 3), "comment": comment}
        writes = [
            {"Update": {
                "TableName": self.table,
                "Key": Control.key(approval_key(gate.run_id), approval_sk(gate.step)),
                "UpdateExpression": "SET gate = :to, answer = :a",
                "ConditionExpression": f"gate = :pending AND {side}",
                "ExpressionAttributeValues": {
                    ":to": {"S": status}, ":a": {"S": dumps(answer)},
                    ":pending": {"S": PENDING}, ":now": num(now)},
            }},
            {"Delete": {"TableName": self.table, "Key": Control.key(
                APPROVALS_PENDING, inbox_sk(gate.created_at, gate.run_id, gate.step))}},
        ]
        try:
            with _translate(f"approval {gate.run_id}/{gate.step}: {status}"):
                self.ddb.transact_write_items(TransactItems=writes)
        except ConditionFailed:
            return False
        return True

    def inbox(self, now: float, limit: int = 100) -> list[Gate]:
        """The open gates, oldest first, as their inbox items hold them."""
        out = []
        for item in self.control.query(APPROVALS_PENDING, now=now, limit=limit):
            doc = json.loads(item["doc"]["S"])
            out.append(Gate(
                run_id=doc["run_id"], step=doc["step"], workflow=doc.get("workflow", ""),
                prompt=doc.get("prompt", ""), created_at=float(doc["created_at"]),
                deadline=float(doc["deadline"]), approvers=tuple(doc.get("approvers") or ()),
                link=bool(doc.get("link"))))
        return out

    def forget(self, gate: Gate) -> None:
        """Drop the inbox item of a gate whose run ended while it was open."""
        self.control.delete(APPROVALS_PENDING, inbox_sk(gate.created_at, gate.run_id, gate.step))

    def link_gate(self, sha: str, now: float) -> tuple[str, str] | None:
        """The (run, step) a link names, if it is one."""
        item = self.control.get(approval_link_key(sha), NO_SK, now=now)
        if item is None:
            return None
        doc = json.loads(item["doc"]["S"])
        return str(doc["run_id"]), str(doc["step"])
