"""Following a durable run: a look at GET /runs/{id} reads what changed since the last
look, not the whole journal (orchestrator/services/reads/journal_follow.py), and shows exactly
what a whole read would."""

from __future__ import annotations

import time
from typing import Any

import pytest

from functions.sdk.protocol import JournalEntry
from orchestrator.services.reads.views import durable_steps
from tests.support.harness import Harness

# No worker runs: the run is never called, and the test writes its journal.
MANIFEST = """
backends:
  gone: { url: "http://127.0.0.1:9" }
workflows:
  wf: { backend: gone }
"""


def entry(scope: str, pos: int, kind: str = "step", **extra: Any) -> dict[str, Any]:
    return {"scope": scope, "pos": pos, "id": f"{scope}#{pos}", "kind": kind,
            "name": f"{kind}-{scope}-{pos}", "status": "ok", "value": pos,
            "started": 1.0, "ended": 2.0, **extra}


def as_entries(docs: list[dict[str, Any]]) -> list[JournalEntry]:
    """Checkpoints as a call reports them (the protocol's entries)."""
    return [JournalEntry.model_validate(d) for d in docs]


class Reads:
    """Journal items the store's queries return (botocore's own event: the real
    answers)."""

    def __init__(self, h: Harness) -> None:
        self.items = 0
        h.rt.clients.dynamodb.meta.events.register("after-call.dynamodb.Query", self)

    def __call__(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        self.items += sum(1 for i in parsed.get("Items", [])
                          if i.get("step", {}).get("S", "").startswith("~j#"))

    def take(self) -> int:
        out, self.items = self.items, 0
        return out


@pytest.fixture
def h(build_harness: Any, tmp_path: Any) -> Any:
    harness = build_harness(MANIFEST, tmp_path, {})
    yield harness
    harness.close()


def steps_of(h: Harness, run_id: str) -> list[dict[str, Any]]:
    return [s for s in h.rt.runs.view(run_id)["steps"] if s["status"] != "running"]


def whole(h: Harness, run_id: str, reads: Reads | None = None) -> list[dict[str, Any]]:
    """The steps a read of the whole journal shows (its reads not counted)."""
    got = durable_steps(h.rt.store.journal.read_journal(run_id), None)
    if reads is not None:
        reads.take()
    return got


def look(h: Harness, run_id: str, reads: Reads) -> tuple[list[dict[str, Any]], int]:
    """What a look shows, and how many journal items it read."""
    reads.take()
    shown = steps_of(h, run_id)
    return shown, reads.take()


def test_a_look_reads_what_changed_and_shows_what_a_whole_read_would(h: Harness) -> None:
    run_id = h.start("wf", {})
    reads = Reads(h)
    store, now = h.rt.store, time.time()
    store.journal.commit_entries(run_id, as_entries([entry("", i) for i in range(300)]),
                                 now)
    shown, read = look(h, run_id, reads)
    assert shown == whole(h, run_id, reads) and read == 300  # the first look: all of it
    shown, read = look(h, run_id, reads)
    assert len(shown) == 300 and read == 0  # nothing changed: nothing read
    # A parallel at position 300, running: its branches' entries land (nested ones too).
    store.journal.commit_entries(run_id, as_entries([
        entry("300:0", 0), entry("300:1", 0), entry("300:1/0:0", 0)]), now)
    shown, read = look(h, run_id, reads)
    assert shown == whole(h, run_id, reads) and read == 3  # the running parallel's
    # It ends (its last branch entry, then its own), and the chain goes on.
    store.journal.commit_entries(run_id, as_entries([
        entry("300:2", 0), entry("", 300, "parallel"),
        *[entry("", i) for i in range(301, 306)]]), now)
    shown, read = look(h, run_id, reads)
    assert shown == whole(h, run_id, reads)
    assert read == 6 + 4  # the new top entries, then the ended parallel's branches, once
    shown, read = look(h, run_id, reads)
    assert len(shown) == 310 and read == 0


def test_a_reset_drops_what_a_follower_kept(h: Harness) -> None:
    run_id = h.start("wf", {})
    store, now = h.rt.store, time.time()
    store.journal.commit_entries(run_id, as_entries([entry("", i) for i in range(6)]), now)
    assert len(steps_of(h, run_id)) == 6
    store.journal.delete_entries(run_id, "", 2)
    assert store.runs.note_run(run_id, time.time(), "run.reset", to=2)
    store.journal.commit_entries(run_id, as_entries([{**entry("", 2), "value": "again"}]), now)
    shown = steps_of(h, run_id)
    assert shown == whole(h, run_id)
    assert [s["position"] for s in shown] == [0, 1, 2] and shown[2]["output"] == "again"
