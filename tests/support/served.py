"""A harness's stack served as a user reaches it: its workers started, the API on a real
uvicorn, an HTTP client of it; and the calls most tests make through it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.support.harness import Harness

__all__ = ["api_client", "found", "start_run"]


@contextmanager
def api_client(h: Harness, *, threads: int = 8) -> Iterator[httpx.Client]:
    """`h`'s workers started (`threads` each) and its API served: a client of it."""
    h.start_workers(threads=threads)
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
            base_url=server.url, timeout=60) as client:
        yield client


def start_run(c: httpx.Client, workflow: str, input: Any) -> str:
    """POST /runs: the new run's id (201 asserted)."""
    r = c.post("/runs", json={"workflow": workflow, "input": input})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def found(c: httpx.Client, **params: Any) -> list[str]:
    """GET /runs with `params` (a search's q, filters): the run ids, in order."""
    r = c.get("/runs", params=params)
    assert r.status_code == 200, r.text
    return [run["run_id"] for run in r.json()["runs"]]
