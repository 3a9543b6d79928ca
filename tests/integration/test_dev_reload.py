"""`orchestrator dev --reload`: the functions app's code changed on disk is served beside
the old as a new version, every open run is checked against it (the result printed),
new runs start on it, compatible runs move to it, diverging ones stay pinned to their
version, which keeps being served until no run is pinned to it. A real local stack (its
emulator in a process of its own), the new code in processes of their own, the API."""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.cli.dev import LocalStack, StackOptions

MANIFEST = """
backends:
  shop: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  order: { backend: shop, timeout: 30s }
"""

APP = """
from functions.durable import step, workflow
from functions.sdk import FunctionApp

VERSION = {version}


def create_app(secret=None):
    async def body():
        return {{"by": VERSION}}

    @workflow("order")
    async def order(ctx, payload):
        await step("reserve", body)
        if {audit}:
            await step("audit", body)
        await ctx.wait_for_signal("go")
        charged = await step("charge", body)
        return {{"charged_by": charged["by"]}}

    app = FunctionApp(secret=secret)
    app.workflow(order)
    return app
"""


def until(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    package = f"reloadapp{uuid.uuid4().hex[:6]}"
    root = tmp_path / "src"
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))

    def write(version: int, audit: bool = False) -> None:
        (root / package / "app.py").write_text(
            textwrap.dedent(APP.format(version=version, audit=audit)))

    write(1)
    write.spec = f"{package}.app:create_app"  # type: ignore[attr-defined]
    yield write
    for name in [m for m in sys.modules if m.startswith(package)]:
        del sys.modules[name]


@pytest.mark.slow
def test_a_change_is_served_beside_the_old_code_and_runs_stay_on_theirs(
        code: Any, tmp_path: Path) -> None:
    (tmp_path / "orchestrator.yml").write_text(MANIFEST)
    echoed: list[str] = []
    stack = LocalStack(StackOptions(
        manifest=tmp_path / "orchestrator.yml", api_port=0, functions_port=0,
        scripts_port=None, emulator_port=0, functions_app=code.spec, one_core=False,
        reload=True, prefix=f"rl{uuid.uuid4().hex[:6]}", environ={"ORCH_API_AUTH": "off"},
    ), echo=echoed.append)
    stack.start()
    try:
        rt = stack.runtime
        api = httpx.Client(base_url=stack.api_url, timeout=30)

        def start() -> str:
            run_id = str(api.post("/runs", json={"workflow": "order"}).json()["run_id"])
            until(lambda: (rt.store.drivers.get_driver(run_id) or _No()).waiting)
            return run_id

        def version(run_id: str) -> str | None:
            return rt.store.runs.get_run(run_id, time.time()).version

        def said(text: str) -> str:
            return until(lambda: next((line for line in echoed if text in line), None))

        first = rt.versions.current("shop")
        assert first is not None and first.startswith("h-")
        said("reload     watching")
        a = start()
        code(2)  # compatible: the same operations
        line = said("reload     r1-")
        assert "checked 1 open runs, 1 compatible (moved 1)" in line, line
        r1 = rt.versions.current("shop")
        assert r1 is not None and r1.startswith("r1-") and version(a) == r1
        b = start()
        code(3, audit=True)  # a new step before the wait: both runs diverge
        line = said("reload     r2-")
        assert "2 diverging stay pinned to their version" in line, line
        said(f"{a} (on {r1}) diverges at position 1: recorded signal 'go', issued step"
             " 'audit'")
        r2 = rt.versions.current("shop")
        assert r2 is not None and r2.startswith("r2-")
        c = start()
        assert (version(a), version(b), version(c)) == (r1, r1, r2)
        for run_id in (a, b, c):
            api.post(f"/runs/{run_id}/signals/go", json={})
        outputs = {run_id: until(lambda r=run_id: _ended(api, r)) for run_id in (a, b, c)}
        assert outputs == {a: {"charged_by": 2}, b: {"charged_by": 2}, c: {"charged_by": 3}}
        # No run is pinned to r1 any more: it is retired, its process stopped.
        said(f"reload     {r1} retired")
        assert set(rt.versions.registry("shop").live) == {r2}
    finally:
        stack.stop()


def _ended(api: httpx.Client, run_id: str) -> Any:
    view = api.get(f"/runs/{run_id}").json()
    if view["status"] == "running":
        return None
    assert view["status"] == "success", view
    return view["output"]


class _No:
    waiting = None
