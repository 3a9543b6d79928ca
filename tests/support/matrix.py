"""Shared parts of the feature-crossing tests (issue 37 §4): a WorkflowEnv whose manifest
also declares webhooks, one small app whose step records every call it takes, and the
trigger sources as one function each, every one answering in the same shape."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from functions.sdk import FunctionApp, StepRequest, TerminalError
from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.testing import WorkflowEnv
from orchestrator.webhook_signing import sign

WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Calls:
    """What the app's step really ran: (run id, step) in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[tuple[str, str]] = []

    def add(self, run_id: str, step: str) -> None:
        with self._lock:
            self._seen.append((run_id, step))

    def of(self, run_id: str) -> list[str]:
        with self._lock:
            return [s for r, s in self._seen if r == run_id]

    def runs(self) -> set[str]:
        with self._lock:
            return {r for r, _ in self._seen}


def make_app(calls: Calls) -> FunctionApp:
    """`/work` records its call and answers the input (it fails, terminally, when the
    input says `fail: true`); `/boom` always fails terminally."""
    app = FunctionApp(None, title="matrix")

    @app.step("/work")
    def work(req: StepRequest) -> Any:
        calls.add(req.run_id, req.step)
        if isinstance(req.input, dict) and req.input.get("fail"):
            raise TerminalError(f"{req.step} was told to fail")
        return {"step": req.step, "input": req.input}

    @app.step("/boom")
    def boom(req: StepRequest) -> Any:
        calls.add(req.run_id, req.step)
        raise TerminalError(f"{req.step} always fails")

    return app


class ManifestEnv(WorkflowEnv):
    """A WorkflowEnv whose manifest also carries top-level sections (`webhooks`), and
    more backends (`extra["backends"]`, beside the environment's `app`; their URL may
    be the app's, `${WORKFLOW_ENV_URL}`)."""

    def __init__(self, app: FunctionApp, *, extra: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.extra = dict(extra or {})

    def _manifest(self) -> tuple[str, dict[str, str]]:
        text, env = super()._manifest()
        doc = yaml.safe_load(text)
        extra = dict(self.extra)
        doc["backends"].update(extra.pop("backends", {}))
        doc.update(extra)
        return yaml.safe_dump(doc, sort_keys=False), env


@contextmanager
def http_api(env: WorkflowEnv) -> Iterator[httpx.Client]:
    """The real API (create_app) over `env`'s runtime, served by uvicorn: the triggers
    go over HTTP while the test pumps the worker with the environment's fake clock."""
    with BackgroundServer(create_app(env.rt)) as server, httpx.Client(
        base_url=server.url, timeout=30
    ) as client:
        yield client


@dataclass(frozen=True)
class Answer:
    """One trigger's answer, in the fields every start answer carries. A schedule fire
    answers nobody: its `fields` are None and the run's status tells the outcome."""

    run_id: str
    status_code: int | None
    fields: dict[str, Any] | None

    @property
    def outcome(self) -> str | None:
        return None if self.fields is None else self.fields["outcome"]


FIELDS = ("created", "duplicate", "debounced", "outcome")


def _fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    missing = [f for f in FIELDS if f not in doc]
    assert not missing, f"the answer lacks {missing}: {doc}"
    return {f: doc[f] for f in FIELDS}


def post_run(c: httpx.Client, workflow: str, input: Any, *, run_id: str | None = None,
             key: str | None = None, parent: str | None = None) -> Answer:
    body: dict[str, Any] = {"workflow": workflow, "input": input}
    if run_id is not None:
        body["run_id"] = run_id
    if parent is not None:  # a child run, as a durable parent's ctx.call starts one
        body["parent_run_id"] = parent
    headers = {"Idempotency-Key": key} if key is not None else {}
    r = c.post("/runs", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    doc = r.json()
    return Answer(doc["run_id"], r.status_code, _fields(doc))


def post_event(c: httpx.Client, name: str, data: Any, event_id: str) -> Answer:
    r = c.post("/events", json={"name": name, "id": event_id, "data": data})
    assert r.status_code in (200, 201), r.text
    [run] = r.json()["runs"]
    return Answer(run["run_id"], r.status_code, _fields(run))


def post_webhook(c: httpx.Client, env: WorkflowEnv, hook: str, data: Mapping[str, Any],
                 delivery_id: str) -> Answer:
    body = json.dumps(dict(data)).encode()
    # Signed at the orchestrator's (fake) time: it checks the timestamp against it.
    headers = sign("standard", WEBHOOK_SECRET, body, now=env.now, delivery_id=delivery_id)
    r = c.post(f"/webhooks/{hook}", content=body,
               headers={**headers, "content-type": "application/json"})
    assert r.status_code in (200, 202), r.text
    doc = r.json()
    return Answer(doc["run_id"], r.status_code, _fields(doc))


def post_rerun(c: httpx.Client, old: str, *, run_id: str | None = None,
               input: Any = None) -> Answer:
    body: dict[str, Any] = {"input": input}
    if run_id is not None:
        body["run_id"] = run_id
    r = c.post(f"/runs/{old}/rerun", json=body)
    assert r.status_code in (200, 201), r.text
    doc = r.json()
    return Answer(doc["run_id"], r.status_code, {"created": doc["created"]})


def webhook_section(workflows: list[str]) -> dict[str, Any]:
    """One standard-signed webhook per workflow, named `<workflow>-hook`."""
    return {"webhooks": {f"{wf}-hook": {
        "workflow": wf,
        "verify": {"scheme": "standard", "secrets": [WEBHOOK_SECRET]},
        "input": {"n": "body.n"},
    } for wf in workflows}}


Trigger = Callable[..., Answer]
