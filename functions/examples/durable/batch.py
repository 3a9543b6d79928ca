"""`batch-process` (README, "Durable examples"): fan a batch of documents out, at most `maxParallel`
at a time, then aggregate the results and close the batch.

    orchestrator trigger batch-process --wait --input '{"batchId": "b-1", "maxParallel": 2,
      "items": [{"id": "a", "text": "to be or not to be"}, {"id": "b", "text": ""},
                {"id": "c", "text": "the rest is silence"}]}'

Each item is a step in a branch of its own: it counts the words of its text, writes
`batches/<batch>/results/<item>.json` and marks the item done. A branch catches its
item's failure (an empty text) and returns it as a result, so one bad item does not fail
the batch. `get-batch` registers a new batch, and returns only the items still pending of
one seen before: running a batch again finishes what is left. Every run of an item's
body is written to `batches/worklog.jsonl` (start and end, with the wall-clock time),
which shows how many ran at once."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from functions.durable import Context, StepFailed, Workflow, step, workflow
from functions.examples.durable.common import required
from functions.examples.durable.store import Log, Records, write_atomic
from functions.sdk.failures import TerminalError

__all__ = ["MAX_ITEMS", "Batches", "batch_process"]

MAX_ITEMS = 500
DEFAULT_PARALLEL = 4
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Batches:
    def __init__(self, root: Path) -> None:
        self.root = root / "batches"
        self.worklog = Log(self.root / "worklog.jsonl")

    def _batch(self, batch_id: str) -> Records:
        return Records(self.root / batch_id / "batch.json")

    def open(self, batch_id: str, items: Any) -> list[dict[str, Any]]:
        """The batch's pending items; a batch not seen before is registered from `items`."""
        with self._batch(batch_id).change() as doc:
            if not doc:
                doc.update(id=batch_id, status="open", items=_checked(items))
            return [i for i in doc["items"] if i["status"] == "pending"]

    def process(self, batch_id: str, item: dict[str, Any], attempt: int) -> dict[str, Any]:
        """Count an item's words into its result file and mark it done. Deterministic:
        a repeat writes the same bytes."""
        self.worklog.add(batch=batch_id, item=item["id"], event="start", attempt=attempt,
                         at=time.time())
        try:
            result = self._work(batch_id, item)
        finally:
            self.worklog.add(batch=batch_id, item=item["id"], event="end", attempt=attempt,
                             at=time.time())
        with self._batch(batch_id).change() as doc:
            for stored in doc["items"]:
                if stored["id"] == item["id"]:
                    stored["status"] = "done"
        return result

    def _work(self, batch_id: str, item: dict[str, Any]) -> dict[str, Any]:
        words = [w.lower() for w in _WORD.findall(item["text"])]
        if not words:
            raise TerminalError(f"item {item['id']} has no words to count", code="empty_item")
        top = sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        result = {"id": item["id"], "ok": True, "words": len(words),
                  "distinct": len(set(words)), "top": [w for w, _ in top],
                  "sha256": hashlib.sha256(item["text"].encode()).hexdigest()}
        path = self.root / batch_id / "results" / f"{item['id']}.json"
        write_atomic(path, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
        return {**result, "path": str(path)}

    def close(self, batch_id: str, summary: dict[str, Any]) -> dict[str, Any]:
        with self._batch(batch_id).change() as doc:
            doc.update(status="completed", summary=summary)
            return {"id": batch_id, "status": "completed"}

    def read(self, batch_id: str) -> dict[str, Any]:
        return self._batch(batch_id).read()


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in results if r.get("ok")]
    return {"total": len(results), "succeeded": len(good),
            "failed": len(results) - len(good),
            "words": sum(r["words"] for r in good),
            "failures": {r["id"]: r["error"] for r in results if not r.get("ok")}}


def batch_process(batches: Batches) -> Workflow:
    """The workflow, on `batches`' files."""

    @workflow("batch-process", max_steps=2 * MAX_ITEMS + 10, execution_timeout="1d")
    async def run(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
        batch_id = required(payload, "batchId")
        limit = payload.get("maxParallel", DEFAULT_PARALLEL)
        items = await step("get-batch", batches.open, batch_id, payload.get("items"))

        def branch(item: dict[str, Any]) -> Any:
            async def one() -> dict[str, Any]:
                try:
                    done: dict[str, Any] = await step(
                        f"process-{item['id']}",
                        lambda: batches.process(batch_id, item, ctx.attempt), retries=2)
                    return done
                except StepFailed as exc:
                    return {"id": item["id"], "ok": False, "error": exc.error.get("message")}
            return one

        results = await ctx.parallel([branch(i) for i in items], max_parallel=limit)
        summary = await step("aggregate", aggregate, results)
        await step("update-batch", batches.close, batch_id, summary)
        return {"batchId": batch_id, **summary}

    return run


def _checked(items: Any) -> list[dict[str, Any]]:
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise TerminalError(f"a new batch needs items: a list of 1 to {MAX_ITEMS} "
                            "{id, text} objects", code="invalid_input")
    out, seen = [], set()
    for n, item in enumerate(items):
        if (not isinstance(item, dict) or not isinstance(item.get("id"), str)
                or not _ID.fullmatch(item["id"]) or not isinstance(item.get("text"), str)):
            raise TerminalError(f"items[{n}] must be {{id, text}} with an id of letters, "
                                f"digits and ._-, got {item!r}", code="invalid_input")
        if item["id"] in seen:
            raise TerminalError(f"items[{n}]: id {item['id']!r} twice", code="invalid_input")
        seen.add(item["id"])
        out.append({"id": item["id"], "text": item["text"], "status": "pending"})
    return out
