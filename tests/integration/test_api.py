"""The HTTP API over real HTTP: bad input gets a 4xx JSON error, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse

from functions.sdk.serving import BackgroundServer
from orchestrator import __version__
from orchestrator.api.app import create_app
from orchestrator.api.openapi import openapi_document
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
        base_url=server.url, timeout=30
    ) as client:
        yield h, client


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()["error"]
    assert body["code"] and body["message"]
    return body


def test_start_read_and_list(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    resp = c.post("/runs", json={"workflow": "chain", "input": {"x": 1}})
    assert resp.status_code == 201
    run_id = resp.json()["run_id"]
    h.wait(run_id)
    view = c.get(f"/runs/{run_id}").json()
    assert view["status"] == "success" and view["input"] == {"x": 1}
    again = c.post("/runs", json={"workflow": "chain", "run_id": "mine-1"})
    assert again.status_code == 201
    same = c.post("/runs", json={"workflow": "chain", "run_id": "mine-1"})
    assert same.status_code == 200 and same.json()["created"] is False
    page = c.get("/runs", params={"workflow": "chain", "limit": 1}).json()
    assert len(page["runs"]) == 1 and page["next_cursor"]
    rest = c.get("/runs", params={"workflow": "chain", "cursor": page["next_cursor"]}).json()
    assert {r["run_id"] for r in page["runs"] + rest["runs"]} == {run_id, "mine-1"}
    assert [w["name"] for w in c.get("/workflows").json()["workflows"]] == ["chain"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "invalid JSON"),
        (b'{"workflow": "chain", "workflow": "chain"}', 400, "duplicate key"),
        (b'{"workflow": "chain", "input": NaN}', 400, "NaN"),
        (b'{"workflow": "chain", "input": Infinity}', 400, "Infinity"),
        (b'{"workflow": "chain", "input": ' + b"[" * 100 + b"]" * 100 + b"}", 400, "deeper"),
        (b'{"workflow": "chain", "input": "' + b"[" * 100 + b'"}', 201, ""),  # in a string
        (b'{"workflow": 7}', 422, "workflow"),
        (b'{"workflow": "chain", "extra": 1}', 422, "extra"),
        (b'{"workflow": "nosuch"}', 404, "nosuch"),
        (b'{"workflow": "chain", "run_id": "bad id!"}', 400, "run_id"),
        (b"[1, 2]", 422, "body"),
    ],
)
def test_bad_bodies_get_clear_4xx(
    api: tuple[Harness, httpx.Client], body: bytes, status: int, needle: str
) -> None:
    _, c = api
    resp = c.post("/runs", content=body, headers={"content-type": "application/json"})
    if status == 201:
        assert resp.status_code == 201
        return
    err = error_of(resp, status)
    assert needle in err["message"]


def test_oversize_body_is_413_before_parsing(api: tuple[Harness, httpx.Client]) -> None:
    _, c = api
    resp = c.post("/runs", content=b"x" * (1024 * 1024 + 1),
                  headers={"content-type": "application/json"})
    error_of(resp, 413)


def test_unknown_run_cancel_finished_and_bad_cursor(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    error_of(c.get("/runs/nope"), 404)
    error_of(c.post("/runs/nope/cancel", json={}), 404)
    run_id = c.post("/runs", json={"workflow": "chain"}).json()["run_id"]
    h.wait(run_id)
    assert "already finished" in error_of(c.post(f"/runs/{run_id}/cancel", json={}), 409)[
        "message"]
    error_of(c.get("/runs", params={"workflow": "chain", "cursor": "%%%"}), 400)
    error_of(c.get("/runs", params={"status": "bogus"}), 400)
    error_of(c.get("/runs", params={"workflow": "chain", "limit": "x"}), 400)


def test_openapi_document_is_served_and_valid(api: tuple[Harness, httpx.Client]) -> None:
    from openapi_spec_validator import validate

    h, c = api
    served = c.get("/openapi.json")
    # Served as built (its pinned form: tests/unit/test_openapi_document.py).
    assert served.content == JSONResponse(openapi_document(
        __version__, idempotency_retention=h.rt.settings.idempotency_retention)).body
    spec = served.json()
    validate(spec)
    assert set(spec["paths"]) >= {"/runs", "/runs/{run_id}", "/runs/{run_id}/cancel"}
    assert spec["components"]["schemas"]["StartRun"]["required"] == ["workflow"]
