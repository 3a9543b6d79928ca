"""Who may see the dashboard: the API's own bearer keys, carried by the browser in an
HttpOnly, SameSite=Strict cookie (set by pasting a key at /ui/login, or by following a
one-time link that `orchestrator dev` prints). With ORCH_API_AUTH=off it is open, as the
API is. A form post must come from the dashboard's own origin (the cookie's SameSite
already keeps other sites' posts from carrying it; the Origin check is a second lock)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from orchestrator.api.state import api_state
from orchestrator.errors import Unauthorized
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.services.coordination.approvals import ANONYMOUS

__all__ = ["COOKIE", "guarded", "set_session", "signed_in", "who"]

COOKIE = "orch_ui"
SESSION_SECONDS = 12 * 3600
Handler = Callable[[Request], Awaitable[Response]]


async def signed_in(request: Request) -> bool:
    state = api_state(request)
    if not state.rt.settings.api_auth:
        return True
    key = request.cookies.get(COOKIE)
    if not key:
        return False
    try:
        await run_in_threadpool(state.check_key, f"Bearer {key}")
    except Unauthorized:
        return False
    return True


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def guarded(handler: Handler) -> Handler:
    """`handler` for a signed-in browser; others go to the login page (a GET) or get a
    401 (anything else)."""
    async def wrapped(request: Request) -> Response:
        if request.method != "GET" and not _same_origin(request):
            return Response("cross-origin form posts are refused", status_code=403)
        if await signed_in(request):
            return await handler(request)
        if request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(target)}", status_code=303)
        return Response("sign in at /ui/login", status_code=401)

    return wrapped


def set_session(response: Response, key: str, request: Request) -> None:
    response.set_cookie(COOKIE, key, max_age=SESSION_SECONDS, path="/ui", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")


def who(request: Request) -> str:
    """The name of the API key the browser signed in with (who answers an approval);
    `anonymous` when the dashboard is open (ORCH_API_AUTH=off). Call it in a thread."""
    rt = api_state(request).rt
    key = request.cookies.get(COOKIE)
    if not rt.settings.api_auth or not key:
        return ANONYMOUS
    return ApiKeys(rt.control).check(key, rt.clock()) or ANONYMOUS
