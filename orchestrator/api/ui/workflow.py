"""The dashboard's page of one workflow (`/ui/workflows/{workflow}?window=day|week`): what
`GET /workflows/{name}/stats` reads (api/workflow_stats.py), drawn as server-side SVG
charts (charts.py) with a table of the same numbers, its failures grouped by error code
and its triggers."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.api.state import api_state
from orchestrator.api.ui.charts import bucket_label, latency_chart, rate_chart, runs_chart, seconds
from orchestrator.api.ui.render import page
from orchestrator.api.workflow_stats import read_stats, window_of
from orchestrator.errors import NotFound, UsageError

__all__ = ["workflow"]


async def workflow(request: Request) -> Response:
    rt = api_state(request).rt
    name = request.path_params["workflow"]
    try:
        window = window_of(request.query_params.get("window"))
    except UsageError:
        window = window_of("day")
    try:
        stats = await run_in_threadpool(read_stats, rt, name, window)
    except NotFound as exc:
        return page(request, "missing.html", status_code=404, what=exc.message)
    every = stats["bucket_seconds"]
    buckets = stats["buckets"]
    for b in buckets:
        b["label"] = bucket_label(b["start"], every)
    return page(request, "workflow.html", wf=rt.manifest.workflows[name], name=name,
                stats=stats, window=window.name, seconds=seconds,
                charts={"runs": runs_chart(buckets, every), "rate": rate_chart(buckets, every),
                        "latency": latency_chart(buckets, every)})
