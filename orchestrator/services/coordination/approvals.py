"""Approvals: a gate a person answers, in a YAML step (`approval:`) or a durable workflow
(`ctx.approval`), with a deadline, optional approvers and an optional single-use link.

- **Opening** a gate stores its record, its inbox item and (with `link`) its link in one
  transaction; opening it again (a replay, a retried claim) finds it and changes
  nothing.
- **Answering** (`answer`: the API, the CLI, the dashboard, a link) and **timing out**
  (`expire`: the gate's own step, once its deadline passed) are each one guarded
  transaction on the record: the first resolution wins, a second answer is refused
  (`approval_answered`), an answer at or after the deadline too (`approval_timed_out`),
  and nothing changes for the loser.
- An answer then pokes the row that waits for the gate (a YAML step's row, or a durable
  run's driver): nobody holds a worker while a gate is open.
- **The inbox** lists open gates oldest first; a gate whose run ended while it was open
  (cancelled) is dropped from it as it is seen."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.approvals import Gate
from orchestrator.engine.durable_waits import Waiting
from orchestrator.errors import (
    Code,
    ConditionFailed,
    Conflict,
    Forbidden,
    NotFound,
    UsageError,
    imported_run,
)
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.values import checked_name

__all__ = ["ANONYMOUS", "LINK", "MAX_COMMENT", "MAX_PROMPT", "Approvals", "gate_outcome",
           "reject_run", "rejected_reason"]

# Who answered, when the API runs without keys, or through a link.
ANONYMOUS = "anonymous"
LINK = "link"
MAX_COMMENT = 2000
MAX_PROMPT = 2000


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Approvals:
    def __init__(self, store: Store, queues: Queues, hooks: Hooks,
                 clock: Callable[[], float]) -> None:
        self.store = store
        self.queues = queues
        self.hooks = hooks
        self.clock = clock

    # ---- the gate's side ---------------------------------------------------------------

    def open(self, run_id: str, step: str, workflow: str, spec: Mapping[str, Any],
             now: float) -> Gate:
        """Open the gate `step` of a run from its spec ({prompt, timeout (seconds),
        approvers, link}); the stored gate if it was opened before."""
        stored = self.store.approvals.get(run_id, step)
        if stored is not None:
            return stored
        deadline = (float(spec["deadline"]) if spec.get("deadline") is not None
                    else now + float(spec["timeout"]))
        gate = Gate(run_id=run_id, step=step, workflow=workflow,
                    prompt=str(spec.get("prompt") or "")[:MAX_PROMPT], created_at=round(now, 3),
                    deadline=round(deadline, 3),
                    approvers=tuple(str(a) for a in spec.get("approvers") or ()),
                    link=bool(spec.get("link")))
        sha = _sha(self.link_token(run_id, step)) if gate.link else None
        return self.store.approvals.open(gate, sha)

    def settle(self, gate: Gate, now: float) -> Gate:
        """The gate as it stands at `now`: an open one past its deadline times out
        (unless an answer won first: then that)."""
        if gate.open and now >= gate.deadline:
            self.store.approvals.resolve(gate, "timed_out", now)
            return self.store.approvals.get(gate.run_id, gate.step) or gate
        return gate

    def link_token(self, run_id: str, step: str) -> str:
        return self.hooks.token_for(run_id, f"approval:{step}")

    def link_url(self, run_id: str, step: str) -> str:
        return f"{self.hooks.public_url or ''}/approvals/links/{self.link_token(run_id, step)}"

    # ---- the answering side ------------------------------------------------------------

    def answer(self, run_id: str, step: str, approved: Any, comment: Any,
               by: str, *, via_link: bool = False) -> dict[str, Any]:
        """Answer an open gate as `by`; the gate as answered. Refused (nothing changes):
        404 no such gate, 403 `by` is not an approver, 409 answered already, past the
        deadline, or the run has ended; 400 a bad field."""
        if not isinstance(approved, bool):
            raise UsageError("approved: true or false is required")
        if comment is not None and not isinstance(comment, str):
            raise UsageError("comment: a string")
        if comment is not None and len(comment) > MAX_COMMENT:
            raise UsageError(f"comment: at most {MAX_COMMENT} characters")
        gate = self.store.approvals.get(run_id, step)
        if gate is None:
            raise NotFound(f"run {run_id!r} has no approval {step!r}")
        if gate.approvers and by not in gate.approvers and not via_link:
            raise Forbidden(f"approval {step!r} of run {run_id!r} is for "
                            f"{', '.join(gate.approvers)}; {by!r} is not among them")
        now = self.clock()
        self._refuse_closed(gate, now)
        run = self.store.runs.get_run(run_id, now)
        if run is not None and run.imported is not None:
            raise imported_run(run_id, run.imported, "an answer")
        if run is None or run.status.terminal:
            raise Conflict(Code.RUN_FINISHED, f"run {run_id!r} has already finished: "
                           f"approval {step!r} can no longer be answered")
        status = "approved" if approved else "rejected"
        if not self.store.approvals.resolve(gate, status, now, by=by, comment=comment):
            self._refuse_closed(self.store.approvals.get(run_id, step) or gate, self.clock())
            raise Conflict(Code.APPROVAL_ANSWERED, f"approval {step!r} of run {run_id!r} "
                           "was resolved meanwhile")
        self.wake(run_id, step)
        done = self.store.approvals.get(run_id, step) or gate
        return self.shown(done)

    def answer_link(self, token: str, approved: Any, comment: Any) -> dict[str, Any]:
        """Answer through a gate's link (by `link`); 404 for a token that is none."""
        if not token or len(token) > 200:
            raise NotFound("no such approval link")
        found = self.store.approvals.link_gate(_sha(token), self.clock())
        if found is None:
            raise NotFound("no such approval link (or it has expired)")
        run_id, step = found
        # The link is the credential its gate was opened with: whoever holds it answers.
        return self.answer(run_id, step, approved, comment, LINK, via_link=True)

    def _refuse_closed(self, gate: Gate, now: float) -> None:
        # One meaning each: `approval_timed_out` for any answer at or after the deadline
        # (whether or not the timeout is recorded yet), `approval_answered` for a gate
        # someone answered first.
        if now >= gate.deadline or gate.status == "timed_out":
            raise Conflict(Code.APPROVAL_TIMED_OUT, f"approval {gate.step!r} of run "
                           f"{gate.run_id!r} timed out (its deadline passed): nothing changed")
        if not gate.open:
            raise Conflict(Code.APPROVAL_ANSWERED, f"approval {gate.step!r} of run "
                           f"{gate.run_id!r} was {gate.status.replace('_', ' ')}"
                           + (f" by {gate.by}" if gate.by else "") + ": nothing changed")
        if now >= gate.deadline:
            raise Conflict(Code.APPROVAL_TIMED_OUT, f"approval {gate.step!r} of run "
                           f"{gate.run_id!r} timed out (its deadline passed): nothing changed")

    def wake(self, run_id: str, step: str) -> None:
        """Poke the row waiting for gate `step`: the YAML step's own row, or the durable
        driver (top or branch) whose wait names it. A row nobody holds gets a dispatch;
        one being advanced sees the poke before it waits again."""
        now = self.clock()
        rows = [r for r in self.store.drivers.all(run_id)
                if (r.waiting or {}).get("kind") == "approval"
                and (r.waiting or {}).get("name") == step]
        own = self.store.steps.get_step(run_id, step)
        if own is not None and not own.status.terminal and not rows:
            rows = [own]
        for row in rows:
            poked = self.store.drivers.poke_driver(run_id, now, row.step)
            if poked is not None:
                self.queues.dispatch([Dispatch(run_id=run_id, step=row.step,
                                               attempt=poked.attempt)])

    # ---- reading -----------------------------------------------------------------------

    def get(self, run_id: str, step: str) -> dict[str, Any]:
        gate = self.store.approvals.get(run_id, step)
        if gate is None:
            raise NotFound(f"run {run_id!r} has no approval {step!r}")
        return self.shown(gate)

    def shown(self, gate: Gate, now: float | None = None) -> dict[str, Any]:
        now = self.clock() if now is None else now
        doc = gate.doc()
        doc["age"] = round(max(0.0, now - gate.created_at), 3)
        if gate.open:
            doc["expires_in"] = round(max(0.0, gate.deadline - now), 3)
        if gate.link and gate.open:
            doc["link"] = self.link_url(gate.run_id, gate.step)
        return doc

    def inbox(self, approver: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Open gates across runs, oldest first (`approver`: those that person may
        answer: naming them, or anyone's)."""
        if approver is not None:
            checked_name("approver", approver)
        now = self.clock()
        out = []
        for gate in self.store.approvals.inbox(now, limit=max(limit, 1) * 2):
            if approver is not None and gate.approvers and approver not in gate.approvers:
                continue
            run = self.store.runs.get_run(gate.run_id, now)
            if run is None or run.status.terminal:
                self.store.approvals.forget(gate)  # its run ended while it was open
                continue
            out.append(self.shown(gate, now))
            if len(out) >= limit:
                break
        return out



def rejected_reason(gate: Gate) -> str:
    """The kill reason of a run whose gate was rejected."""
    why = f": {gate.comment}" if gate.comment else ""
    return f"approval {gate.step} rejected by {gate.by}{why}"


def gate_outcome(approvals: Approvals, run_id: str, workflow: str, waiting: Waiting,
                 now: float) -> dict[str, Any] | None:
    """A durable run's `ctx.approval` wait: its gate opened (once), timed out past its
    deadline; its outcome once it has one (None: still open). A rejected gate's outcome
    carries `rejected` and the kill reason."""
    d = waiting.detail
    spec = {"prompt": d.get("prompt", ""), "approvers": d.get("approvers") or (),
            "link": d.get("link", False), "deadline": d.get("deadline")}
    gate = approvals.settle(approvals.open(run_id, waiting.name, workflow, spec, now), now)
    if gate.open:
        return None
    out: dict[str, Any] = gate.output()
    if gate.status == "rejected":
        out.update(rejected=True, run_id=run_id, reason=rejected_reason(gate))
    return out


def reject_run(executor: Executor, outcome: Mapping[str, Any]) -> None:
    """Cancel the run whose gate was rejected (a no-op if it has ended already)."""
    try:
        executor.kill(str(outcome["run_id"]), str(outcome["reason"]))
    except ConditionFailed:
        pass
