"""`orchestrator dev --lambda`: the stack served through the Lambda handlers, invoked as
AWS invokes them (infra/lambda_local.py), on the embedded emulator: the demo, a webhook
delivery, a retrying step and a schedule tick run to success (the redelivery of a batch
whose invocation ran out of time: test_lambda_handlers.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import lambda_handlers as L
from orchestrator.cli.dev import LocalStack, StackOptions
from orchestrator.webhook_signing import sign

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = """
backends:
  fn: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  flaky:
    steps:
      try: { backend: fn, route: /flaky, retry: { max: 2, delay: 10ms } }
  ticking:
    schedule: { every: 2s }
    steps:
      one: { backend: fn, route: /echo }
  slow:
    steps:
      nap: { backend: fn, route: /echo, timeout: 50s }
  greet: { backend: fn, timeout: 20s }
webhooks:
  hook:
    workflow: chain
    verify: { scheme: github, secrets: ["hook-secret"] }
    input: { ref: body.ref }
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    tmp = tmp_path_factory.mktemp("lambda")
    (tmp / "orchestrator.yml").write_text(MANIFEST)
    mp = pytest.MonkeyPatch()
    s = LocalStack(StackOptions(
        manifest=tmp / "orchestrator.yml", api_port=0, functions_port=0, scripts_port=0,
        emulator_port=0,
        functions_app="tests.support.lambda_fns:create_app", sweep_interval=1.0,
        prefix="lam", lambda_mode=True,
        environ={"ORCH_API_AUTH": "off", "ORCH_REDISPATCH_AFTER": "2"},
    ), echo=lambda _: None)
    try:
        s.start()
        yield s
    finally:
        s.stop()
        L.forget()
        mp.undo()


def wait(stack: LocalStack, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        while True:
            view: dict[str, Any] = c.get(f"/runs/{run_id}").json()
            if view["status"] not in ("queued", "running"):
                return view
            assert time.monotonic() < deadline, view
            time.sleep(0.1)


def test_a_run_started_over_http_goes_through_the_handlers(stack: LocalStack) -> None:
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        r = c.post("/runs", json={"workflow": "chain", "input": {"n": 1}})
    assert r.status_code == 201, r.text
    view = wait(stack, r.json()["run_id"])
    assert view["status"] == "success"
    two = next(s for s in view["steps"] if s["step"] == "two")
    assert two["output"] == {"input": {"n": 1}, "steps": ["one"], "attempt": 1}


def test_a_signed_webhook_delivery_starts_a_run(stack: LocalStack) -> None:
    body = b'{"ref": "refs/heads/main"}'
    headers = {"content-type": "application/json",
               **sign("github", "hook-secret", body, now=time.time())}
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        r = c.post("/webhooks/hook", content=body, headers=headers)
        assert r.status_code == 202, r.text
        bad = c.post("/webhooks/hook", content=body,
                     headers={**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64})
        assert bad.status_code == 401
    view = wait(stack, r.json()["run_id"])
    assert view["status"] == "success" and view["input"] == {"ref": "refs/heads/main"}


def test_a_retrying_step_comes_back_through_the_timer_queue(stack: LocalStack) -> None:
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        run_id = c.post("/runs", json={"workflow": "flaky"}).json()["run_id"]
    view = wait(stack, run_id)
    assert view["status"] == "success"
    assert view["steps"][0]["attempts"] == 2 and view["steps"][0]["output"] == {"attempt": 2}


def test_a_durable_run_sleeps_waits_and_branches_through_the_handlers(stack: LocalStack
                                                                        ) -> None:
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        run_id = c.post("/runs", json={"workflow": "greet", "input": {"name": "ada"}}
                        ).json()["run_id"]
        deadline = time.monotonic() + 30
        while (c.get(f"/runs/{run_id}").json().get("waiting") or {}).get("kind") != "signal":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        sent = c.post(f"/runs/{run_id}/signals/go", json={"ok": True})
        assert sent.status_code == 202, sent.text
    view = wait(stack, run_id)
    assert view["status"] == "success", view
    assert view["output"] == {"hello": "ada", "go": {"ok": True},
                              "shouts": ["ada!0", "ada!1", "ada!2"]}
    kinds = [s["kind"] for s in view["steps"]]
    assert {"step", "sleep", "signal", "parallel"} <= set(kinds)


def test_a_shell_script_runs_through_the_lambda_script_host(stack: LocalStack) -> None:
    text = ('a="$(orchestrator step one -- echo uno)"\n'
            "orchestrator sleep 1s\n"
            'orchestrator step two -- echo "dos after $a"\n')
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        r = c.post("/scripts/runs", json={"name": "lambda-script", "text": text})
    assert r.status_code == 201, r.text
    view = wait(stack, r.json()["run_id"])
    assert view["status"] == "success", view
    assert view["output"] == {"exit_code": 0, "log": "dos after uno\n"}
    kinds = [(s["kind"], s["step"]) for s in view["steps"]][1:]
    assert kinds == [("step", "one"), ("sleep", "sleep"), ("step", "two")]


def test_a_schedule_tick_fires_through_the_scheduled_sweeper(stack: LocalStack) -> None:
    rt = stack.runtime
    deadline = time.monotonic() + 30
    while True:
        runs, _ = rt.store.runs.list_runs("ticking", time.time())
        done = [r for r in runs if r.status.value == "success"]
        if done:
            assert done[0].trigger is not None and done[0].trigger.source == "schedule"
            return
        assert time.monotonic() < deadline, "no tick fired"
        time.sleep(0.2)


def test_the_demo_runs_through_the_handlers() -> None:
    # A fresh shell's environment: none of what this module's stack set for its handlers.
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ORCH_", "AWS_", "FUNCTIONS_", "LAMBDA_"))}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "dev", "--lambda", "--exit-after-demo",
         "--port", "0", "--functions-port", "0", "--scripts-port", "0", "--emulator-port", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "monthly-report" in done.stdout and "success" in done.stdout


def test_the_handlers_containers_beat_at_the_end_of_their_invocations(stack: LocalStack
                                                                       ) -> None:
    with httpx.Client(base_url=stack.api_url, timeout=10) as c:
        run_id = c.post("/runs", json={"workflow": "chain", "input": {"n": 2}}).json()["run_id"]
        assert wait(stack, run_id)["status"] == "success"
        alive = c.get("/health").json()["processes"]["alive"]
    # A container's worker beat at its first invocation, the API's at its first request
    # (this one's, or an earlier one's: a beat is due once a beat).
    kinds = {p["kind"] for p in alive if p["id"].startswith("lambda:")}
    assert {"worker", "api"} <= kinds, alive
    worker = next(p for p in alive if p["kind"] == "worker")
    assert worker["every"] == 10.0 and worker["version"]
