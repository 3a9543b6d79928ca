"""The checks of approvals, locks and state cells (durable_app's `dgate`, `dlock`,
`dclaim`), from a Snapshot: the journals, the control table's items and what the harness
sent (`drive.jsonl`). Each violation names its check:

- `claim-winners`: of the seed's `dclaim` runs that succeeded, exactly one won the
  claim (`ctx.state.add`), and the cell names that run as its claimer;
- `lock-holders`: no two `dlock` runs held the seed's lock at once, by their journals
  (while the step inside the lock ran: surely within the time the run held it), and
  nobody holds it once every run has ended;
- `gate-outcome`: one outcome per gate: at most one answer accepted; an approved gate's
  recorded answer is the accepted one (who); a gate that timed out accepted none; an
  answer sent after the timeout was refused; the gate's record says what the journal
  recorded."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from orchestrator.engine.states import RunStatus
from tests.chaos.snapshot import Snapshot

__all__ = ["CoordinationChecks"]

Bad = Callable[..., None]


class CoordinationChecks:
    def __init__(self, snap: Snapshot, bad: Bad, tol: float) -> None:
        self.snap = snap
        self.bad = bad
        self.tol = tol

    def all(self) -> None:
        self.claims()
        self.locks()
        for run in self.snap.runs.values():
            if run.workflow == "dgate" and run.definition.durable is not None:
                self.gate(run.run_id)

    def _runs(self, workflow: str) -> list[Any]:
        return [r for r in self.snap.runs.values() if r.workflow == workflow]

    def claims(self) -> None:
        done = [r for r in self._runs("dclaim") if r.status is RunStatus.SUCCESS]
        if not done:
            return
        won = [r.run_id for r in done
               if ((self.snap.outputs.get((r.run_id, "$run")) or {}).get("won")) is True]
        if len(won) != 1:
            self.bad("claim-winners", f"{len(won)} of {len(done)} dclaim runs won the claim:"
                     f" {won}", won[0] if won else done[0].run_id)
            return
        cells = [i for k, i in self.snap.control.items() if k.startswith("state#chaos/claim-")]
        claimers = {str(i.get("claimer", {}).get("S", "")).split("/")[0] for i in cells}
        if claimers != {won[0]}:
            self.bad("claim-winners", f"the cell names {sorted(claimers)}, the winner is "
                     f"{won[0]}", won[0])

    def locks(self) -> None:
        spans = []
        for run in self._runs("dlock"):
            journal = self.snap.journals.get(run.run_id, [])
            took = [e for e in journal if e.get("kind") == "lock"]
            inside = next((e for e in journal if e.get("kind") == "step"
                           and e.get("name") == "inside"), None)
            if len(took) >= 2 and inside is not None:
                # When the run surely held the lock: while its step inside ran (the SDK
                # starts it only once the take is recorded, and the release comes after
                # it). The take's own record is stamped before the take is made, and
                # the release's can be written late: neither bounds the hold.
                spans.append((float(inside["started"]), float(inside["ended"]), run.run_id))
            elif run.status is RunStatus.SUCCESS:
                self.bad("lock-holders", f"a successful dlock run recorded {len(took)} lock "
                         "operations, not 2", run.run_id)
        spans.sort()
        for a, b in itertools.pairwise(spans):
            if b[0] < a[1] - self.tol:
                self.bad("lock-holders", f"{b[2]} took the lock at {b[0]:.3f}, while {a[2]} "
                         f"held it (until {a[1]:.3f})", b[2], at=b[0])
        if all(r.status.terminal for r in self._runs("dlock")):
            held = [k for k in self.snap.control if k.startswith("mutex#chaos-")]
            if held:
                self.bad("lock-holders", f"every dlock run ended, the lock is still held: "
                         f"{held}")

    def gate(self, rid: str) -> None:
        journal = self.snap.journals.get(rid, [])
        entry = next((e for e in journal if e.get("kind") == "approval"), None)
        answers = [d for d in self.snap.drive if d.get("ev") == "answer" and d.get("run") == rid]
        # An answer retried after its reply was lost (a killed API, a dropped
        # connection) finds its own first try committed: 409 naming it as the answerer.
        # That answer was accepted, not refused (seed 303: b's first try landed as the
        # API restarted, its 20th was told "approved by b").
        accepted = [d for d in answers if d.get("status") == 200 or (
            d.get("status") == 409 and int(d.get("tries") or 1) > 1
            and f"by {d.get('by')}:" in str((d.get("error") or {}).get("message", "")))]
        if len(accepted) > 1:
            self.bad("gate-outcome", f"{len(accepted)} answers accepted: "
                     f"{[d.get('by') for d in accepted]}", rid)
        record = self.snap.control.get(f"approval#{rid}/gate")
        status = None if record is None else record.get("gate", {}).get("S")
        if entry is None:
            if self.snap.runs[rid].status.terminal:
                self.bad("gate-outcome", "the run ended without recording its gate", rid)
            return
        value = entry.get("value") or {}
        if value.get("timed_out"):
            if accepted:
                self.bad("gate-outcome", f"the gate timed out, yet answer "
                         f"{accepted[0].get('by')} was accepted", rid)
            if status != "timed_out":
                self.bad("gate-outcome", f"the journal says timed out, the gate {status}", rid)
        elif value.get("approved"):
            if not accepted or accepted[0].get("by") != value.get("by"):
                self.bad("gate-outcome", f"recorded as approved by {value.get('by')}, the "
                         f"accepted answers: {[d.get('by') for d in accepted]}", rid)
            if status != "approved":
                self.bad("gate-outcome", f"the journal says approved, the gate {status}", rid)
            answer = json.loads(record["answer"]["S"]) if record and "answer" in record else {}
            if answer.get("by") != value.get("by"):
                self.bad("gate-outcome", f"the gate's record says by {answer.get('by')}, the "
                         f"journal {value.get('by')}", rid)
        for d in answers:
            if d.get("mode") == "late" and d.get("status") == 200:
                self.bad("gate-outcome", "an answer sent after the timeout was accepted", rid)
