"""`document-approval` (README, "Durable examples"): ask a person to approve a draft through a hook,
then publish it, or tell the author why not.

    orchestrator trigger document-approval --input '{"documentId": "doc-1"}'

The workflow creates a hook (a secret, single-use URL that sends the signal
`document-approval` to this run, with `{"documentId": ...}` merged into what is posted),
mails its URL to the approver, and waits up to 7 days. Approving is a POST to that URL
with `{"approved": true}` (or `false` and a `comment`). The hook is created before the
mail goes out and is the same on every replay, so the URL in the mail is the one that
works; a second POST to it is refused (410). Approved drafts are written to
`documents/published/<id>.md`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from functions.durable import Context, Workflow, step, workflow
from functions.examples.durable.common import keyed, required
from functions.examples.durable.mail import Outbox
from functions.examples.durable.store import Log, Records, write_atomic
from functions.sdk.failures import TerminalError

__all__ = ["DECISION_TIMEOUT", "Documents", "document_approval"]

DECISION_TIMEOUT = "7d"
SIGNAL = "document-approval"


def _drafts() -> dict[str, Any]:
    return {"documents": {
        "doc-1": {"id": "doc-1", "title": "Returns policy, 2027 edition",
                  "author": "ada@example.com", "approver": "grace@example.com",
                  "status": "draft",
                  "text": "Items can be returned within 30 days of delivery, unused and in "
                          "their original packaging. Refunds reach the original payment "
                          "method within five working days."},
        "doc-2": {"id": "doc-2", "title": "Shipping to the islands",
                  "author": "alan@example.com", "approver": "grace@example.com",
                  "status": "draft",
                  "text": "Orders to the Azores, Madeira and the Canaries ship by air "
                          "freight and take three to five extra days."},
    }}


class Documents:
    def __init__(self, root: Path) -> None:
        self.root = root / "documents"
        self.records = Records(self.root / "documents.json", _drafts)
        self.publications = Log(self.root / "published.jsonl")

    def get(self, document_id: str) -> dict[str, Any]:
        doc: dict[str, Any] | None = self.records.read()["documents"].get(document_id)
        if doc is None:
            raise TerminalError(f"no document {document_id!r}", code="unknown_document")
        return doc

    def add(self, doc: dict[str, Any]) -> None:
        with self.records.change() as data:
            data["documents"][doc["id"]] = {"status": "draft", **doc}

    def publish(self, document_id: str, decision: dict[str, Any], *, key: str
                ) -> dict[str, Any]:
        """Write the published file (the same bytes on a repeat) and mark the document
        published, once per key."""
        doc = self.get(document_id)
        path = self.root / "published" / f"{document_id}.md"
        approved_by = decision.get("by") or doc["approver"]
        text = (f"# {doc['title']}\n\n{doc['text']}\n\n---\nApproved by {approved_by}"
                + (f": {decision['comment']}" if decision.get("comment") else "") + "\n")
        write_atomic(path, text.encode())

        def effect(data: dict[str, Any]) -> dict[str, Any]:
            data["documents"][document_id]["status"] = "published"
            self.publications.add(document=document_id, key=key, path=str(path))
            return {"document": document_id, "path": str(path)}
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer

    def reject(self, document_id: str, reason: str, *, key: str) -> dict[str, Any]:
        def effect(data: dict[str, Any]) -> dict[str, Any]:
            data["documents"][document_id].update(status="rejected", reason=reason)
            return {"document": document_id, "status": "rejected"}
        answer: dict[str, Any] = self.records.apply(key, effect)
        return answer


def document_approval(documents: Documents, outbox: Outbox) -> Workflow:
    """The workflow, on `documents`, mailing through `outbox`."""

    @workflow("document-approval", max_steps=10, execution_timeout="8d")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        document_id = required(payload, "documentId")
        doc = await step("load-document", documents.get, document_id)
        hook = await ctx.create_hook(SIGNAL, metadata={"documentId": document_id},
                                     ttl=DECISION_TIMEOUT)
        await step("request-approval", keyed(
            ctx, outbox.send, doc["approver"], f"Please review: {doc['title']}",
            f"{doc['author']} asks you to approve \"{doc['title']}\" for publication.\n\n"
            f"Approve: POST {hook.url} with {{\"approved\": true}}\n"
            f"Reject:  POST {hook.url} with {{\"approved\": false, \"comment\": \"...\"}}\n"
            f"\nThe link works once, for {DECISION_TIMEOUT}.\n",
            hook=hook.url))
        decision = await hook.wait(timeout=DECISION_TIMEOUT)
        if decision is None or not decision.get("approved"):
            reason = ("nobody decided within " + DECISION_TIMEOUT if decision is None
                      else decision.get("comment") or "rejected without a comment")
            await step("record-rejection", keyed(ctx, documents.reject, document_id, reason))
            await step("notify-author", keyed(
                ctx, outbox.send, doc["author"], f"Not published: {doc['title']}",
                f"\"{doc['title']}\" was not approved: {reason}.\n"))
            return {"published": False, "documentId": document_id, "reason": reason}
        published = await step("publish-document",
                               keyed(ctx, documents.publish, document_id, decision))
        await step("notify-author", keyed(
            ctx, outbox.send, doc["author"], f"Published: {doc['title']}",
            f"\"{doc['title']}\" is published at {published['path']}.\n"))
        return {"published": True, "documentId": document_id, "path": published["path"]}

    return run
