"""The dashboard's pages (GET): sign-in, runs, a run, workflows, events and the
dead-letter queue. Each renders a template from what ui/reads.py reads."""

from __future__ import annotations

import time
from html import escape
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from orchestrator.adapters.invoker import idempotency_key
from orchestrator.api.state import api_state
from orchestrator.api.ui import parts, reads
from orchestrator.api.ui.layout import graph, waterfall
from orchestrator.api.ui.reads import ENDED
from orchestrator.api.ui.render import fragment, page
from orchestrator.api.ui.session import set_session, signed_in
from orchestrator.api.ui.sparks import sparkline
from orchestrator.errors import NotFound, Unauthorized, UsageError
from orchestrator.presentation.step_inputs import sent_to

__all__ = ["approvals", "dlq", "events", "history", "index", "login", "login_post", "logout", "run",
           "run_live_html", "runs", "runs_rows_html", "workflows"]

FILTER_COOKIE = "orch_ui_runs"
LIVE_QUERY = ("step", "from", "to", "gaps")  # what a run page's live part is drawn by


def _next(request: Request) -> str:
    target = request.query_params.get("next") or "/ui/runs"
    # Only a path of the dashboard's own: never an open redirect.
    return target if target.startswith("/ui") and not target.startswith("//") else "/ui/runs"


async def index(request: Request) -> Response:
    return RedirectResponse("/ui/runs", status_code=303)


async def login(request: Request) -> Response:
    ui = request.app.state.ui
    token = request.query_params.get("token")
    if token:
        rt = api_state(request).rt
        key = await run_in_threadpool(ui.logins.spend, token, rt.clock())
        if key is None:
            return page(request, "login.html", 401, signing_in=True, next=_next(request),
                        problem="This sign-in link was used already or has expired. "
                                "Paste an API key (`orchestrator keys create`), or restart "
                                "`orchestrator dev` for a new link.")
        response = RedirectResponse(_next(request), status_code=303)
        set_session(response, key, request)
        return response
    if await signed_in(request):
        return RedirectResponse(_next(request), status_code=303)
    return page(request, "login.html", signing_in=True, next=_next(request), problem=None)


async def login_post(request: Request) -> Response:
    form = await request.form()
    key = str(form.get("key") or "").strip()
    state = api_state(request)
    try:
        await run_in_threadpool(state.check_key, f"Bearer {key}")
    except Unauthorized as exc:
        return page(request, "login.html", 401, signing_in=True, next=_next(request),
                    problem=exc.message)
    response = RedirectResponse(_next(request), status_code=303)
    set_session(response, key, request)
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie("orch_ui", path="/ui")
    return response


def _filters(request: Request) -> reads.RunFilters:
    names = list(api_state(request).rt.manifest.workflows)
    return reads.RunFilters.of(dict(request.query_params), names)


async def runs(request: Request) -> Response:
    rt = api_state(request).rt
    q = request.query_params
    remembered = request.cookies.get(FILTER_COOKIE)
    if not q and remembered:  # the filters last used, kept in the URL again
        return RedirectResponse(f"/ui/runs?{remembered}", status_code=303)
    f = _filters(request)
    if f.run_id:
        found = await run_in_threadpool(_exists, rt, f.run_id)
        if found:
            return RedirectResponse(f"/ui/runs/{f.run_id}", status_code=303)
        f.problems.append(f"run id: no run {f.run_id!r} (it may have expired)")
    cursor = q.get("cursor")
    try:
        rows, next_cursor = await run_in_threadpool(reads.list_page, rt, f, cursor)
    except UsageError as exc:
        f.problems.append(exc.message)
        rows, next_cursor = [], None
    response = page(request, "runs.html", filters=f, rows=rows, next_cursor=next_cursor,
                    cursor=cursor, workflows=list(rt.manifest.workflows),
                    statuses=reads.STATUSES, triggers=reads.TRIGGERS,
                    live_query=f.query(), problem=q.get("problem"))
    if "all" in q or f.any:
        response.set_cookie(FILTER_COOKIE, f.query(), path="/ui", httponly=True,
                            samesite="strict", max_age=90 * 24 * 3600)
    return response


def _exists(rt: Any, run_id: str) -> bool:
    try:
        rt.runs.get(run_id)
    except NotFound:
        return False
    return True


def runs_rows_html(rt: Any, query: dict[str, str]) -> str:
    """The runs table's body for `query`'s filters (its first page): the live list."""
    f = reads.RunFilters.of(query, list(rt.manifest.workflows))
    rows, _ = reads.list_page(rt, f, None)
    return fragment("_runs_rows.html", rows=rows, filters=f)


def _window(q: Any) -> tuple[tuple[float, float] | None, bool]:
    try:
        t0, t1 = float(q.get("from", "")), float(q.get("to", ""))
        window: tuple[float, float] | None = (t0, t1) if t1 > t0 >= 0 else None
    except ValueError:
        window = None
    return window, q.get("gaps", "collapse") != "show"


def run_live_html(rt: Any, run_id: str, query: dict[str, str], body: bytes | None = None
                  ) -> tuple[str, dict[str, Any]]:
    """The run page's live part (status, graph, timeline, the selected step), and the
    view it shows (`body`: the run's view as GET /runs/{id} sends it, if read already)."""
    view, history = reads.run_page(rt, run_id, body)
    window, collapse = _window(query)
    fall = waterfall(view, history, time.time(), window=window, collapse=collapse)
    selected = query.get("step") or ""
    step = next((s for s in view.get("steps") or () if s["step"] == selected), None)
    if step is None:
        failed = [s for s in view.get("steps") or () if s.get("status") == "failed"]
        step = failed[0] if failed else None
    if step is not None and view.get("kind") != "durable":
        step = _step_detail(rt, view, step)
    base = {k: v for k, v in query.items() if k in LIVE_QUERY}

    def link(**change: Any) -> str:
        merged = {**base, **{k: str(v) for k, v in change.items() if v is not None}}
        for k in [k for k, v in change.items() if v is None]:
            merged.pop(k, None)
        return f"/ui/runs/{run_id}?{urlencode(merged)}" if merged else f"/ui/runs/{run_id}"

    mid, half = (fall.t0 + fall.t1) / 2, (fall.t1 - fall.t0) / 2
    zoom = {
        "in": link(**{"from": f"{max(0.0, mid - half / 2):.3f}", "to": f"{mid + half / 2:.3f}"}),
        "out": link(**{"from": f"{max(0.0, mid - half * 2):.3f}",
                       "to": f"{min(fall.span, mid + half * 2):.3f}"}),
        "reset": link(**{"from": None, "to": None}),
        "gaps": link(gaps="show" if collapse else None),
        "collapse": collapse,
    }
    steps_history = [e for e in history if step is not None and e.get("step") == step["step"]]
    html = fragment("_run_live.html", view=view, graph=None if view.get("kind") == "durable"
                    else graph(view.get("steps") or ()), fall=fall, step=step, zoom=zoom,
                    link=link, step_history=steps_history,
                    terminal=view["status"] in ENDED)
    return html, view


def _step_detail(rt: Any, view: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """A DAG step as its page shows it: what it was sent (the run's input and its
    dependencies' outputs), its payload (read from its row) and its idempotency key."""
    row = rt.store.steps.get_step(view["run_id"], step["step"])
    return {**step, "payload": None if row is None else row.payload,
            "inputs": sent_to(view, step),
            "idempotency_key": idempotency_key(view["run_id"], step["step"])}


async def run(request: Request) -> Response:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]
    query = dict(request.query_params)

    def read() -> tuple[str, dict[str, Any], dict[str, Any]]:
        live, view = run_live_html(rt, run_id, query)
        return live, view, reads.lineage(rt, view)

    try:
        live, view, family = await run_in_threadpool(read)
    except NotFound as exc:
        return page(request, "missing.html", 404, what=exc.message)
    drawn = parts.draw(view, family)
    # Its stream is told what the page shows (parts.py): it sends only what changed.
    stream = {k: v for k, v in query.items() if k in LIVE_QUERY}
    stream["shown"] = parts.shown(drawn)
    return page(request, "run.html", view=view, live=live, parts=drawn,
                live_query=urlencode(stream), message=query.get("done"),
                problem=query.get("problem"))


async def history(request: Request) -> Response:
    """A run's whole history, fetched when its section is opened."""
    rt = api_state(request).rt
    try:
        rows = await run_in_threadpool(rt.runs.history, request.path_params["run_id"])
    except NotFound as exc:
        return HTMLResponse(f"<p>{escape(exc.message)}</p>", status_code=404)
    return HTMLResponse(fragment("_history.html", history=rows))


async def workflows(request: Request) -> Response:
    rt = api_state(request).rt
    rows = await run_in_threadpool(reads.workflow_rows, rt)
    now = time.time()
    for wf in rows:
        wf["graph"] = graph(wf["steps"]) if wf["steps"] else None
        wf["spark"] = sparkline(wf["runs"], now)
    return page(request, "workflows.html", workflows=rows,
                message=request.query_params.get("done"),
                problem=request.query_params.get("problem"))


async def events(request: Request) -> Response:
    rt = api_state(request).rt
    names = sorted({t.event for wf in rt.manifest.workflows.values()
                    for t in getattr(wf, "on", None) or ()})
    name = request.query_params.get("name") or (names[0] if names else "")
    recent = await run_in_threadpool(rt.events.recent, name, 20) if name else []
    return page(request, "events.html", names=names, name=name, recent=recent,
                message=request.query_params.get("done"),
                problem=request.query_params.get("problem"))


async def dlq(request: Request) -> Response:
    letters = request.app.state.ui.dead_letters

    def read() -> tuple[int, list[Any]]:
        return letters.count(), letters.look()

    count, shown = await run_in_threadpool(read)
    return page(request, "dlq.html", count=count, letters=shown,
                message=request.query_params.get("done"),
                problem=request.query_params.get("problem"))


async def approvals(request: Request) -> Response:
    rt = api_state(request).rt
    approver = request.query_params.get("approver") or None
    problem: str | None = request.query_params.get("problem")
    try:
        gates = await run_in_threadpool(rt.approvals.inbox, approver, 200)
    except UsageError as exc:
        gates, problem = [], exc.message
    return page(request, "approvals.html", gates=gates, approver=approver or "",
                now=rt.clock(), message=request.query_params.get("done"), problem=problem)
