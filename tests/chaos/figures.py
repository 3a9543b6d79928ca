"""The figures of one seed: counts of runs, steps, calls, answers and faults, duplicate
calls and re-executions, and the latencies from a step's readiness or a retry's due time
to its start (history) and to its call (ledger), and from a run's last step landing to the
run's finish, as n, p50, p99 and max; and those of the durable runs (`durable_figures`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from tests.chaos.snapshot import Call, Snapshot

if TYPE_CHECKING:
    from tests.chaos.durable_checks import DurableChecks

__all__ = ["durable_figures", "figures", "landing", "landings", "percentiles", "slowest"]

SLOWEST = 5


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    """n, p50, p99 and max (nearest rank), in seconds rounded to the millisecond."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    xs = sorted(values)

    def rank(p: float) -> float:
        return round(xs[min(len(xs) - 1, max(0, int(p * len(xs) + 0.999999) - 1))], 3)

    return {"n": len(xs), "p50": rank(0.50), "p99": rank(0.99), "max": round(xs[-1], 3)}


def slowest(cases: list[tuple[float, str, str, float]], faults: list[dict[str, Any]],
            rows: dict[tuple[str, str], Any], n: int = SLOWEST) -> list[dict[str, Any]]:
    """The n longest waits (latency, run, step, from when) with the faults injected from
    2 s before the wait began until it ended, and the row's history over the wait: where
    a tail comes from."""
    out = []
    for wait, run_id, step, since in sorted(cases, reverse=True)[:n]:
        row = rows.get((run_id, step))
        hist = [f"{e.get('type')}@{float(e['at']) - since:+.2f}s"
                + (f"#{e['attempt']}" if e.get("attempt") else "")
                for e in (row.history if row is not None else ())
                if since - 1 <= float(e.get("at", 0.0)) <= since + wait + 0.5]
        near = [f"{f.get('kind')}@{float(f.get('t', 0.0)) - since:+.1f}s"
                + (f":{f.get('target') or f.get('proc') or ''}" if
                   f.get("target") or f.get("proc") else "")
                for f in faults if since - 2 <= float(f.get("t", 0.0)) <= since + wait]
        out.append({"wait": round(wait, 3), "run": run_id, "step": step,
                    "since": round(since, 3), "history": hist, "faults": near[:16]})
    return out


# The kinds of a step's terminal write in the fault log (faults._kind).
TERMINAL_WRITES = ("succeed", "finish")


def landings(faults: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """The injected delays of step writes, by run and step: (when, how long)."""
    held: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for f in faults:
        if (f.get("kind") == "ddb-delay" and f.get("write") in TERMINAL_WRITES
                and f.get("run") and f.get("step")):
            held.setdefault((f["run"], f["step"]), []).append(
                (float(f["t"]), float(f.get("seconds") or 0.0)))
    return held


def landing(row: Any, held: dict[tuple[str, str], list[tuple[float, float]]]) -> float:
    """When a step's terminal write landed: its stamped time (taken before the write
    is sent), or later if the harness held that very write back (a delay injected
    right after the stamp)."""
    stamp = float(row.finished_at or 0.0)
    return max([stamp] + [t + seconds for t, seconds in held.get((row.run_id, row.step), ())
                          if 0.0 <= t - stamp <= 0.5])


def figures(snap: Snapshot, calls: dict[tuple[str, str], list[Call]],
            findings: Counter[str], start_before_due: list[float],
            violations: Counter[str]) -> dict[str, Any]:
    """The figures of a seed (`calls` by run and step, and what the checker counted)."""
    rows = [r for steps in snap.steps.values() for r in steps.values()]
    by_key = {(r.run_id, r.step): r for r in rows}
    kinds: Counter[str] = Counter()
    for f in snap.faults:
        kind = str(f.get("kind"))
        if kind == "self-kill":
            kind = f"self-kill:{f.get('point')}"
        elif kind == "arm":
            kind = f"arm:{f.get('point')}"
        kinds[kind] += 1
    answers: Counter[str] = Counter()
    per_key: Counter[str] = Counter()
    reexec = 0
    delivered: set[str] = set()
    ready_start: list[float] = []
    ready_call: list[float] = []
    due_start: list[float] = []
    due_call: list[float] = []
    ready_cases: list[tuple[float, str, str, float]] = []
    due_cases: list[tuple[float, str, str, float]] = []
    for call in snap.calls:
        key = str(call.recv.get("key"))
        per_key[key] += 1
        if key in delivered:
            reexec += 1
        if call.delivered_2xx:
            delivered.add(key)
        d = call.done
        answers["unanswered" if d is None else str(d.get("fault") or d.get("status"))] += 1
    for r in rows:
        by_attempt = {cl.attempt: cl for cl in calls.get((r.run_id, r.step), [])}
        hist = list(r.history)
        for i, e in enumerate(hist):
            if e.get("type") == "step.ready":
                nxt = next((x for x in hist[i + 1:] if x.get("type") == "step.started"), None)
                if nxt is not None:
                    ready_start.append(float(nxt["at"]) - float(e["at"]))
                    ready_cases.append((ready_start[-1], r.run_id, r.step, float(e["at"])))
                if 1 in by_attempt:
                    ready_call.append(by_attempt[1].t - float(e["at"]))
            elif e.get("type") == "step.retrying" and e.get("due_at") is not None:
                a = int(e.get("attempt") or 0) + 1
                nxt = next((x for x in hist[i + 1:] if x.get("type") == "step.started"
                            and x.get("attempt") == a), None)
                if nxt is not None:
                    due_start.append(float(nxt["at"]) - float(e["due_at"]))
                    due_cases.append((due_start[-1], r.run_id, r.step, float(e["due_at"])))
                if a in by_attempt:
                    due_call.append(by_attempt[a].t - float(e["due_at"]))
    finished = [r.finished_at for r in snap.runs.values() if r.finished_at is not None]
    # How long a run stayed open after its last step landed (target: a sweep interval).
    closing_cases: list[tuple[float, str, str, float]] = []
    held = landings(snap.faults)
    for rid, run in snap.runs.items():
        if run.finished_at is not None and snap.steps.get(rid):
            landed, last = max((landing(r, held), r.step) for r in snap.steps[rid].values())
            closing_cases.append((run.finished_at - landed, rid, last, landed))
    closing = [c[0] for c in closing_cases]
    by_status = Counter(r.status.value for r in snap.runs.values())
    return {
        "runs": len(snap.runs), "runs_by_status": dict(by_status), "steps": len(rows),
        "steps_by_status": dict(Counter(r.status.value for r in rows)),
        "calls": len(snap.calls), "answers": dict(answers),
        "faults": dict(sorted(kinds.items())),
        "aimed": {"armed": sum(n for k, n in kinds.items() if k.startswith("arm:")),
                  "fired": kinds["self-stop"] + sum(
                      n for k, n in kinds.items() if k.startswith("self-kill:")),
                  "missed": kinds["aim-missed"]},
        "duplicate_calls": sum(n - 1 for n in per_key.values() if n > 1),
        "keys_called_more_than_once": sum(1 for n in per_key.values() if n > 1),
        "reexecutions_after_delivered_2xx": reexec,
        "ready_to_start": percentiles(ready_start), "ready_to_call": percentiles(ready_call),
        "due_to_start": percentiles(due_start), "due_to_call": percentiles(due_call),
        "history_start_before_due": percentiles(start_before_due),
        "last_step_to_run_finished": percentiles(closing),
        "slowest_last_step_to_run_finished": slowest(closing_cases, snap.faults, by_key, 3),
        "slowest_ready_to_start": slowest(ready_cases, snap.faults, by_key),
        "slowest_due_to_start": slowest(due_cases, snap.faults, by_key),
        "settle_after_calm": None if not finished else round(
            max(0.0, max(finished) - snap.calm_at), 3),
        "largest_item": max(snap.item_sizes.values(), default=0),
        "dlq_messages": snap.dlq,
        "findings": dict(findings),
        "violations": dict(violations),
    }


def durable_figures(snap: Snapshot, checks: DurableChecks) -> dict[str, Any]:
    """The durable runs' figures: runs by workflow and status, journal entries by kind
    and outcome, step bodies executed (again: at least once), the durable calls and the
    answers given, what the harness sent, the peak of parallel branches in flight, how
    late sleeps ended and how long a signal took from its send to its wait's end."""
    runs = {rid: r for rid, r in snap.runs.items() if r.definition.durable is not None}
    by_wf: dict[str, Counter[str]] = {}
    for r in runs.values():
        by_wf.setdefault(r.workflow, Counter())[r.status.value] += 1
    entries: Counter[str] = Counter()
    committed: set[tuple[str, str]] = set()
    for rid in runs:
        for e in snap.journals.get(rid, []):
            entries[f"{e.get('kind')}:{e.get('status')}"] += 1
            if e.get("kind") == "step":
                committed.add((rid, str(e.get("id"))))
    bodies = [b for b in snap.bodies if b.run in runs]
    per_op = Counter((b.run, b.op) for b in bodies)
    answers: Counter[str] = Counter()
    for c in snap.dcalls:
        d = c.done
        answers["unanswered" if d is None else str(d.get("fault") or d.get("status"))] += 1
    sends = [d for d in snap.drive if d.get("ev") == "signal"]
    events = [d for d in snap.drive if d.get("ev") == "event"]
    return {
        "runs": {wf: dict(c) for wf, c in sorted(by_wf.items())},
        "entries": dict(sorted(entries.items())),
        "bodies": {"executed": len(bodies), "steps_committed": len(committed),
                   "executed_more_than_once": sum(1 for n in per_op.values() if n > 1),
                   "reexecutions": sum(n - 1 for n in per_op.values() if n > 1),
                   "failed": sum(1 for b in bodies if b.end is not None and b.end.get("error")),
                   "cut_off": sum(1 for b in bodies if b.end is None),
                   "after_commit": checks.stale},
        "calls": len(snap.dcalls), "answers": dict(answers),
        "signals": {"keys": len({d.get("key") for d in sends}), "sends": len(sends),
                    "late": len({d.get("key") for d in sends if d.get("late")}),
                    "sent_while_waiting": len({d.get("key") for d in sends
                                               if d.get("registered")}),
                    "answered_duplicate": sum(1 for d in sends if d.get("duplicate")),
                    "tries_over_one": sum(int(d.get("tries") or 1) - 1 for d in sends)},
        "events": {"emitted": len(events),
                   "answered_duplicate": sum(1 for d in events if d.get("duplicate"))},
        "parallel_peak": {what: max((p.get(what, 0) for p in checks.peaks.values()),
                                    default=None) for what in ("bodies", "rows and results")},
        "sleep_overshoot": percentiles(checks.sleep_over),
        "signal_sent_to_taken": percentiles(checks.signal_to_taken),
    }
