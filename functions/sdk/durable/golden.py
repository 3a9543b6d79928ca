"""Golden journals: replay a run's recorded journal against the current code, running
nothing, to learn before a deploy whether runs in flight would pause on it.

    golden = httpx.get(f"{api}/runs/{run_id}/journal").json()   # or `orchestrator journal export`
    report = check(send_welcome_email, golden)                  # in process
    assert report["ok"], report["mismatch"]

`orchestrator journal check FILE --url ENDPOINT` does the same against a deployed
endpoint (the call's `mode: check`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.sdk.durable.workflow import Workflow, advance

__all__ = ["check", "check_body", "read_report"]


def check_body(golden: Mapping[str, Any]) -> dict[str, Any]:
    """The call that replays `golden` (an exported journal) in check mode."""
    return {
        "run": {"run_id": golden.get("run_id") or "golden", "workflow": golden.get("workflow"),
                "started_at": golden.get("started_at") or 0.0,
                "now": golden.get("started_at") or 0.0, "subject": golden.get("subject")},
        "input": golden.get("input"),
        "journal": list(golden.get("journal") or ()),
        "mode": "check",
    }


def read_report(answer: Mapping[str, Any], golden: Mapping[str, Any]) -> dict[str, Any]:
    """What a check call's answer says: ok, or the mismatch (both operations)."""
    ops = list(answer.get("ops") or ())
    mismatch = next((op for op in ops if op.get("op") == "mismatch"), None)
    failed = next((op for op in ops if op.get("op") == "fail"), None)
    ended = next((op for op in ops if op.get("op") == "complete"), None)
    return {
        "ok": mismatch is None and failed is None,
        "entries": len(golden.get("journal") or ()),
        "mismatch": mismatch,
        "failure": None if failed is None else failed.get("error"),
        "reached": "end" if ended is not None else "frontier",
    }


async def check(wf: Workflow, golden: Mapping[str, Any]) -> dict[str, Any]:
    """Replay `golden` against `wf` in this process (runs no step body)."""
    return read_report(await advance(wf, check_body(golden)), golden)
