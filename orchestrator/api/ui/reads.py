"""What the dashboard's pages read, through the same services as the API: a filtered
page of runs, a run with its history and lineage, the workflows with their recent
success. Blocking: call from a thread."""

from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from orchestrator.api.runs import decode_cursor, encode_cursor, summary
from orchestrator.engine.search import parse_query
from orchestrator.engine.states import RunStatus
from orchestrator.errors import UsageError
from orchestrator.presentation.flow import flow_lines, flow_of
from orchestrator.runtime import Runtime

__all__ = ["RunFilters", "lineage", "list_page", "run_page", "workflow_rows",
           "workflow_triggers"]

TRIGGERS = ("api", "webhook", "schedule", "event", "rerun", "manual")
STATUSES = (*(s.value for s in RunStatus), "paused")
ENDED = frozenset(s.value for s in RunStatus if s.terminal)
MAX_PAGES = 10  # listing pages read to fill one page of filtered runs
LINEAGE_SCAN = 100  # the workflow's newest runs searched for a run's reruns
SPARK_RUNS = 30  # a workflow's newest runs its row on the workflows page draws


def _time(raw: str, name: str) -> float | None:
    """A `datetime-local` field's value (UTC), as seconds."""
    if not raw:
        return None
    for fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"):
        try:
            return float(calendar.timegm(time.strptime(raw, fmt)))
        except ValueError:
            continue
    raise UsageError(f"{name}: {raw!r} is not a time (YYYY-MM-DDTHH:MM, UTC)")


@dataclass(frozen=True)
class RunFilters:
    q: str = ""
    workflow: str = ""
    status: str = ""
    trigger: str = ""
    since: str = ""
    until: str = ""
    run_id: str = ""
    problems: list[str] = field(default_factory=list)

    FIELDS = ("q", "workflow", "status", "trigger", "since", "until", "run_id")

    @classmethod
    def of(cls, query: dict[str, str], workflows: list[str]) -> RunFilters:
        values = {k: (query.get(k) or "").strip() for k in cls.FIELDS}
        problems = []
        if values["workflow"] and values["workflow"] not in workflows:
            problems.append(f"workflow: no workflow named {values['workflow']!r}")
            values["workflow"] = ""
        if values["status"] and values["status"] not in STATUSES:
            problems.append(f"status: {values['status']!r} is not a run status")
            values["status"] = ""
        if values["trigger"] and values["trigger"] not in TRIGGERS:
            problems.append(f"trigger: {values['trigger']!r} is not a trigger")
            values["trigger"] = ""
        try:
            parse_query(values["q"], "search")
        except UsageError as exc:
            problems.append(exc.message)
            values["q"] = ""
        for name in ("since", "until"):
            try:
                _time(values[name], name)
            except UsageError as exc:
                problems.append(exc.message)
                values[name] = ""
        return cls(**values, problems=problems)

    def query(self, **extra: str) -> str:
        pairs = {k: getattr(self, k) for k in self.FIELDS if getattr(self, k)}
        pairs.update({k: v for k, v in extra.items() if v})
        return urlencode(pairs)

    @property
    def any(self) -> bool:
        return any(getattr(self, k) for k in self.FIELDS)


def list_page(rt: Runtime, f: RunFilters, cursor: str | None, limit: int = 25
              ) -> tuple[list[dict[str, Any]], str | None]:
    """One page of runs, newest first, that pass `f`; and the cursor of the next. Each
    listing page read is consumed whole (kept or filtered out), so its last key is the
    next page's cursor."""
    since, until = _time(f.since, "since"), _time(f.until, "until")
    start = decode_cursor(cursor)
    query = parse_query(f.q, "search")
    out: list[dict[str, Any]] = []
    for _ in range(MAX_PAGES):
        if query:  # a search (run_search.py): the index, from `since` on
            runs, last = rt.store.runs.find_runs(
                query, rt.clock(), workflow=f.workflow or query.filters.get("workflow"),
                status=f.status or query.filters.get("status"), since=since,
                limit=limit - len(out), start=start)
        else:
            runs, last = rt.store.runs.list_runs(
                f.workflow or query.filters.get("workflow"), rt.clock(),
                status=f.status or query.filters.get("status"),
                limit=limit - len(out), start=start)
        for r in runs:
            if since is not None and r.created_at < since:
                return out, None  # newest first: the rest are older still
            if until is not None and r.created_at > until:
                continue
            source = r.trigger.source if r.trigger is not None else "api"
            if f.trigger and source != f.trigger:
                continue
            out.append(summary(r))
        if last is None:
            return out, None
        start = last
        if len(out) >= limit:
            break
    return out, encode_cursor(start)


def _node(r: Any) -> dict[str, Any]:
    return {"run_id": r.run_id, "status": r.shown_status, "created_at": r.created_at}


def lineage(rt: Runtime, view: dict[str, Any]) -> dict[str, Any]:
    """The run's parent and children, and its rerun tree: the runs it reruns up to the
    first, and the reruns of each (among its workflow's newest LINEAGE_SCAN runs)."""
    run_id = view["run_id"]
    now = rt.clock()
    ancestors: list[dict[str, Any]] = []
    up = view.get("rerun_of")
    while up and len(ancestors) < 20:
        r = rt.store.runs.get_run(up, now)
        if r is None:
            ancestors.append({"run_id": up, "status": "expired", "created_at": None})
            break
        ancestors.append(_node(r))
        up = r.rerun_of
    root = ancestors[-1]["run_id"] if ancestors else run_id
    recent, _ = rt.store.runs.list_runs(view["workflow"], now, limit=LINEAGE_SCAN)
    below: dict[str, list[Any]] = {}
    for r in recent:
        if r.rerun_of:
            below.setdefault(r.rerun_of, []).append(r)

    def tree(rid: str, depth: int = 0) -> list[dict[str, Any]]:
        out = []
        for r in sorted(below.get(rid, []), key=lambda r: r.created_at):
            out.append({**_node(r), "depth": depth, "here": r.run_id == run_id})
            out += tree(r.run_id, depth + 1) if depth < 20 else []
        return out

    top = ancestors[-1] if ancestors else {
        "run_id": run_id, "status": view["status"], "created_at": view.get("created_at")}
    parent = view.get("parent_run_id")
    kids = rt.children.of(run_id) if view.get("kind") == "durable" else []
    found = rt.store.runs.get_runs(kids, now) if kids else {}
    return {
        "tree": [{**top, "depth": -1, "here": root == run_id}, *tree(root)],
        "reruns": bool(ancestors or below.get(run_id)),
        "parent": parent,
        "children": [summary(found[i]) for i in kids if i in found],
    }


def _view_history(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps' (or a durable run's operations') times in the view, as a history the
    waterfall reads: each its one call, from its start to its end."""
    out = []
    for op in view.get("steps") or ():
        if isinstance(op.get("started_at"), (int, float)):
            out.append({"type": "step.started", "at": op["started_at"], "step": op["step"]})
            if isinstance(op.get("finished_at"), (int, float)):
                out.append({"type": "step.succeeded", "at": op["finished_at"],
                            "step": op["step"]})
    return out


def run_page(rt: Runtime, run_id: str, body: bytes | None = None
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's view (as GET /runs/{id} answers; `body` if read already) and a history
    for its waterfall, oldest first. A DAG run that ended has its whole history read
    (queue times, every attempt, retries' backoff); one still going has its steps' times
    from the view alone, as cheap to read as a long poll: a page open on a run must not
    slow it."""
    view: dict[str, Any] = json.loads(body or rt.runs.view_body(run_id, steps=True))
    if view.get("kind") == "durable":
        # One row an operation, named uniquely (an operation's name may repeat).
        for op in view.get("steps") or ():
            op["step"] = f"{op.get('scope') or ''}#{op.get('position')} {op.get('step')}"
        return view, _view_history(view)
    if view["status"] in ENDED:
        return view, rt.runs.history(run_id)
    return view, _view_history(view)


def workflow_triggers(rt: Runtime, name: str, schedule: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """A workflow's triggers, as the Workflows page shows them: the events it starts
    on, its webhooks and its schedule (`schedule`, if read already: its expression,
    paused, next fire; None without one)."""
    wf = rt.manifest.workflows[name]
    if schedule is None and name in rt.scheduler.scheduled:
        schedule = rt.scheduler.show(name)
    return {
        "events": [t.event for t in getattr(wf, "on", None) or ()],
        "webhooks": [h for h, spec in rt.manifest.webhooks.items() if spec.workflow == name],
        "schedule": schedule,
    }


def workflow_rows(rt: Runtime, recent: int = SPARK_RUNS) -> list[dict[str, Any]]:
    """Each declared workflow: its steps (for the graph), triggers, schedule, and its
    `recent` newest runs (the success rate, the last run and the sparkline are all drawn
    from them): one listing query a workflow, and one of the schedules."""
    manifest = rt.manifest
    schedules = {s["workflow"]: s for s in rt.scheduler.list_all()}
    out = []
    now = rt.clock()
    for name, wf in manifest.workflows.items():
        runs, _ = rt.store.runs.list_runs(name, now, limit=recent)
        done = [r for r in runs if r.status.terminal]
        ok = sum(1 for r in done if r.status is RunStatus.SUCCESS)
        steps = [{"step": s, "status": "blocked",
                  "depends_on": list(getattr(spec, "depends_on", None) or [])}
                 for s, spec in (wf.steps or {}).items()] if not wf.durable else []
        out.append({
            "name": name, "description": wf.description,
            "kind": "durable" if wf.durable else "dag",
            "steps": steps,
            **workflow_triggers(rt, name, schedules.get(name)),
            "flow": flow_lines(flow_of(wf, manifest.backends)),
            "recent": len(runs), "finished": len(done), "succeeded": ok,
            "rate": None if not done else round(100 * ok / len(done)),
            "last": summary(runs[0]) if runs else None,
            "runs": [summary(r) for r in runs],
        })
    return out
