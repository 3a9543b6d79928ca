"""The dashboard's bulk actions (services/bulk.py): the runs page's form names the runs
(those ticked, or every run its filters match) and the action; a confirmation page says
how many runs it takes; the job's page follows its progress and shows what it did to
each run."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from orchestrator.api.state import api_state
from orchestrator.api.ui import reads
from orchestrator.api.ui.render import page
from orchestrator.errors import NotFound, OrchestratorError, UsageError

__all__ = ["confirm", "job", "spec_of", "start"]

# A report page lists at most this many runs.
REPORT_ROWS = 500


def spec_of(form: Any, workflows: list[str]) -> dict[str, Any]:
    """The bulk action a runs page's form asks for; UsageError naming the field."""
    action = str(form.get("action") or "")
    spec: dict[str, Any] = {"action": action}
    if form.get("which") == "matching":
        f = reads.RunFilters.of({k: str(form.get(k) or "") for k in reads.RunFilters.FIELDS},
                                workflows)
        if f.problems:
            raise UsageError(f.problems[0])
        if f.since or f.until:
            raise UsageError("created after/before: a bulk action over every matching run"
                             " takes the search, workflow, status and trigger; tick the runs"
                             " of a time range instead")
        q = " ".join(x for x in (f.q, f"trigger.source = {f.trigger}" if f.trigger else "")
                     if x)
        spec.update({k: v for k, v in (("q", q), ("workflow", f.workflow),
                                       ("status", f.status)) if v})
    else:
        ids = [str(r) for r in form.getlist("run_id") if r]
        if not ids:
            raise UsageError("tick the runs to act on, or choose every run matching the"
                             " filters")
        spec["run_ids"] = ids
    if action == "cancel" and str(form.get("reason") or "").strip():
        spec["reason"] = str(form.get("reason")).strip()
    raw = str(form.get("input") or "").strip()
    if raw:
        if action != "rerun":
            raise UsageError(f"new input: only a rerun takes one, not a {action}")
        try:
            spec["input"] = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"new input: not JSON ({exc.args[0]})") from None
    return spec


async def start(request: Request) -> Response:
    """The runs page's post: the confirmation page, with the count."""
    rt = api_state(request).rt
    form = await request.form()
    try:
        spec = spec_of(form, list(rt.manifest.workflows))
        counted = await run_in_threadpool(rt.bulk.count, spec)
    except OrchestratorError as exc:
        return RedirectResponse(f"/ui/runs?{urlencode({'problem': exc.message})}",
                                status_code=303)
    # The job's id is chosen here: a confirmation sent twice (a double click, the form
    # sent again) is one job.
    return page(request, "bulk_confirm.html", spec=spec, counted=counted,
                spec_json=json.dumps(spec), job_id=rt.bulk.new_job_id(), problem=None)


async def confirm(request: Request) -> Response:
    """The confirmation page's post: the spec it showed, started."""
    rt = api_state(request).rt
    form = await request.form()
    try:
        spec = json.loads(str(form.get("spec") or "{}"))
        expected = int(str(form.get("expected") or "0")) or None
        started, _ = await run_in_threadpool(
            lambda: rt.bulk.start(spec, str(form.get("job_id") or "") or None,
                                  expected=expected))
    except (OrchestratorError, ValueError) as exc:
        message = exc.message if isinstance(exc, OrchestratorError) else "spec: not JSON"
        return RedirectResponse(f"/ui/runs?{urlencode({'problem': message})}",
                                status_code=303)
    return RedirectResponse(f"/ui/bulk/{started.job_id}", status_code=303)


async def job(request: Request) -> Response:
    rt = api_state(request).rt
    job_id = request.path_params["job_id"]

    def read() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        found = rt.bulk.get(job_id)
        runs, _ = rt.store.bulk.report(job_id, rt.clock(), limit=REPORT_ROWS)
        return found.to_json(), [o.to_json() for o in runs]

    try:
        view, runs = await run_in_threadpool(read)
    except NotFound as exc:
        return page(request, "missing.html", status_code=404, what=exc.message, problem=None)
    return page(request, "bulk.html", job=view, runs=runs, problem=None)
