"""The Lambda handlers (`orchestrator.lambda_handlers`), invoked as AWS invokes them: HTTP
API and Function URL events (bodies as text and base64), SQS batches taken from the real
queues on the emulator, and the sweeper with an invocation's countdown. The container is
built from the environment and a manifest file, as on Lambda."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.lambda_events import Context, http_event, sqs_event
from orchestrator import lambda_handlers as L
from orchestrator.webhook_signing import sign
from tests.support.harness import Harness, steps_of
from tests.support.polling import until
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo, timeout: 10s }
      two: { backend: fn, route: /echo, dependsOn: [one], timeout: 100s }
  slow:
    steps:
      nap: { backend: fn, route: /slow, payload: { seconds: 1.0 }, timeout: 10s }
  latched:
    steps:
      nap: { backend: fn, route: /latch, timeout: 10s }
  hooked:
    steps:
      one: { backend: fn, route: /echo }
webhooks:
  github:
    workflow: hooked
    verify: { scheme: github, secrets: ["s3cret"] }
    input: { ref: body.ref }
"""


@pytest.fixture
def lam(harness_factory: Any, testfns: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """A deployed stack (the harness's tables and queues) and a Lambda container
    configured for it through the environment, as template.yaml configures one."""
    h = harness_factory(MANIFEST)
    (tmp_path / "orchestrator.yml").write_text(MANIFEST)
    s = h.rt.settings
    env = {"LAMBDA_TASK_ROOT": str(tmp_path), "ORCH_MANIFEST": "orchestrator.yml",
           "ORCH_PREFIX": s.prefix, "AWS_ENDPOINT_URL": s.endpoint_url or "",
           "ORCH_API_AUTH": "off", "ORCH_SWEEP_INTERVAL": "0.5",
           "ORCH_REDISPATCH_AFTER": "1", "ORCH_WAKE_LAG": "0.1", "FN": testfns}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    L.forget()
    yield h
    L.forget()


def call_api(method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json", **kw.pop("headers", {})}
    out = L.api(http_event(method, path, body=raw, headers=headers, **kw), Context())
    text = out.get("body") or ""
    return out["statusCode"], json.loads(text) if text else None


def receive(h: Harness, n: int = 10) -> list[dict[str, Any]]:
    """What the event source mapping would take from the dispatch queue."""
    q = h.rt.queues.dispatch_url
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        got += h.rt.clients.sqs.receive_message(
            QueueUrl=q, MaxNumberOfMessages=min(10, n - len(got)), WaitTimeSeconds=1,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])
    return got


def run_worker(h: Harness, messages: list[dict[str, Any]], timeout: float = 120.0) -> Any:
    arn = h.rt.clients.sqs.get_queue_attributes(
        QueueUrl=h.rt.queues.dispatch_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return L.worker(sqs_event(messages, arn), Context(timeout=timeout))


@pytest.mark.parametrize("function_url", [False, True])
def test_the_api_answers_http_api_and_function_url_events(lam: Harness,
                                                         function_url: bool) -> None:
    status, run = call_api("POST", "/runs", {"workflow": "chain", "input": {"x": 1}},
                           function_url=function_url)
    assert status == 201, run
    status, view = call_api("GET", f"/runs/{run['run_id']}", function_url=function_url)
    assert status == 200 and view["status"] == "running" and view["input"] == {"x": 1}
    status, err = call_api("POST", "/runs", {"workflow": "nope"}, function_url=function_url)
    assert 400 <= status < 500 and err["error"]["code"]


@pytest.mark.parametrize("base64_body", [False, True])
def test_a_webhook_is_verified_on_the_bytes_the_sender_signed(lam: Harness,
                                                             base64_body: bool) -> None:
    # Spacing and key order a re-serialization would change: the signature is over these.
    body = b'{"ref":  "refs/heads/main",   "after" : "abc"}'
    headers = {"content-type": "application/json",
               **sign("github", "s3cret", body, now=time.time())}
    out = L.api(http_event("POST", "/webhooks/github", headers=headers, body=body,
                           base64_body=base64_body), Context())
    assert out["statusCode"] == 202, out
    run_id = json.loads(out["body"])["run_id"]
    assert lam.rt.runs.view(run_id)["input"] == {"ref": "refs/heads/main"}
    bad = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
    out = L.api(http_event("POST", "/webhooks/github", headers=bad, body=body,
                           base64_body=base64_body), Context())
    assert out["statusCode"] == 401


def test_the_container_is_built_once(lam: Harness) -> None:
    call_api("GET", "/healthz")
    first = L.container()
    call_api("GET", "/healthz")
    assert L.container() is first


def test_a_batch_runs_its_records_at_once_and_a_duplicate_is_a_success(
    lam: Harness, recorder: Recorder
) -> None:
    ids = [lam.start("latched") for _ in range(4)]
    msgs = receive(lam, 4)
    assert len(msgs) == 4
    copy = dict(msgs[0], MessageId="copy-of-0")  # delivered twice in one batch
    # At once: every call begins while the others are held at their latches, opened only
    # once all four have begun (a 1 s sleep could end before a loaded machine starts
    # the fourth); run one by one, the first would hold until its timeout.
    together: list[bool] = []

    def open_once_all_began() -> None:
        try:  # (within the calls' 10 s timeout)
            together.append(until("all four calls begun", lambda: sum(
                len(recorder.for_step(r, "nap")) for r in ids) >= 4, timeout=8.0))
        finally:
            for r in ids:
                recorder.latch(r).set()

    opener = threading.Thread(target=open_once_all_began, daemon=True)
    opener.start()
    out = run_worker(lam, [*msgs, copy])
    opener.join(timeout=30)
    assert together == [True]
    assert out == {"batchItemFailures": []}
    calls = [c for r in ids for c in recorder.for_step(r, "nap")]
    assert len(calls) == 4  # the copy's claim failed: nothing ran twice
    for r in ids:
        assert lam.rt.runs.view(r)["status"] == "success"


def test_a_record_that_cannot_end_in_time_is_not_started_and_comes_back(
    lam: Harness, recorder: Recorder
) -> None:
    run_id = lam.start("slow")  # a 10 s timeout: it needs 15 s with the margin
    (msg,) = receive(lam, 1)
    out = run_worker(lam, [msg], timeout=12.0)
    assert out == {"batchItemFailures": [{"itemIdentifier": msg["MessageId"]}]}
    assert recorder.for_step(run_id, "nap") == []
    # Not claimed: the root's row, which its claim would create, is not written.
    assert lam.rt.store.steps.get_step(run_id, "nap") is None
    (again,) = receive(lam, 1)  # handed back visible at once, not after the timeout
    assert again["MessageId"] == msg["MessageId"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    out = run_worker(lam, [again])  # a fresh invocation with room for it
    assert out == {"batchItemFailures": []}
    assert lam.rt.runs.view(run_id)["status"] == "success"


def test_a_chain_goes_on_inline_only_while_its_next_step_fits(
    lam: Harness, recorder: Recorder
) -> None:
    roomy = lam.start("chain")
    (msg,) = receive(lam, 1)
    assert run_worker(lam, [msg]) == {"batchItemFailures": []}
    assert lam.rt.runs.view(roomy)["status"] == "success"  # `two` ran inline

    tight = lam.start("chain")
    (msg,) = receive(lam, 1)
    # Room for `one` (10 s timeout + 5 s margin) but not for `two` (100 s) after it.
    assert run_worker(lam, [msg], timeout=60.0) == {"batchItemFailures": []}
    # Not promoted: its row, which the start left out, is still unwritten.
    assert lam.rt.store.steps.get_step(tight, "two") is None
    two = steps_of(lam.rt.runs.view(tight))["two"]
    assert two["status"] == "blocked"
    assert recorder.for_step(tight, "two") == []
    (nxt,) = receive(lam, 1)  # its dispatch went to the queue instead
    assert json.loads(nxt["Body"])["step"] == "two"
    assert run_worker(lam, [nxt]) == {"batchItemFailures": []}
    assert lam.rt.runs.view(tight)["status"] == "success"


def test_a_record_that_is_not_ours_is_dropped_not_retried(lam: Harness) -> None:
    out = run_worker(lam, [{"MessageId": "m1", "ReceiptHandle": "r1", "Body": "hello"}])
    assert out == {"batchItemFailures": []}


def test_the_sweeper_sweeps_until_its_time_is_nearly_up(lam: Harness) -> None:
    # A dispatch lost before any worker took it: the sweeper sends it again.
    run_id = lam.start("chain")
    lam.rt.clients.sqs.purge_queue(QueueUrl=lam.rt.queues.dispatch_url)
    t0 = time.monotonic()
    out = L.sweeper({"source": "aws.events"}, Context(timeout=7.0))
    took = time.monotonic() - t0
    # Passes every 0.5 s until less than an interval and the margin (0.5 s) is left.
    assert out["passes"] >= 4 and took < 7.0, out
    assert out["redispatched"] >= 1, out
    (msg,) = receive(lam, 1)
    assert json.loads(msg["Body"])["step"] == "one"
    assert run_worker(lam, [msg]) == {"batchItemFailures": []}
    assert steps_of(lam.rt.runs.view(run_id))["two"]["status"] == "success"


# ---- the user's functions behind the same adapter -----------------------------------------


def test_a_functions_app_answers_signed_calls_behind_its_lambda_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from functions.sdk import lambda_adapter
    from functions.sdk.signing import signed_headers

    monkeypatch.setenv("FUNCTIONS_APP", "functions.examples.noop:create_app")
    monkeypatch.setenv("FUNCTIONS_SECRET", "fn-secret")
    lambda_adapter._built.clear()
    body = json.dumps({"input": {}, "run": {"run_id": "r1", "workflow": "w", "step": "s",
                                            "attempt": 1}}).encode()
    headers = {"content-type": "application/json", "idempotency-key": "r1/s",
               **signed_headers("fn-secret", body, time.time())}
    for base64_body in (False, True):
        out = lambda_adapter.handler(http_event("POST", "/noop", headers=headers, body=body,
                                                base64_body=base64_body, function_url=True),
                                     Context())
        assert out["statusCode"] == 200, out
        assert json.loads(out["body"]) == {"ok": True}
    unsigned = {"content-type": "application/json"}
    out = lambda_adapter.handler(http_event("POST", "/noop", headers=unsigned, body=body,
                                            function_url=True), Context())
    assert out["statusCode"] == 401
    lambda_adapter._built.clear()


def test_an_idle_sweeper_stops_after_one_pass(lam: Harness) -> None:
    # Nothing in flight and no schedule in the manifest: one pass, then the invocation
    # ends instead of sweeping an idle stack for a minute.
    out = L.sweeper({"source": "aws.events"}, Context(timeout=60.0))
    assert out["passes"] == 1 and out["idle"] == 1, out


def test_a_sweeper_stays_for_a_schedule_tick_due_before_its_end(
    lam: Harness, tmp_path: Path
) -> None:
    (tmp_path / "orchestrator.yml").write_text(MANIFEST.replace(
        "  hooked:\n", "  ticking:\n    schedule: { every: 2s }\n    steps:\n"
        "      one: { backend: fn, route: /echo }\n  hooked:\n"))
    L.forget()
    out = L.sweeper({"source": "aws.events"}, Context(timeout=8.0))
    # Kept sweeping for the tick (every 0.5 s until one interval and the margin are left)
    # and fired it; an idle stack would have stopped after one pass.
    assert out["passes"] >= 2 and "idle" not in out, out
    runs, _ = lam.rt.store.runs.list_runs("ticking", time.time())
    assert runs, "the schedule's tick did not fire"


def test_a_mapping_redelivers_a_batch_whose_invocation_ran_out_of_time(
    lam: Harness, recorder: Recorder
) -> None:
    from infra.lambda_local import QueueMapping

    run_id = lam.start("slow")  # 10 s timeout + 5 s margin
    mapping = QueueMapping(lam.rt.clients.sqs, lam.rt.queues.dispatch_url, L.worker)
    first = mapping.poll_once(wait=2, timeout=12.0)
    assert first is not None and len(first["batchItemFailures"]) == 1
    assert recorder.for_step(run_id, "nap") == []
    # Not deleted, and back at once rather than after the queue's visibility timeout.
    assert mapping.poll_once(wait=2, timeout=120.0) == {"batchItemFailures": []}
    assert lam.rt.runs.view(run_id)["status"] == "success"
    assert mapping.poll_once(wait=1) is None  # deleted once handled
