"""The functions SDK over real HTTP: a FunctionApp on a real uvicorn, called with httpx."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from functions.sdk import FunctionApp, RetryableError, StepRequest, TerminalError, signing
from functions.sdk.protocol import RunInfo, request_body
from tests.support.servers import BackgroundServer, post_step, running, step_body

SECRET = "test-secret"


@dataclass(frozen=True)
class Invoice:
    number: str
    total: float


def build_app(secret: str | list[str] | None) -> FunctionApp:
    app = FunctionApp(secret, title="sdk-test")

    @app.step("/echo", summary="Echo what the handler saw.")
    def echo(req: StepRequest) -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
            in_event_loop = True
        except RuntimeError:
            in_event_loop = False
        return {
            "input": req.input,
            "steps": req.steps,
            "payload": req.payload,
            "run": [req.run_id, req.workflow, req.step, req.attempt],
            "idempotency_key": req.idempotency_key,
            "trace_header": req.headers.get("x-orchestrator-step"),
            "in_event_loop": in_event_loop,
        }

    @app.step("/async-echo")
    async def async_echo(req: StepRequest) -> dict[str, Any]:
        """Echo from a coroutine.

        The longer description ends up in the OpenAPI operation."""
        await asyncio.sleep(0)
        return {"input": req.input, "in_event_loop": asyncio.get_running_loop() is not None}

    @app.step("/terminal")
    def terminal(req: StepRequest) -> None:
        raise TerminalError("order 42 does not exist", code="order_missing", details={"id": 42})

    @app.step("/retry")
    def retry(req: StepRequest) -> None:
        raise RetryableError("upstream is rate limiting", retry_after=2.2)

    @app.step("/retry-no-hint")
    async def retry_no_hint(req: StepRequest) -> None:
        raise RetryableError("upstream timed out")

    @app.step("/crash")
    def crash(req: StepRequest) -> None:
        prices: dict[str, float] = {}
        prices["missing"]  # a genuine bug in a handler: KeyError

    @app.step("/nothing")
    def nothing(req: StepRequest) -> None:
        return None

    @app.step("/invoice")
    def invoice(req: StepRequest) -> Invoice:
        return Invoice(number="INV-7", total=12.5)

    @app.step("/not-json")
    def not_json(req: StepRequest) -> object:
        return object()

    @app.step("/needs-dependency")
    def needs_dependency(req: StepRequest) -> Any:
        return req.output_of("extract")

    return app


@pytest.fixture(scope="module")
def signed_url() -> Iterator[str]:
    with running(build_app(SECRET)) as server:
        yield server.url


@pytest.fixture(scope="module")
def open_url() -> Iterator[str]:
    with running(build_app(None)) as server:
        yield server.url


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    return error


def test_signed_request_reaches_the_handler(signed_url: str) -> None:
    body = step_body({"month": "2026-10"}, run_id="r-7", workflow="wf", step="echo", attempt=2)
    r = post_step(signed_url + "/echo", body, secret=SECRET, idempotency_key="r-7/echo")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "input": {"month": "2026-10"},
        "steps": {},
        "payload": {},
        "run": ["r-7", "wf", "echo", 2],
        "idempotency_key": "r-7/echo",
        "trace_header": None,
        "in_event_loop": False,  # sync handlers run in the threadpool
    }


def test_async_handler_runs_on_the_event_loop(signed_url: str) -> None:
    r = post_step(signed_url + "/async-echo", step_body([1, 2]), secret=SECRET)
    assert r.status_code == 200
    assert r.json() == {"input": [1, 2], "in_event_loop": True}


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("none", "missing X-Orchestrator-Timestamp"),
        ("wrong-secret", "does not match"),
        ("body", "does not match"),
        ("stale", "stale"),
        ("future", "in the future"),
    ],
)
def test_bad_signatures_are_401(signed_url: str, tamper: str, reason: str) -> None:
    body = step_body({"month": "2026-10"})
    now = time.time()
    headers = {"Content-Type": "application/json"}
    if tamper == "wrong-secret":
        headers.update(signing.signed_headers("not-the-secret", body, now))
    elif tamper == "body":
        headers.update(signing.signed_headers(SECRET, body, now))
        body = body.replace(b"2026-10", b"2026-11")
    elif tamper == "stale":
        headers.update(signing.signed_headers(SECRET, body, now - 3600))
    elif tamper == "future":
        headers.update(signing.signed_headers(SECRET, body, now + 3600))
    r = httpx.post(signed_url + "/echo", content=body, headers=headers)
    assert r.status_code == 401
    error = error_of(r)
    assert error["code"] == "bad_signature"
    assert error["retryable"] is False
    assert reason in error["message"]


def test_rotation_accepts_both_secrets() -> None:
    with running(build_app(["new", "old"])) as server:
        for secret in ("old", "new"):
            r = post_step(server.url + "/nothing", step_body(), secret=secret)
            assert r.status_code == 200, r.text
        assert post_step(server.url + "/nothing", step_body(), secret="other").status_code == 401


def test_a_fixed_clock_decides_staleness() -> None:
    signed_at = 1_790_000_000.0
    clock_now = signed_at + 100
    app = FunctionApp(SECRET, tolerance=60, clock=lambda: clock_now)

    @app.step("/ok")
    def ok(req: StepRequest) -> bool:
        return True

    with running(app) as server:
        r = post_step(server.url + "/ok", step_body(), secret=SECRET, now=signed_at)
        assert r.status_code == 401
        assert "100s old, tolerance is 60s" in error_of(r)["message"]
        r = post_step(server.url + "/ok", step_body(), secret=SECRET, now=clock_now - 59)
        assert (r.status_code, r.json()) == (200, True)


def test_unsigned_requests_pass_when_no_secret_is_configured(open_url: str) -> None:
    r = post_step(open_url + "/echo", step_body("hello"))
    assert r.status_code == 200
    assert r.json()["input"] == "hello"


def test_invalid_json_is_400(open_url: str) -> None:
    r = httpx.post(open_url + "/echo", content=b'{"input": ', headers={})
    assert r.status_code == 400
    error = error_of(r)
    assert error["code"] == "invalid_json"
    assert error["retryable"] is False


def test_json_that_is_not_a_step_request_is_400(open_url: str) -> None:
    r = httpx.post(open_url + "/echo", content=b"[1, 2]")
    assert r.status_code == 400
    assert error_of(r)["message"] == "request body must be a JSON object, got list"

    r = httpx.post(open_url + "/echo", json={"input": 1, "run": {"run_id": "r"}})
    assert r.status_code == 400
    error = error_of(r)
    assert error["code"] == "invalid_request"
    assert "run.workflow: Field required" in error["message"]
    assert {tuple(d["loc"]) for d in error["details"]} >= {("run", "workflow"), ("run", "step")}


def test_bad_signature_is_checked_before_the_body_is_parsed(signed_url: str) -> None:
    r = httpx.post(signed_url + "/echo", content=b"not json")
    assert r.status_code == 401


def test_terminal_error_is_422_with_its_code_and_details(open_url: str) -> None:
    r = post_step(open_url + "/terminal", step_body())
    assert r.status_code == 422
    assert error_of(r) == {
        "code": "order_missing",
        "message": "order 42 does not exist",
        "retryable": False,
        "details": {"id": 42},
    }


def test_retryable_error_is_503_with_retry_after_rounded_up(open_url: str) -> None:
    r = post_step(open_url + "/retry", step_body())
    assert r.status_code == 503
    assert r.headers["retry-after"] == "3"
    assert error_of(r) == {
        "code": "retryable",
        "message": "upstream is rate limiting",
        "retryable": True,
    }
    r = post_step(open_url + "/retry-no-hint", step_body())
    assert r.status_code == 503
    assert "retry-after" not in r.headers


def test_a_crash_is_a_retryable_500_that_names_the_exception(open_url: str) -> None:
    r = post_step(open_url + "/crash", step_body())
    assert r.status_code == 500
    error = error_of(r)
    assert error["code"] == "unhandled_exception"
    assert error["retryable"] is True
    assert error["message"] == "KeyError: 'missing'"


def test_output_serialisation(open_url: str) -> None:
    r = post_step(open_url + "/nothing", step_body())
    assert (r.status_code, r.content) == (200, b"null")
    r = post_step(open_url + "/invoice", step_body())
    assert (r.status_code, r.json()) == (200, {"number": "INV-7", "total": 12.5})
    r = post_step(open_url + "/not-json", step_body())
    assert r.status_code == 500
    assert error_of(r)["code"] == "invalid_output"


def test_payload_keys_are_exposed_and_reserved_keys_are_not(open_url: str) -> None:
    body = step_body(
        {"id": "tenant:acme"},
        steps={"fetch": {"rows": 3}},
        payload={"mode": "append", "limit": 10},
    )
    r = post_step(open_url + "/echo", body)
    assert r.status_code == 200
    seen = r.json()
    assert seen["payload"] == {"mode": "append", "limit": 10}
    assert seen["steps"] == {"fetch": {"rows": 3}}
    assert seen["input"] == {"id": "tenant:acme"}


def test_steps_are_absent_for_roots_and_empty_for_the_handler(open_url: str) -> None:
    body = step_body({"x": 1})
    assert "steps" not in json.loads(body)
    r = post_step(open_url + "/echo", body)
    assert r.json()["steps"] == {}


def test_a_missing_dependency_output_is_terminal(open_url: str) -> None:
    r = post_step(open_url + "/needs-dependency", step_body(steps={"other": 1}, step="load"))
    assert r.status_code == 422
    error = error_of(r)
    assert error["code"] == "missing_dependency"
    assert "'extract'" in error["message"]
    assert "(other)" in error["message"]
    r = post_step(open_url + "/needs-dependency", step_body(steps={"extract": {"ok": 1}}))
    assert r.json() == {"ok": 1}


def test_idempotency_key_in_the_signed_body_must_agree_with_the_header(open_url: str) -> None:
    run = RunInfo(run_id="r", workflow="w", step="s", attempt=1, idempotency_key="r/s")
    body = json.dumps(request_body(input=None, steps=None, run=run)).encode()
    r = post_step(open_url + "/echo", body)
    assert r.json()["idempotency_key"] == "r/s"
    r = post_step(open_url + "/echo", body, idempotency_key="r/other")
    assert r.status_code == 400
    assert "does not match" in error_of(r)["message"]


def test_reserved_payload_keys_are_refused_when_building_a_body() -> None:
    run = RunInfo(run_id="r", workflow="w", step="s", attempt=1)
    with pytest.raises(ValueError, match=r"\['input'\] are reserved"):
        request_body(input=None, steps=None, run=run, payload={"input": "shadow"})


def test_unknown_routes_and_methods_answer_json(open_url: str) -> None:
    r = httpx.post(open_url + "/nope", json={})
    assert r.status_code == 404
    assert error_of(r)["code"] == "not_found"
    r = httpx.get(open_url + "/echo")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"


def test_openapi_lists_every_route_as_a_post(signed_url: str) -> None:
    doc = httpx.get(signed_url + "/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] == "sdk-test"
    assert list(doc["paths"]) == [
        "/echo",
        "/async-echo",
        "/terminal",
        "/retry",
        "/retry-no-hint",
        "/crash",
        "/nothing",
        "/invoice",
        "/not-json",
        "/needs-dependency",
    ]
    for path, item in doc["paths"].items():
        assert list(item) == ["post"], path
        op = item["post"]
        assert {"200", "401", "422", "503"} <= set(op["responses"])
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        name = ref.rsplit("/", 1)[1]
        schema = doc["components"]["schemas"][name]
        assert {"input", "steps", "run"} <= set(schema["properties"])
        assert schema["required"] == ["run"]
        required_headers = {p["name"] for p in op["parameters"] if p["required"]}
        assert required_headers == {signing.SIGNATURE_HEADER, signing.TIMESTAMP_HEADER}
    assert doc["paths"]["/echo"]["post"]["summary"] == "Echo what the handler saw."
    assert doc["paths"]["/async-echo"]["post"]["summary"] == "Echo from a coroutine."
    assert "Retry-After" in doc["paths"]["/retry"]["post"]["responses"]["503"]["headers"]
    run_ref = schema["properties"]["run"]["$ref"].rsplit("/", 1)[1]
    assert set(doc["components"]["schemas"][run_ref]["required"]) == {
        "run_id",
        "workflow",
        "step",
        "attempt",
    }


def test_unsigned_app_documents_no_401(open_url: str) -> None:
    doc = httpx.get(open_url + "/openapi.json").json()
    assert "401" not in doc["paths"]["/echo"]["post"]["responses"]


def test_healthz(open_url: str) -> None:
    r = httpx.get(open_url + "/healthz")
    assert r.status_code == 200
    assert r.json()["ok"] is True
    assert "/echo" in r.json()["routes"]


def test_registration_refuses_clashes() -> None:
    app = FunctionApp(None)

    @app.step("/a")
    def a(req: StepRequest) -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):
        app.step("/a")
    with pytest.raises(ValueError, match="reserved"):
        app.step("/healthz")
    with pytest.raises(ValueError, match="must start with '/'"):
        app.step("a")
    with pytest.raises(ValueError, match="non-empty"):
        FunctionApp("")
    with pytest.raises(ValueError, match="retry_after"):
        RetryableError("x", retry_after=-1)


def test_background_server_reports_its_real_port_and_stops() -> None:
    server = BackgroundServer(build_app(None))
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url
    with server:
        assert server.port != 0
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert httpx.get(server.url + "/healthz").status_code == 200
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/healthz")
