"""A live stack for durable shell scripts: the real Runtime on the emulator with a
worker and the sweeper as threads, a ScriptHost (signed) and the API over real HTTP,
and the `orchestrator` CLI driven in-process against that API."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from functions.sdk.scripts import ScriptHost
from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.presentation.script_log import script_log
from tests.support.cli import cli
from tests.support.harness import BuildHarness, Harness
from tests.support.polling import until

# Reference 002's recipes as scripts (the examples users run).
RECIPES = Path(__file__).resolve().parents[2] / "functions" / "examples" / "scripts"

MANIFEST = """
backends:
  scripts:
    url: "${SCRIPTS}"
    secret: "${SCRIPTS_SECRET}"
    capabilities: [shell]
workflows:
  noop:
    steps:
      one: { run: "true" }
"""


@dataclass
class ScriptStack:
    h: Harness
    api: str
    folder: Path

    def cli(self, *args: str) -> Any:
        return cli(*args, "--url", self.api)

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal entries, as GET /runs/{id}/journal serves them."""
        return list(httpx.get(f"{self.api}/runs/{run_id}/journal").json()["journal"])

    def steps(self, run_id: str) -> list[str]:
        """The names of the run's step entries, in order."""
        return [e["name"] for e in self.journal(run_id) if e.get("kind") == "step"]

    def recipe(self, name: str, text: str | None = None) -> str:
        """Recipe `name` of functions/examples/scripts, copied into this stack's folder
        (`text`: its text with a substitution); its path there."""
        path = self.folder / name
        path.write_text(text if text is not None else (RECIPES / name).read_text())
        return str(path)

    def runs_of(self, workflow: str, n: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The runs of `workflow` once `n` exist and all have ended, oldest first."""
        rt = self.h.rt
        deadline = time.monotonic() + timeout
        while True:
            listed, _ = rt.store.runs.list_runs(workflow, rt.clock(), limit=100)
            ended = [r for r in listed if r.status.terminal]
            if len(listed) >= n and len(ended) == len(listed):
                views = [rt.runs.view(r.run_id) for r in listed]
                return sorted(views, key=lambda v: v["created_at"])
            if time.monotonic() > deadline:
                raise AssertionError(f"{workflow}: {len(ended)} of {n} runs ended")
            time.sleep(0.05)


def poll(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """probe()'s first truthy answer, polled under a deadline (no fixed sleeps)."""
    return until(what, probe, timeout, every=0.05)


def log_of(view: dict[str, Any]) -> str:
    """A script run's log (presentation/script_log.py), "" for none."""
    return script_log(view) or ""


@contextmanager
def script_stack(build_harness: BuildHarness, tmp: Path, manifest: str = MANIFEST,
                 **settings: object) -> Iterator[ScriptStack]:
    secret = secrets.token_hex(8)
    with BackgroundServer(ScriptHost(secret).app) as host:
        h = build_harness(manifest, tmp, {"SCRIPTS": host.url, "SCRIPTS_SECRET": secret},
                          **settings)
        try:
            h.start_workers(1, threads=8)
            h.start_sweeper()
            with BackgroundServer(create_app(h.rt)) as api:
                yield ScriptStack(h, api.url, tmp)
        finally:
            h.close()
