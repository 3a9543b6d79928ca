"""Write step functions: small HTTP handlers the orchestrator POSTs to.

    app = FunctionApp(secret="s3cr3t")

    @app.step("/exportOrders")
    def export_orders(req: StepRequest) -> dict[str, object]:
        return {"fileId": export(req.input["month"])}

    serve(app, "0.0.0.0", 8000)

For every call the SDK verifies the signature over the raw body, parses the body into a
`StepRequest`, runs the handler (sync handlers in a threadpool) and turns the outcome
into the HTTP answer the orchestrator understands:

    returned value        200, the JSON value is the step's output
    TerminalError         422, never retried
    RetryableError        503 (+ Retry-After), retried after the hint or the backoff
    any other exception   500, retried
    bad signature         401        malformed body   400

Error answers carry ``{"error": {"code", "message", "retryable", "details"}}``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import uvicorn
from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from functions import signing
from functions.durable.stream import OpStream
from functions.durable.workflow import Workflow, advance, play, start
from functions.failures import RetryableError, TerminalError, _DeliberateFailure
from functions.protocol import (
    DURABLE_PREFIX,
    PROTOCOL_HEADER,
    PROTOCOLS,
    DurableOp,
    DurableRequestBody,
    ErrorBody,
    JournalEntry,
    StepRequestBody,
)

__all__ = ["FunctionApp", "RetryableError", "StepRequest", "TerminalError", "serve"]

logger = logging.getLogger(__name__)

Handler = Callable[["StepRequest"], Any]
H = TypeVar("H", bound=Handler)

_BUILTIN_PATHS = frozenset({"/openapi.json", "/healthz"})
_ENTRIES: TypeAdapter[list[JournalEntry]] = TypeAdapter(list[JournalEntry])
_ROUTE = re.compile(r"/[A-Za-z0-9._~\-/]*")


@dataclass(frozen=True)
class StepRequest:
    """One call of a step, as the handler sees it."""

    input: Any
    """The run's input (or its fan-out row); None if the run has none."""
    steps: dict[str, Any]
    """Outputs of the direct dependencies by step name; empty for a root step."""
    payload: dict[str, Any]
    """The step's static payload: every top-level body key other than input/steps/run."""
    run_id: str
    workflow: str
    step: str
    attempt: int
    idempotency_key: str | None
    """Stable across every attempt of this step of this run: key side effects on it."""
    headers: Mapping[str, str] = field(repr=False)
    """The request headers (case-insensitive lookup)."""

    def output_of(self, step: str) -> Any:
        """The output of dependency `step`; a TerminalError if the workflow does not
        declare it as a direct dependency (no retry would make it appear)."""
        if step not in self.steps:
            have = ", ".join(sorted(self.steps)) or "none"
            raise TerminalError(
                f"step {self.step!r} needs the output of {step!r}, which is not among its "
                f"direct dependencies ({have}); add it to dependsOn",
                code="missing_dependency",
            )
        return self.steps[step]


@dataclass(frozen=True)
class _Registered:
    path: str
    handler: Handler
    summary: str | None
    description: str | None


class FunctionApp:
    """An ASGI app serving step routes.

    `secret` is the shared signing secret, or several during a rotation; None accepts
    unsigned requests (local development only). `tolerance` is how far (seconds) a
    request's timestamp may be from `clock()` in either direction. `durable_protocols`
    are the versions of the durable protocol its workflows answer in (functions/
    protocol.py): the newest the orchestrator also speaks is used; (1,) serves them as an
    SDK that predates version 2 would."""

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
        self._registered: dict[str, _Registered] = {}
        self._workflows: dict[str, Workflow] = {}
        self._app = Starlette(
            routes=[
                Route("/openapi.json", self._serve_openapi, methods=["GET"]),
                Route("/healthz", self._serve_health, methods=["GET"]),
            ],
            exception_handlers={HTTPException: _http_error},
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
            entry = _Registered(path, handler, summary or first_line, doc)
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
                return _error(401, "bad_signature", exc.reason, retryable=False)
        return None

    async def _handle_workflow(self, wf: Workflow, request: Request) -> Response:
        raw = await request.body()
        if self._max_body is not None and len(raw) > self._max_body:
            return _error(413, "body_too_large",
                          f"request body of {len(raw)} bytes is over {self._max_body}", False)
        refused = self._verify(raw, request.headers)
        if refused is not None:
            return refused
        try:
            data = json.loads(raw)
        except ValueError as exc:
            return _error(400, "invalid_json", f"request body is not valid JSON: {exc}", False)
        try:
            body = DurableRequestBody.model_validate(data)
        except ValidationError as exc:
            problems = json.loads(exc.json(include_url=False, include_input=False))
            return _error(400, "invalid_request", f"invalid workflow call: {exc}", False, problems)
        if body.journal_ref is not None:
            try:
                fetched = await _fetch_journal(str(body.journal_ref.get("url", "")))
                body = body.model_copy(update={"journal": _ENTRIES.validate_python(fetched)})
            except (httpx.HTTPError, ValueError) as exc:
                return _error(503, "journal_unavailable",
                              f"could not fetch the journal by reference: {exc}", True)
        version = min(body.protocol, max(self._protocols))
        if version >= 2 and body.mode == "run":
            async def run(sink: Callable[[DurableOp], None]) -> float | None:
                call, deadline = start(wf, body, version, sink)
                await play(wf, call, body.input, deadline)
                return deadline

            return OpStream(run, {PROTOCOL_HEADER: str(version)})  # type: ignore[return-value]
        answer = await advance(wf, body, protocol=1)
        return Response(_dumps(answer), status_code=200, media_type="application/json",
                        headers={PROTOCOL_HEADER: "1"})

    async def _handle(self, entry: _Registered, request: Request) -> Response:
        raw = await request.body()
        headers = request.headers
        refused = self._verify(raw, headers)
        if refused is not None:
            return refused

        parsed = _parse_body(raw)
        if isinstance(parsed, Response):
            return parsed
        key = headers.get(signing.IDEMPOTENCY_HEADER) or None
        signed_key = parsed.run.idempotency_key
        if key is not None and signed_key is not None and key != signed_key:
            return _error(
                400,
                "invalid_request",
                f"{signing.IDEMPOTENCY_HEADER} header {key!r} does not match "
                f"run.idempotency_key {signed_key!r} in the body",
                retryable=False,
            )
        req = StepRequest(
            input=parsed.input,
            steps=dict(parsed.steps or {}),
            payload=parsed.payload,
            run_id=parsed.run.run_id,
            workflow=parsed.run.workflow,
            step=parsed.run.step,
            attempt=parsed.run.attempt,
            idempotency_key=key or signed_key,
            headers=headers,
        )

        try:
            result = await _invoke(entry.handler, req)
        except _DeliberateFailure as exc:
            extra = {}
            if isinstance(exc, RetryableError) and exc.retry_after is not None:
                extra["Retry-After"] = str(math.ceil(exc.retry_after))
            return _error(exc.status_code, exc.code, exc.message, exc.retryable, exc.details, extra)
        except Exception as exc:
            # Exception, not BaseException: cancellation and shutdown must propagate.
            logger.exception("%s failed (run %s, step %s)", entry.path, req.run_id, req.step)
            return _error(500, "unhandled_exception", f"{type(exc).__name__}: {exc}", True)

        try:
            content = _dumps(result)
        except Exception as exc:
            logger.exception("%s returned a value that is not JSON", entry.path)
            return _error(
                500,
                "invalid_output",
                f"{entry.path} returned {type(result).__name__}, which is not JSON: {exc}",
                retryable=True,
            )
        return Response(content, status_code=200, media_type="application/json")

    # -- built-in routes --------------------------------------------------------------

    async def _serve_openapi(self, request: Request) -> Response:
        return JSONResponse(self.openapi())

    async def _serve_health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "routes": list(self._registered),
                             "workflows": list(self._workflows)})

    def openapi(self) -> dict[str, Any]:
        """An OpenAPI 3.1 document with one POST operation per registered route."""
        ref = "#/components/schemas/{model}"
        request_schema = StepRequestBody.model_json_schema(ref_template=ref)
        error_schema = ErrorBody.model_json_schema(ref_template=ref)
        schemas: dict[str, Any] = {
            **request_schema.pop("$defs", {}),
            **error_schema.pop("$defs", {}),
            "StepRequest": request_schema,
            "ErrorBody": error_schema,
        }

        def error(description: str) -> dict[str, Any]:
            return {
                "description": description,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
                },
            }

        responses: dict[str, Any] = {
            "200": {
                "description": "Success; the JSON body is the step's output.",
                "content": {"application/json": {"schema": {}}},
            },
            "400": error("The body is not JSON or not a step request."),
            "422": error("Terminal failure: the orchestrator will not retry."),
            "500": error("Unhandled error in the handler: retried."),
            "503": {
                **error("Retryable failure."),
                "headers": {
                    "Retry-After": {
                        "description": "Seconds to wait before the next attempt.",
                        "schema": {"type": "integer", "minimum": 0},
                    }
                },
            },
        }
        parameters: list[dict[str, Any]] = [
            _header(signing.IDEMPOTENCY_HEADER, "Same for every attempt of a step.", False),
            _header(signing.RUN_ID_HEADER, "Run id, for tracing.", False),
            _header(signing.STEP_HEADER, "Step name, for tracing.", False),
            _header(signing.ATTEMPT_HEADER, "Attempt number, for tracing.", False),
        ]
        if self._secrets is not None:
            responses["401"] = error("Missing, stale or invalid signature.")
            parameters += [
                _header(signing.TIMESTAMP_HEADER, "Unix seconds when the call was signed.", True),
                _header(signing.SIGNATURE_HEADER, "v1=<hex HMAC-SHA256>, see signing.", True),
            ]
        paths: dict[str, Any] = {}
        for entry in self._registered.values():
            operation: dict[str, Any] = {
                "operationId": _operation_id(entry.path),
                "parameters": parameters,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/StepRequest"}}
                    },
                },
                "responses": dict(sorted(responses.items())),
            }
            if entry.summary:
                operation["summary"] = entry.summary
            if entry.description:
                operation["description"] = entry.description
            paths[entry.path] = {"post": operation}
        for wf in self._workflows.values():
            paths[DURABLE_PREFIX + wf.name] = {"post": {
                "operationId": _operation_id(DURABLE_PREFIX + wf.name),
                "summary": f"Durable workflow {wf.name}: one call (replay, then advance)",
                "x-durable-workflow": {**wf.describe(), "protocols": list(self._protocols)},
                "parameters": parameters,
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/DurableRequest"}}}},
                "responses": {
                    "200": {"description": "The operations for the orchestrator to commit.",
                            "content": {"application/json": {"schema": {}}}},
                    "400": error("The body is not a workflow call."),
                    **({"401": responses["401"]} if "401" in responses else {}),
                },
            }}
        if self._workflows:
            durable = DurableRequestBody.model_json_schema(ref_template=ref)
            schemas.update(durable.pop("$defs", {}))
            schemas["DurableRequest"] = durable
        return {
            "openapi": "3.1.0",
            "info": {"title": self.title, "version": "1"},
            "paths": paths,
            "components": {"schemas": schemas},
        }


def serve(app: FunctionApp, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve `app` with uvicorn until interrupted (blocking)."""
    uvicorn.run(app, host=host, port=port, lifespan="off")


# -- helpers --------------------------------------------------------------------------


async def _fetch_journal(url: str) -> list[Any]:
    """A journal sent by reference (a presigned URL of the orchestrator's blob store)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"journal_ref.url {url[:80]!r} is not an http(s) URL")
    async with httpx.AsyncClient(timeout=30.0) as client:
        resp = await client.get(url)
        resp.raise_for_status()
    journal = resp.json()
    if not isinstance(journal, list):
        raise ValueError("the journal by reference is not a list")
    return journal


async def _invoke(handler: Handler, req: StepRequest) -> Any:
    if _is_async(handler):
        result = await handler(req)
    else:
        result = await run_in_threadpool(handler, req)
    if inspect.isawaitable(result):  # a sync wrapper around a coroutine function
        result = await result
    return result


def _is_async(obj: object) -> bool:
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    # A callable object whose __call__ is async.
    call = None if inspect.isroutine(obj) else inspect.getattr_static(type(obj), "__call__", None)
    return inspect.iscoroutinefunction(call)


def _parse_body(raw: bytes) -> StepRequestBody | Response:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        return _error(400, "invalid_json", f"request body is not valid JSON: {exc}", False)
    if not isinstance(data, dict):
        return _error(
            400,
            "invalid_request",
            f"request body must be a JSON object, got {type(data).__name__}",
            False,
        )
    try:
        return StepRequestBody.model_validate(data)
    except ValidationError as exc:
        problems = json.loads(exc.json(include_url=False, include_input=False))
        summary = "; ".join(
            f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}" for problem in problems
        )
        return _error(400, "invalid_request", f"invalid step request: {summary}", False, problems)


def _dumps(value: Any) -> bytes:
    plain = to_jsonable_python(value)
    return json.dumps(plain, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _error(
    status: int,
    code: str,
    message: str,
    retryable: bool,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    info: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if details is not None:
        try:
            info["details"] = to_jsonable_python(details)
        except Exception:  # details are context; an odd one must not hide the error
            info["details"] = repr(details)
    return Response(
        _dumps({"error": info}), status_code=status, media_type="application/json", headers=headers
    )


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(
        exc.status_code,
        _HTTP_CODES.get(exc.status_code, "http_error"),
        f"{request.method} {request.url.path}: {exc.detail}",
        retryable=False,
        headers=exc.headers,
    )


def _header(name: str, description: str, required: bool) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "description": description,
        "schema": {"type": "string"},
    }


def _operation_id(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "root"
