"""Write step functions: small HTTP handlers the orchestrator POSTs to.

    from functions.sdk import FunctionApp, StepRequest, serve

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

The package, one module per concept: `app` (FunctionApp), `request` (StepRequest),
`handlers` (running one handler), `responses` (the answers), `openapi` (discovery),
`failures`, `signing`, `protocol` (the wire format), `serving` (uvicorn), `lambda_adapter`,
and `durable/` (durable workflows written as Python).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from functions.sdk.failures import RetryableError, TerminalError

__all__ = ["FunctionApp", "RetryableError", "StepRequest", "TerminalError", "serve"]

if TYPE_CHECKING:
    from functions.sdk.app import FunctionApp
    from functions.sdk.request import StepRequest
    from functions.sdk.serving import serve
else:
    # Imported on first use, not with the package: the orchestrator's worker imports
    # `functions.sdk.protocol` and `.signing` (which loads this package) and must not pay
    # for Starlette, uvicorn and the durable runtime.
    _HOMES = {"FunctionApp": "functions.sdk.app", "StepRequest": "functions.sdk.request",
              "serve": "functions.sdk.serving"}

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
