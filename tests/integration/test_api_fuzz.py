"""Fuzzing the live HTTP API against its own OpenAPI document, with bearer keys on.

The app runs on real uvicorn over the shared emulator. For every operation of the
served `/openapi.json`, schemathesis generates valid (positive) and invalid (negative)
requests; some are steered at real resources (a workflow, a run, a schedule, a webhook)
so that fuzzing reaches past the 404s, and some go without a valid key. The property:
no response is a 5xx, a guarded route without a valid key is a 401, and every response
is JSON of the shape documented for its status (schemathesis's conformance checks).

Then the inputs a generator rarely makes: invalid UTF-8, a 2 MiB body, a lying
Content-Length, encoded slashes and unicode in path parameters, garbage cursors, absurd
limits, lone surrogates."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.routing import Route

from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.api.app import create_app
from orchestrator.api.openapi import openapi_document
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.harness import Harness, fresh_settings
from tests.support.versioned_fns import create_app as versioned_app

pytestmark = pytest.mark.slow  # ~50 s, mostly generated requests; still runs in CI

MANIFEST = """
backends:
  fn: { url: "${FN}" }
  sh: { url: "${FN}", capabilities: [shell] }   # scripts' runs (no worker runs them)
  shop:   # two versions of one functions app (tests/support/versioned_fns.py)
    versions: { v1: "${V1}", v2: "${V2}" }
    current: v1
    secret: versions-secret
workflows:
  order: { backend: shop }
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  grouped:
    concurrency: { group: "g-${{ input.tenant }}", key: "${{ input.account }}" }
    throttle: { limit: 5, period: 1m, key: "${{ input.tenant }}", burst: 2, policy: drop }
    steps:
      one: { backend: fn, route: /echo }
  order-paid:
    on:
      - event: order.paid
        if: "event.data.total > 100 and event.data.currency == 'EUR'"
    steps:
      one: { backend: fn, route: /echo }
  nightly:
    schedule: { every: 1h }
    steps:
      one: { backend: fn, route: /echo }
  waiter: { backend: fn, workflow: approval }
  gated:
    steps:
      ask: { approval: { prompt: "fuzz?", timeout: 1h, link: true } }
webhooks:
  local:
    workflow: chain
    verify: { scheme: none }
  signed:
    workflow: grouped
    verify: { scheme: github, secrets: ["fuzz-secret"] }
    headers: [X-GitHub-Event]
    input:
      tenant: body.repository.full_name
      account: "headers['x-github-event']"
"""

WORKFLOWS = ("chain", "grouped", "order-paid", "nightly", "nosuch")
SCRIPT_NAMES = ("seed-script", "gone-script-0", "gone-script-1", "gone-script-2")
# Versions of backend `shop` a fuzzed retire may retire (each once), at v2's URL.
SPARE_VERSIONS = tuple(f"spare-{i}" for i in range(6))
SPEC = openapi_document("0")
OPERATIONS = [(path, method.upper()) for path, item in SPEC["paths"].items() for method in item]
OPEN = {(path, method.upper()) for path, item in SPEC["paths"].items()
        for method, op in item.items() if op.get("security") == []}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same requests on every machine and every run
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure prints its curl
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Live:
    h: Harness
    url: str
    key: str
    client: httpx.Client  # sends the key
    schema: Any  # schemathesis' view of the served /openapi.json
    running: str  # a run without workers: it stays running until cancelled
    killed: str
    hook_tokens: list[str]  # hooks of the durable seed run (each works once)
    gated: list[str]  # runs whose approval gate `ask` is open (each answers once)
    link_tokens: list[str]  # those gates' single-use links
    # The killed seed run's export, which an import steered to it takes under a new id.
    export: dict[str, Any]
    # Where version v2 of backend `shop` is served (a functions app).
    v2_url: str


@pytest.fixture(scope="module")
def live(emulator: Emulator, testfns: str, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Live]:
    with BackgroundServer(versioned_app(1)) as v1, BackgroundServer(versioned_app(2)) as v2:
        yield from _live(emulator, testfns, tmp_path_factory, {"V1": v1.url, "V2": v2.url})


def _live(emulator: Emulator, testfns: str, tmp_path_factory: pytest.TempPathFactory,
          versions: dict[str, str]) -> Iterator[Live]:
    h = Harness.build(fresh_settings(emulator.url, api_auth=True), MANIFEST,
                      tmp_path_factory.mktemp("fuzz"), {"FN": testfns, **versions})
    h.rt.versions.seed(h.rt.manifest.backends)
    for label in SPARE_VERSIONS:
        h.rt.versions.register("shop", label, versions["V2"])
    key = ApiKeys(h.rt.control).create("fuzz", time.time())
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
        base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        for run_id in ("seed-running", "seed-killed"):
            resp = client.post("/runs", json={"workflow": "chain", "run_id": run_id})
            assert resp.status_code == 201, resp.text
        # A durable run (no workers: it stays running) that takes signals.
        resp = client.post("/runs", json={"workflow": "waiter", "run_id": "seed-durable"})
        assert resp.status_code == 201, resp.text
        tokens = [client.post("/hooks", json={"run_id": "seed-durable", "signal": "approve"}
                              ).json()["token"] for _ in range(4)]
        assert client.post("/runs/seed-killed/cancel").json()["status"] == "killed"
        # Runs waiting at an open gate (no workers: opened here, as a worker would).
        gated = [f"seed-gated-{i}" for i in range(6)]
        spec = {"prompt": "fuzz?", "timeout": 3600, "link": True}
        for run_id in gated:
            assert client.post("/runs", json={"workflow": "gated", "run_id": run_id}
                               ).status_code == 201
            h.rt.approvals.open(run_id, "ask", "gated", spec, time.time())
        links = [h.rt.approvals.link_token(r, "ask") for r in gated[3:]]
        # State cells to read, write and delete.
        for cell in ("seed", "gone-0", "gone-1", "gone-2"):
            h.rt.state.set("fuzz", cell, {"n": 1})
        # Stored scripts to read, replace and delete.
        for name in SCRIPT_NAMES:
            h.rt.runs.manifest.register(name, "echo seeded\n")
        # A bulk job to read (no workers: it stays at its first page).
        assert client.post("/bulk-actions", json={"action": "cancel", "run_ids": ["seed-killed"],
                                                  "job_id": "seed-job"}).status_code == 202
        export = client.get("/runs/seed-killed/export").json()
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        yield Live(h, server.url, key, client, schema, "seed-running", "seed-killed", tokens,
                   gated, links, export, versions["V2"])
    h.close()


def settled(live: Live, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request that may hit a known 500, on a connection of its own (after a 500,
    uvicorn drops the connection under the next request), then a round trip that lets
    the server finish logging the traceback: on CPython 3.11.7 two threads formatting
    tracebacks at once (3.11 parses source with `ast` for the ^^^ markers) can corrupt
    ast's shared recursion counter (CPython gh-106905), and pytest then dies with an
    INTERNALERROR "SystemError: AST constructor recursion depth mismatch"."""
    headers = {"Authorization": f"Bearer {live.key}"}
    with httpx.Client(base_url=live.url, timeout=30, headers=headers) as c:
        resp = c.request(method, path, **kwargs)
    with httpx.Client(base_url=live.url, timeout=30) as c:
        c.get("/healthz")
    return resp


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"] == "application/json", resp.headers
    err: dict[str, Any] = resp.json()["error"]
    assert isinstance(err["code"], str) and err["code"]
    assert isinstance(err["message"], str) and err["message"]
    return err


# ---- the document ------------------------------------------------------------------------


def test_document_names_every_route_and_only_those(live: Live) -> None:
    from openapi_spec_validator import validate

    served = live.client.get("/openapi.json").json()
    validate(served)
    app = create_app(live.h.rt)
    # The dashboard's (/ui, a Mount, and the browser's /favicon.ico) are not the API's.
    routes = {(r.path, m) for r in app.routes if isinstance(r, Route) for m in r.methods or ()
              if m != "HEAD" and r.path != "/favicon.ico"}
    assert routes == set(OPERATIONS)
    assert {("/healthz", "GET"), ("/openapi.json", "GET"), ("/webhooks/{name}", "POST"),
            ("/hooks/{token}", "POST"), ("/approvals/links/{token}", "POST")} == OPEN
    bearer = served["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    assert served["security"] == [{"bearer": []}]
    for path, method in OPERATIONS:
        op = served["paths"][path][method.lower()]
        codes = set(op["responses"])
        assert (path, method) in OPEN or "401" in codes, (path, method)
        assert all(c in {"200", "201", "202", "400", "401", "403", "404", "409", "410", "413",
                         "422", "503"} for c in codes), (path, method, codes)
        if "requestBody" in op and path != "/webhooks/{name}":
            assert {"400", "413", "422"} <= codes, (path, method)
    assert "$defs" not in json.dumps(served)
    idem = served["paths"]["/runs"]["post"]["parameters"][0]
    assert idem["name"] == "Idempotency-Key" and "24 h" in idem["description"]


# ---- the fuzz property -------------------------------------------------------------------


def steer(live: Live, case: Any, data: st.DataObject, mode: GenerationMode) -> None:
    """Point a generated case at real resources (in place), or leave it as it is: mostly
    for valid cases (or they would nearly all be 404s), seldom for invalid ones (whose
    one invalid part steering may replace)."""
    odds = [True, True, False] if mode is GenerationMode.POSITIVE else [False, False, True]
    if not data.draw(st.sampled_from(odds), label="steer"):
        return
    path, body, params = case.operation.path, case.body, case.path_parameters
    if params is not None and "run_id" in params:
        runs = [live.running, live.killed]
        if path.startswith(("/runs/{run_id}/signals/", "/runs/{run_id}/resume",
                            "/runs/{run_id}/reset", "/runs/{run_id}/journal")):
            runs = ["seed-durable", "seed-durable", live.killed]
        if "/approvals/" in path:
            runs = [*live.gated[:3], live.killed]
        params["run_id"] = data.draw(st.sampled_from(runs))
    if params is not None and "step" in params:
        params["step"] = "ask"
    if params is not None and "token" in params and path.startswith("/approvals/links/"):
        params["token"] = data.draw(st.sampled_from([*live.link_tokens, "x" * 43]))
    elif params is not None and "token" in params:
        params["token"] = data.draw(st.sampled_from([*live.hook_tokens, "x" * 43]))
    if params is not None and "entity" in params:
        params["entity"] = "fuzz"
        if "key" in params:
            keys = ["gone-0", "gone-1", "gone-2"] if case.method == "DELETE" else ["seed"]
            params["key"] = data.draw(st.sampled_from(keys))
    if isinstance(body, dict) and path == "/hooks":
        body["run_id"] = "seed-durable"
    if params is not None and "name" in params and path.startswith("/scripts/"):
        names = list(SCRIPT_NAMES[1:]) if case.method == "DELETE" else ["seed-script", "fresh"]
        params["name"] = data.draw(st.sampled_from(names))
    elif params is not None and "name" in params and "/signals/" in path:
        params["name"] = data.draw(st.sampled_from(["approve", "go"]))
    elif params is not None and "name" in params:
        names = ["local", "signed"] if path.startswith("/webhooks") else ["nightly", "chain"]
        params["name"] = data.draw(st.sampled_from(names))
    if isinstance(body, dict) and path == "/runs":
        body["workflow"] = data.draw(st.sampled_from(WORKFLOWS))
    if isinstance(body, dict) and path == "/runs/import":
        # The killed seed's rows under an id of their own (or its own: a 409).
        run_id = data.draw(st.sampled_from([f"seed-import-{uuid.uuid4().hex[:12]}",
                                            live.killed]))
        body.clear()
        body.update(json.loads(json.dumps(live.export).replace(live.killed, run_id)))
    if isinstance(body, dict) and path == "/events":
        body["name"] = "order.paid"  # its trigger's `if` then runs over the fuzzed data
    if params is not None and "job_id" in params:
        params["job_id"] = data.draw(st.sampled_from(["seed-job", "no-such-job"]))
    if isinstance(body, dict) and path == "/bulk-actions":
        # A selection that names runs (one that names none is a 400), and only what
        # the action takes.
        for name in ("q", "workflow", "status", "job_id"):
            body.pop(name, None)
        body["run_ids"] = [live.killed, live.running]
        if body.get("action") != "cancel":
            body.pop("reason", None)
        if body.get("action") != "rerun":
            body.pop("input", None)
    steer_versions(live, case, data)
    if isinstance(case.query, dict) and case.method == "GET":
        if path == "/runs":
            case.query["workflow"] = data.draw(st.sampled_from(WORKFLOWS))
        if path == "/events":
            case.query["name"] = "order.paid"


def steer_versions(live: Live, case: Any, data: st.DataObject) -> None:
    """Versions of backend `shop`: its live ones, spares to retire, v2's URL."""
    path, body, params = case.operation.path, case.body, case.path_parameters
    if params is not None and "backend" in params:
        params["backend"] = "shop"
    if params is not None and "version" in params:
        labels = list(SPARE_VERSIONS) if path.endswith("/retire") else ["v1", "v2"]
        params["version"] = data.draw(st.sampled_from(labels))
    if isinstance(body, dict) and path == "/versions/{backend}":
        body["url"] = live.v2_url
    if isinstance(body, dict) and path in ("/runs/check", "/runs/migrate"):
        label = data.draw(st.sampled_from(["v1", "v2"]))
        body.clear()
        body.update({"to": label} if path == "/runs/migrate" else data.draw(
            st.sampled_from([{"version": label}, {"functions_url": live.v2_url}])))


def unroutable(case: Any) -> bool:
    """A path parameter that changes the route (`/` inside it, or empty): the router
    answers, not the API. Its plain-text 404 is test_unroutable_paths_are_json_errors."""
    return any(not str(v) or "/" in unquote(str(v))
               for v in (case.path_parameters or {}).values())


def header(resp: Any, name: str) -> str:
    """One header of a schemathesis Response (whose headers map names to lists)."""
    values = {k.lower(): v for k, v in resp.headers.items()}.get(name.lower(), [])
    assert len(values) == 1, (name, resp.headers)
    return str(values[0])


def check(case: Any, resp: Any, authed: bool) -> None:
    """The property: no 5xx; 401 exactly when a guarded route lacks a valid key; JSON of
    the documented shape for the status (the Error shape for every 4xx)."""
    where = f"{case.method} {resp.request.url} -> {resp.status_code} {resp.text[:500]}"
    assert resp.status_code < 500, where
    if unroutable(case):
        return
    if (case.operation.path, case.method) not in OPEN:
        assert (resp.status_code == 401) is not authed, where
        if not authed:
            assert header(resp, "www-authenticate") == "Bearer", where
    if resp.status_code == 200 and case.operation.path == "/metrics":
        # The one answer that is not JSON: Prometheus's text format, as documented.
        assert header(resp, "content-type").startswith("text/plain"), where
        case.validate_response(resp, checks=CHECKS)
        return
    assert header(resp, "content-type") == "application/json", where
    body = resp.json()
    if resp.status_code >= 400:
        err = body["error"]
        assert isinstance(err["code"], str) and isinstance(err["message"], str), where
        assert err["code"] and err["message"], where
    case.validate_response(resp, checks=CHECKS)


def negatable(path: str, method: str) -> bool:
    """Whether an invalid request exists: something to get wrong (a parameter, a body,
    the key). `GET /healthz` has nothing."""
    op = SPEC["paths"][path][method.lower()]
    return bool(op.get("parameters") or op.get("requestBody")) or (path, method) not in OPEN


FUZZ_CASES = [
    pytest.param(path, method, mode, id=f"{method} {path} {mode.value}")
    for path, method in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or negatable(path, method)
]


@pytest.mark.parametrize(("path", "method", "mode"), FUZZ_CASES)
def test_fuzz_operation(live: Live, path: str, method: str, mode: GenerationMode) -> None:
    operation = live.schema[path][method]
    statuses: Counter[int] = Counter()
    with requests.Session() as session:

        @FUZZ
        @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
        def run(case: Any, data: st.DataObject) -> None:
            steer(live, case, data, mode)
            authed = data.draw(st.sampled_from([True, True, True, False]), label="auth")
            if authed:
                case.headers = {**(case.headers or {}), "Authorization": f"Bearer {live.key}"}
            resp = case.call(base_url=live.url, session=session, timeout=30)
            check(case, resp, authed)
            statuses[resp.status_code] += 1

        run()
    # Not only refusals: valid requests reach the handlers and succeed, or the fuzzing
    # above proved little.
    if mode is GenerationMode.POSITIVE:
        assert any(200 <= s < 300 for s in statuses), dict(statuses)


# ---- inputs a generator rarely makes ------------------------------------------------------

BODY_ROUTES = ["/runs", "/events", "/runs/seed-running/cancel", "/runs/seed-killed/rerun",
               "/webhooks/local"]


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_invalid_utf8_body_is_400(live: Live, path: str) -> None:
    for body, ctype in ((b'{"workflow": "\xff\xfe"}', "application/json"),
                        (b"\xc3\x28 not utf-8", "text/plain")):
        resp = live.client.post(path, content=body, headers={"content-type": ctype})
        error_of(resp, 400)


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_two_mebibyte_body_is_413(live: Live, path: str) -> None:
    big = b'{"input": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    error_of(live.client.post(path, content=big), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        for _ in range(32):
            yield b"y" * 65536

    error_of(live.client.post(path, content=chunks()), 413)


def raw_exchange(live: Live, request: bytes, *, half_close: bool = False) -> bytes:
    """Send raw bytes on a fresh connection; whatever comes back until the server closes
    or goes quiet for a second."""
    parts = urlsplit(live.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(1.0)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


def head(live: Live, path: str, length: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {live.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            ).encode() + body


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0


def test_lying_content_length(live: Live) -> None:
    # Declares 2 MiB, sends 2 bytes: refused on the header, without waiting for the rest.
    raw = raw_exchange(live, head(live, "/runs", str(2 * 1024 * 1024), b"{}"))
    assert status_of(raw) == 413 and b'"body_too_large"' in raw, raw[:300]
    # Declares more than it sends, then stops: no answer or a 4xx, never a 5xx.
    raw = raw_exchange(live, head(live, "/runs", "100", b'{"workflow": "chain"}'),
                       half_close=True)
    assert status_of(raw) in (0, 400), raw[:300]
    # Declares less than it sends: the body is cut short, so it is not JSON.
    raw = raw_exchange(live, head(live, "/runs", "5", b'{"workflow": "chain"}'))
    assert status_of(raw) == 400 and b"invalid JSON" in raw, raw[:300]
    # Not a number: refused by the HTTP parser before the app.
    assert status_of(raw_exchange(live, head(live, "/runs", "12abc", b"{}"))) == 400
    assert live.client.get("/healthz").json() == {"ok": True}  # still serving


@pytest.mark.parametrize("segment", [
    "%E2%98%83",  # a snowman
    "%00", "%25", "%20", "%2E%2E", "a%3Fb%23c", "%F0%9F%92%A5" * 50,
    "r" * 1500, "%C3%28",  # invalid UTF-8 once decoded
])
@pytest.mark.parametrize("template", ["/runs/{}", "/runs/{}/events"])
def test_odd_path_parameters_are_404_json(live: Live, template: str, segment: str) -> None:
    error_of(live.client.get(template.format(segment)), 404)


@pytest.mark.parametrize("path", [
    "/runs/a%2Fb", "/runs/a%2Fb/events", "/schedules/%2F/pause", "/webhooks/a%2Fb",
])
def test_unroutable_paths_are_json_errors(live: Live, path: str) -> None:
    error_of(live.client.post(path) if "/schedules/" in path or "/webhooks/" in path
             else live.client.get(path), 404)


def test_wrong_method_is_a_json_error(live: Live) -> None:
    error_of(live.client.delete("/runs"), 405)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


@pytest.mark.parametrize("cursor", [
    "%%%", "!!!!", "=", "a" * 10_000, b64(b"not json"), b64(b"[]"), b64(b"null"),
    b64(b'{"run_id": 1}'), b64(b'{"run_id": {"S": "a", "N": "1"}}'),
    b64(b'{"run_id": {"B": "YQ=="}}'), b64(b"\xff\xfe"),
])
def test_garbage_cursor_is_400(live: Live, cursor: str) -> None:
    assert "cursor" in error_of(live.client.get("/runs", params={"cursor": cursor}), 400)[
        "message"]


def test_cursor_with_foreign_keys_is_400(live: Live) -> None:
    cursor = b64(b'{"x": {"S": "y"}}')
    error_of(settled(live, "GET", "/runs", params={"cursor": cursor}), 400)


@pytest.mark.parametrize(("limit", "status"), [
    ("9" * 5000, 400), ("1e9", 400), ("0x10", 400), ("", 400), ("NaN", 400),
    ("-1", 200), ("0", 200), (str(10**30), 200), ("+7", 200), ("\uff17", 200),  # fullwidth 7
])
@pytest.mark.parametrize("path", ["/runs", "/events"])
def test_absurd_limits(live: Live, path: str, limit: str, status: int) -> None:
    resp = live.client.get(path, params={"limit": limit, "name": "order.paid"})
    if status == 200:
        assert resp.status_code == 200, resp.text
        assert len(next(iter(resp.json().values()))) <= 100
    else:
        assert "limit" in error_of(resp, 400)["message"]


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Basic b2s6b2s=", "Bearer ok_nope", "Bearer ok_" + "x" * 300,
    "Bearer \tok_x", "Token ok_x", b"Bearer ok_\xe9\xff",
])
def test_bad_keys_are_401_json(live: Live, authorization: str | bytes | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    with httpx.Client(base_url=live.url, timeout=30) as c:
        resp = c.get("/workflows", headers=headers)
    error_of(resp, 401)
    assert resp.headers["www-authenticate"] == "Bearer"


def test_bearer_scheme_is_case_insensitive(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=30) as c:
        assert c.get("/workflows", headers={"Authorization": f"bearer {live.key}"}
                     ).status_code == 200


def test_signed_webhook_input_mapping_over_arbitrary_bodies(live: Live) -> None:
    """Correctly signed deliveries with any JSON body: the input mapping and the
    concurrency template over it may refuse (4xx), never fail (5xx)."""
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                              allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                    max_size=4),
        max_leaves=20,
    )
    bodies = json_values | st.fixed_dictionaries({"repository": st.fixed_dictionaries(
        {"full_name": json_values})})
    statuses: Counter[int] = Counter()

    @settings(FUZZ, max_examples=25)
    @given(body=bodies, event=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E)),
           delivery=st.uuids())
    def deliver(body: Any, event: str, delivery: Any) -> None:
        raw = json.dumps(body).encode()
        signature = hmac.new(b"fuzz-secret", raw, hashlib.sha256).hexdigest()
        headers = {"content-type": "application/json", "X-GitHub-Delivery": str(delivery),
                   "X-Hub-Signature-256": f"sha256={signature}", "X-GitHub-Event": event}
        with httpx.Client(base_url=live.url, timeout=30) as c:
            resp = c.post("/webhooks/signed", content=raw, headers=headers)
        assert resp.status_code < 500, (raw, headers, resp.text)
        statuses[resp.status_code] += 1
        if resp.status_code >= 400:
            error_of(resp, resp.status_code)
        else:
            assert resp.status_code in (200, 202) and resp.json()["workflow"] == "grouped"

    deliver()
    assert statuses[202], dict(statuses)  # the signatures were right: runs did start



@pytest.mark.parametrize(("path", "body", "headers"), [
    pytest.param("/runs", b'{"workflow": "chain", "input": "\\ud800"}', {}, id="run-input"),
    pytest.param("/runs", b'{"workflow": "chain", "input": {"\\udfff": 1}}',
                 {"Idempotency-Key": "fuzz-surrogate"}, id="idempotency-fingerprint"),
    pytest.param("/events", b'{"name": "order.paid", "data": ["\\ud83d"]}', {},
                 id="event-data"),
    pytest.param("/runs/seed-killed/rerun", b'{"input": "\\ud800"}', {}, id="rerun-input"),
    pytest.param("/webhooks/local", b'{"x": "\\ud800"}', {}, id="webhook-body"),
])
def test_lone_surrogates_are_4xx(live: Live, path: str, body: bytes,
                                 headers: dict[str, str]) -> None:
    resp = settled(live, "POST", path, content=body,
                   headers={"content-type": "application/json", **headers})
    assert resp.status_code < 500, resp.text
    error_of(resp, resp.status_code)


def test_concurrency_key_render_failure_is_400(live: Live) -> None:
    resp = settled(live, "POST", "/runs",
                   json={"workflow": "grouped", "input": {"tenant": "t" * 70_000}})
    error_of(resp, 400)


def test_input_over_its_limit_or_too_deep_is_400(live: Live) -> None:
    """Just under 1 MiB but over the input limit, and nested past 64: 400, not 413/500."""
    blob = "x" * (300 * 1024)
    error_of(live.client.post("/runs", json={"workflow": "chain", "input": blob}), 400)
    error_of(live.client.post("/events", json={"name": "e", "data": blob}), 400)
    deep = b'{"workflow": "chain", "input": ' + b"[" * 65 + b"]" * 65 + b"}"
    assert "deeper" in error_of(live.client.post("/runs", content=deep), 400)["message"]

