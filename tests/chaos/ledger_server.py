"""The harness's function server: a Starlette app on uvicorn, in a process of its own,
that answers every step call and records it in an effect ledger (JSON lines).

    python -m tests.chaos.ledger_server --port P --ledger calls.jsonl --seed N \
        --secret S --step-timeout 3 --calm calm.flag

Every call is two ledger lines: `recv` when it arrives (run, step, attempt, idempotency
key, digests of the body and of each dependency output it was given, whether the
signature held) and `done` just *before* the answer leaves (status, the fault played,
the digest of the output). Writing `done` first means the ledger may claim an answer a
crash then kept from the worker, never the reverse: a committed output the ledger does
not know is a real violation.

Routes (the step's `payload` tunes them):

- `/work`: a small JSON output with a fresh nonce; at rate `--fault-rate`, a fault
  instead (below); `sleep` delays the answer (a step in flight when its run halts);
- `/flaky`: 503 while `attempt <= fail` (with `Retry-After` when `retry_after` is set),
  then `/work`'s output;
- `/fail`: 422 with an SDK-style terminal error body: never retried;
- `/big`: `bytes` of JSON (over the inline limit: the output goes to the blob bucket);
- `/huge`: `bytes` of JSON over the output hard cap: the step fails `output_too_large`;
- `/nonjson`: 200 with a text body: the step fails `invalid_output`;
- `/hold`: `/work`'s output after `hold` seconds (default HOLD_SECONDS), and never a
  fault, calm or not: the flow-control workflows' calls (workloads `pooled`, `limited`),
  whose `recv` to `done` is the time a run (or a call to backend `lim`) is in flight at
  the function, which flow_checks counts against the limits. It is shorter than the
  step's timeout, so a call whose worker died ends long before its slot's lease;
- `/<v>/durable/<name>`: the durable workflows of durable_app in version `<v>` (a
  FunctionApp per version behind this server: the backend's versions, served at once;
  `/durable/<name>` is v1's), whose step bodies write `bstart` / `bend` lines. Each call
  is a `dcall` line (run, version, target scope, journal length, the call's attempt,
  `mode` `check` for a check's replay) and a `ddone` line (status, fault, the
  operations answered), `ddone` written before the answer leaves.

Faults of `/work` (decided from a hash of the seed, the run's name, the step and the
attempt, so a seed replays the same faults whatever the order of arrival; none once the
`--calm` file exists): `5xx` (JSON error body), `5xx-text` (a text body), `429` with
`Retry-After: 1`, `hang` (answers after the step's timeout), `drop` (does the work, sends
half a response, closes the connection). A durable call meets the same faults, decided
from the seed, the run's name, the target scope, the journal's length and the call's
attempt: the 5xx and 429 answer without running the workflow; `hang` and `drop` run it
(a step body included) and then lose or delay the answer. A check's replay (`versions
promote` asking whether a run may move) meets none: a check that failed only leaves a
run where it is, which the integration tests show; here it would only stall the deploy."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from functions.sdk import FunctionApp, signing
from functions.sdk.protocol import DURABLE_PREFIX
from tests.chaos.durable_app import VERSIONS, durable_workflows
from tests.chaos.jsonl import JsonlWriter, digest

__all__ = ["FN_FAULTS", "HOLD_SECONDS", "create_app", "fn_fault", "main"]

# Fault kinds of /work and their weights.
FN_FAULTS: dict[str, int] = {"5xx": 3, "5xx-text": 2, "429": 2, "hang": 2, "drop": 3}
# How long `/hold` keeps a call in flight by default.
HOLD_SECONDS = 0.4


def fn_fault(seed: int, name: str, step: str, attempt: int, rate: float) -> str | None:
    """The fault `/work` plays for this attempt, or None: a pure function of its
    arguments (so a seed replays the same function faults)."""
    h = hashlib.sha256(f"{seed}/{name}/{step}/{attempt}".encode()).digest()
    if int.from_bytes(h[:4], "big") / 2**32 >= rate:
        return None
    pick = int.from_bytes(h[4:8], "big") % sum(FN_FAULTS.values())
    for kind, weight in FN_FAULTS.items():
        if pick < weight:
            return kind
        pick -= weight
    return None


class StepHandler:
    """One route, as a raw ASGI app: a dropped connection needs a response it can leave
    half-sent, which a Starlette endpoint cannot do."""

    def __init__(self, server: FunctionServer, route: str) -> None:
        self.server = server
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        raw = await request.body()
        answer = await self.server.answer(self.route, request, raw)
        if answer is None:  # drop: half a response, then the connection is closed
            await send({
                "type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", b"4096")],
            })
            await send({"type": "http.response.body", "body": b'{"nonce": "', "more_body": True})
            return  # uvicorn closes a connection whose response was not completed
        await answer(scope, receive, send)


class DurableHandler:
    """POST /durable/<name>: the FunctionApp serving the workflows, behind the faults."""

    def __init__(self, server: FunctionServer, app: FunctionApp, version: str) -> None:
        self.server = server
        self.app = app
        self.version = version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await Request(scope, receive).body()
        await self.server.durable(self.app, self.version, scope, raw, send)


class FunctionServer:
    def __init__(
        self, ledger: JsonlWriter, *, seed: int, secret: str | None, step_timeout: float,
        fault_rate: float, calm: Path | None,
    ) -> None:
        self.ledger = ledger
        self.seed = seed
        self.secret = secret
        self.step_timeout = step_timeout
        self.fault_rate = fault_rate
        self.calm = calm

    def calm_now(self) -> bool:
        return self.calm is not None and self.calm.exists()

    async def answer(self, route: str, request: Request, raw: bytes) -> Response | None:
        call = uuid.uuid4().hex[:12]
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        run = body.get("run") or {}
        inp = body.get("input") if isinstance(body.get("input"), dict) else {}
        steps = body.get("steps")
        attempt = int(run.get("attempt") or 0)
        sig_ok = True
        if self.secret:
            try:
                signing.verify(self.secret, request.headers.get(signing.TIMESTAMP_HEADER),
                               request.headers.get(signing.SIGNATURE_HEADER), raw, time.time())
            except signing.SignatureError:
                sig_ok = False
        self.ledger.write({
            "ev": "recv", "id": call, "t": time.time(), "route": route,
            "run": run.get("run_id"), "step": run.get("step"), "attempt": attempt,
            "name": inp.get("name"),
            "key": request.headers.get(signing.IDEMPOTENCY_HEADER),
            "hdr_run": request.headers.get(signing.RUN_ID_HEADER),
            "hdr_step": request.headers.get(signing.STEP_HEADER),
            "hdr_attempt": request.headers.get(signing.ATTEMPT_HEADER),
            "body": digest(body),
            "steps": None if steps is None else {k: digest(v) for k, v in steps.items()},
            "sig": sig_ok,
        })
        payload = {k: v for k, v in body.items() if k not in ("input", "steps", "run")}
        fault: str | None = None
        status, retry_after = 200, None
        output: Any = {"nonce": uuid.uuid4().hex, "step": run.get("step"), "attempt": attempt,
                       "got": None if steps is None else digest(steps)}
        text: str | None = None
        if route == "/work":
            if not self.calm_now():
                fault = fn_fault(self.seed, str(inp.get("name")), str(run.get("step")), attempt,
                                 self.fault_rate)
            if payload.get("sleep"):
                await asyncio.sleep(float(payload["sleep"]))
        elif route == "/hold":
            await asyncio.sleep(float(payload.get("hold", HOLD_SECONDS)))
        elif route == "/flaky":
            if attempt <= int(payload.get("fail", 2)):
                fault = "flaky"
                status = 503
                output = {"error": {"code": "retryable", "message": f"flaky: attempt {attempt}",
                                    "retryable": True}}
                if payload.get("retry_after") is not None:
                    retry_after = float(payload["retry_after"])
        elif route == "/fail":
            status = 422
            output = {"error": {"code": "terminal", "message": "this step always fails",
                                "retryable": False, "details": {"step": run.get("step")}}}
        elif route in ("/big", "/huge"):
            n = int(payload.get("bytes", 100_000))
            output = {"nonce": output["nonce"], "blob": "x" * n}
        elif route == "/nonjson":
            text = f"plain text from {run.get('step')}, not JSON"
        if fault == "5xx":
            status = 503
            output = {"error": {"code": "retryable", "message": "injected 503",
                                "retryable": True}}
        elif fault == "5xx-text":
            status, text = 502, "Bad Gateway (injected, not JSON)"
        elif fault == "429":
            status, retry_after = 429, 1.0
            output = {"error": {"code": "rate_limited", "message": "injected 429",
                                "retryable": True}}
        elif fault == "hang":
            await asyncio.sleep(self.step_timeout + 1.0)
        self.ledger.write({
            "ev": "done", "id": call, "t": time.time(), "status": status, "fault": fault,
            "out": digest(output) if text is None and 200 <= status < 300 else None,
            "retry_after": retry_after,
        })
        if fault == "drop":
            return None
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        if text is not None:
            return PlainTextResponse(text, status_code=status, headers=headers)
        return JSONResponse(output, status_code=status, headers=headers)


    async def durable(self, app: FunctionApp, version: str, scope: Scope, raw: bytes,
                      send: Send) -> None:
        call = uuid.uuid4().hex[:12]
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        run = body.get("run") or {}
        inp = body.get("input") if isinstance(body.get("input"), dict) else {}
        target = str(body.get("target") or "")
        journal = body.get("journal")
        size = len(journal) if isinstance(journal, list) and "journal_ref" not in body else None
        attempt = int(run.get("attempt") or 0)
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        mode = body.get("mode")
        self.ledger.write({
            "ev": "dcall", "id": call, "t": time.time(), "route": scope.get("path"),
            "run": run.get("run_id"), "name": inp.get("name"), "target": target,
            "journal": size, "attempt": attempt, "ver": version, "mode": mode,
            "key": headers.get(signing.IDEMPOTENCY_HEADER.lower()),
        })
        fault = None if self.calm_now() or mode == "check" else fn_fault(
            self.seed, str(inp.get("name")), f"durable:{target}:{size}", attempt, self.fault_rate)
        answer: Response | None = None
        if fault == "5xx":
            answer = JSONResponse({"error": {"code": "retryable", "message": "injected 503",
                                             "retryable": True}}, status_code=503)
        elif fault == "5xx-text":
            answer = PlainTextResponse("Bad Gateway (injected, not JSON)", status_code=502)
        elif fault == "429":
            answer = JSONResponse({"error": {"code": "rate_limited", "message": "injected 429",
                                             "retryable": True}}, status_code=429,
                                  headers={"Retry-After": "1"})
        sent: list[dict[str, Any]] = []
        if answer is None:
            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": raw, "more_body": False}

            async def keep(message: Any) -> None:
                sent.append(dict(message))

            # The app serves /durable/<name>: a version's prefix is this server's.
            path = str(scope.get("path", ""))
            inner = path[len(version) + 1:] if path.startswith(f"/{version}/") else path
            await app({**scope, "path": inner, "raw_path": inner.encode()}, receive,
                      keep)  # type: ignore[arg-type]
        if fault == "hang":
            await asyncio.sleep(self.step_timeout + 1.0)
        status = answer.status_code if answer is not None else int(sent[0].get("status", 500))
        out = b"".join(m.get("body", b"") for m in sent[1:])
        ops = _ops(out)
        self.ledger.write({"ev": "ddone", "id": call, "t": time.time(), "status": status,
                           "fault": fault, "ops": ops})
        if answer is not None:
            await answer(scope, _nothing, send)
        elif fault == "drop":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", b"4096")]})
            await send({"type": "http.response.body", "body": out[: len(out) // 2],
                        "more_body": True})
        else:
            for message in sent:
                await send(message)


async def _nothing() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def create_app(server: FunctionServer) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [Route("/healthz", healthz, methods=["GET"])]
    for path in ("/work", "/hold", "/flaky", "/fail", "/big", "/huge", "/nonjson"):
        routes.append(Route(path, StepHandler(server, path), methods=["POST"]))
    for version in VERSIONS:
        durable = FunctionApp(secret=server.secret)
        durable.workflow(*durable_workflows(server.ledger, version))
        handler = DurableHandler(server, durable, version)
        for name in durable.workflows:
            routes.append(Route(f"/{version}{DURABLE_PREFIX}{name}", handler, methods=["POST"]))
            if version == "v1":
                routes.append(Route(DURABLE_PREFIX + name, handler, methods=["POST"]))
    return Starlette(routes=routes)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.ledger_server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ledger", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--secret", default=None)
    p.add_argument("--step-timeout", type=float, default=3.0)
    p.add_argument("--fault-rate", type=float, default=0.08)
    p.add_argument("--calm", type=Path, default=None)
    args = p.parse_args(argv)
    server = FunctionServer(
        JsonlWriter(args.ledger), seed=args.seed, secret=args.secret,
        step_timeout=args.step_timeout, fault_rate=args.fault_rate, calm=args.calm,
    )
    uvicorn.run(create_app(server), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False, lifespan="off")


def _ops(out: bytes) -> list[Any] | None:
    """The operations a durable answer gave: version 1's JSON, or version 2's lines."""
    if not out:
        return None
    try:
        return [op.get("op") for op in json.loads(out).get("ops", [])]
    except (ValueError, AttributeError):
        pass
    try:
        return [json.loads(line).get("op") for line in out.splitlines() if line.strip()]
    except (ValueError, AttributeError):
        return None


if __name__ == "__main__":
    main()

