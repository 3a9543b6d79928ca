"""`FunctionApp`: the ASGI app that serves step routes and durable workflows, checks each
call's size and signature, and hands it on (`handlers` for a step, `durable.endpoint`
for a workflow). The package's docstring shows it in use."""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from functions.sdk import handlers, signing, tracing
from functions.sdk.durable import endpoint
from functions.sdk.durable.workflow import Workflow
from functions.sdk.handlers import Handler, StepRoute
from functions.sdk.openapi import document
from functions.sdk.protocol import DURABLE_PREFIX, PROTOCOLS
from functions.sdk.request import read
from functions.sdk.responses import error, http_error

__all__ = ["FunctionApp"]

H = TypeVar("H", bound=Handler)

_BUILTIN_PATHS = frozenset({"/openapi.json", "/healthz"})
_ROUTE = re.compile(r"/[A-Za-z0-9._~\-/]*")


class FunctionApp:
    """An ASGI app serving step routes.

    `secret` is the shared signing secret, or several during a rotation; None accepts
    unsigned requests (local development only). `tolerance` is how far (seconds) a
    request's timestamp may be from `clock()` in either direction. `durable_protocols`
    are the versions of the durable protocol its workflows answer in (`protocol`): the
    newest the orchestrator also speaks is used; (1,) serves them as an SDK that predates
    version 2 would."""

    def __init__(
        self,
        secret: str | Sequence[str] | None,
        *,
        title: str = "functions",
        tolerance: float = signing.DEFAULT_TOLERANCE,
        clock: Callable[[], float] = time.time,
        max_body: int | None = None,
        durable_protocols: Sequence[int] = PROTOCOLS,
    ) -> None:
        unknown = sorted(set(durable_protocols) - set(PROTOCOLS))
        if not durable_protocols or unknown:
            raise ValueError(f"durable_protocols must be some of {list(PROTOCOLS)},"
                             f" got {list(durable_protocols)!r}")
        self._protocols = tuple(sorted(set(durable_protocols)))
        if secret is None:
            self._secrets: tuple[str, ...] | None = None
        else:
            self._secrets = (secret,) if isinstance(secret, str) else tuple(secret)
            if not self._secrets or not all(self._secrets):
                raise ValueError("secret must be a non-empty string, several, or None")
        if tolerance <= 0:
            raise ValueError(f"tolerance must be positive, got {tolerance!r}")
        self.title = title
        # The largest request body accepted (413 past it), as a host would limit it.
        self._max_body = max_body
        self._tolerance = tolerance
        self._clock = clock
        self._registered: dict[str, StepRoute] = {}
        self._workflows: dict[str, Workflow] = {}
        self._resolve: Callable[[str], Workflow | None] | None = None
        self._app = Starlette(
            routes=[
                Route("/openapi.json", self._serve_openapi, methods=["GET"]),
                Route("/healthz", self._serve_health, methods=["GET"]),
            ],
            exception_handlers={HTTPException: http_error},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    @property
    def signed(self) -> bool:
        """Whether requests must carry a valid signature."""
        return self._secrets is not None

    @property
    def routes(self) -> tuple[str, ...]:
        """The registered step routes, in registration order."""
        return tuple(self._registered)

    @property
    def workflows(self) -> tuple[str, ...]:
        """The durable workflows served, in registration order."""
        return tuple(self._workflows)

    def workflow(self, *workflows: Workflow) -> None:
        """Serve durable workflows (declared with `functions.durable.workflow`): each at
        POST /durable/<name>, published in /openapi.json and /healthz."""
        for wf in workflows:
            if not isinstance(wf, Workflow):
                raise TypeError(f"{wf!r} is not a workflow: declare it with @workflow(name)")
            path = DURABLE_PREFIX + wf.name
            if not _ROUTE.fullmatch(path):
                raise ValueError(f"workflow name {wf.name!r} must use URL-safe characters")
            if wf.name in self._workflows or path in self._registered:
                raise ValueError(f"workflow {wf.name!r} is already served")
            self._workflows[wf.name] = wf

            async def endpoint(request: Request, wf: Workflow = wf) -> Response:
                return await self._handle_workflow(wf, request)

            self._app.router.routes.append(Route(path, endpoint, methods=["POST"]))

    def resolve_workflows(self, resolve: Callable[[str], Workflow | None]) -> None:
        """Serve POST /durable/<name> also for names `workflow()` did not list:
        `resolve(name)` gives the workflow to answer with (None: 404). A script host
        serves any script a call names this way."""
        first = self._resolve is None
        self._resolve = resolve
        if first:
            self._app.router.routes.append(
                Route(DURABLE_PREFIX + "{name:path}", self._serve_resolved, methods=["POST"]))

    async def _serve_resolved(self, request: Request) -> Response:
        name = str(request.path_params.get("name", ""))
        wf = self._workflows.get(name) or (self._resolve(name) if self._resolve else None)
        if wf is None:
            return error(404, "unknown_workflow", f"no durable workflow {name!r} is served",
                         False)
        return await self._handle_workflow(wf, request)

    def step(self, path: str, summary: str | None = None) -> Callable[[H], H]:
        """Register the decorated function as the handler of POST `path`.

        The handler takes a StepRequest and returns any JSON-serialisable value (pydantic
        models and dataclasses included); it may be sync (run in a threadpool) or async."""
        if not _ROUTE.fullmatch(path):
            raise ValueError(f"route {path!r} must start with '/' and use URL-safe characters")
        if path in _BUILTIN_PATHS:
            raise ValueError(f"route {path!r} is reserved by the SDK")
        if path in self._registered:
            raise ValueError(f"route {path!r} is already registered")
        if path.startswith(DURABLE_PREFIX):
            raise ValueError(f"routes under {DURABLE_PREFIX} are the durable workflows'")

        def register(handler: H) -> H:
            doc = inspect.getdoc(handler)
            first_line = doc.strip().splitlines()[0] if doc else None
            entry = StepRoute(path, handler, summary or first_line, doc)
            self._registered[path] = entry

            async def endpoint(request: Request) -> Response:
                return await self._handle(entry, request)

            self._app.router.routes.append(Route(path, endpoint, methods=["POST"]))
            return handler

        return register

    # -- one call ---------------------------------------------------------------------

    def _verify(self, raw: bytes, headers: Mapping[str, str]) -> Response | None:
        if self._secrets is not None:
            try:
                signing.verify(
                    self._secrets,
                    headers.get(signing.TIMESTAMP_HEADER),
                    headers.get(signing.SIGNATURE_HEADER),
                    raw,
                    now=self._clock(),
                    tolerance=self._tolerance,
                )
            except signing.SignatureError as exc:
                return error(401, "bad_signature", exc.reason, retryable=False)
        return None

    async def _handle_workflow(self, wf: Workflow, request: Request) -> Response:
        raw = await request.body()
        if self._max_body is not None and len(raw) > self._max_body:
            return error(413, "body_too_large",
                         f"request body of {len(raw)} bytes is over {self._max_body}", False)
        refused = self._verify(raw, request.headers)
        if refused is not None:
            return refused
        return await endpoint.answer(wf, raw, self._protocols, request.headers)

    async def _handle(self, route: StepRoute, request: Request) -> Response:
        raw = await request.body()
        refused = self._verify(raw, request.headers)
        if refused is not None:
            return refused
        req = read(raw, request.headers)
        if isinstance(req, Response):
            return req
        with tracing.handler_span(request.headers, f"step {route.path}", {
                "orchestrator.run_id": req.run_id, "orchestrator.workflow": req.workflow,
                "orchestrator.step": req.step, "orchestrator.attempt": req.attempt}):
            return await handlers.answer(route, req)

    # -- built-in routes --------------------------------------------------------------

    async def _serve_openapi(self, request: Request) -> Response:
        return JSONResponse(self.openapi())

    async def _serve_health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "routes": list(self._registered),
                             "workflows": list(self._workflows)})

    def openapi(self) -> dict[str, Any]:
        """An OpenAPI 3.1 document with one POST operation per registered route."""
        return document(self.title, self._registered.values(),
                                tuple(self._workflows.values()), self._protocols,
                                signed=self._secrets is not None)
