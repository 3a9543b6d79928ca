"""The AWS model's Lambda limits (infra/lambda_limits.py) in `dev --lambda`'s fronts and
mappings (infra/lambda_local.py): real uvicorn, real httpx, real moto SQS through boto3;
the invocation delay drawn with a seeded stream and a sleep that records."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml

from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from infra.emulator.aws_model import DEFAULT_FILE, load
from infra.lambda_limits import LambdaLimits
from infra.lambda_local import EventFront, QueueMapping
from orchestrator import lambda_handlers
from orchestrator.cli.dev import LocalStack, StackOptions

DEADLINE = 15.0


class Slept:
    """A sleep that records, and sleeps no time."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.seconds.append(seconds)


def _model_file(tmp_path: Path, concurrency: int, p50_ms: float | None = None) -> Path:
    """The shipped model with `lambda.concurrency` (and the Lambda p50) changed."""
    data: dict[str, Any] = yaml.safe_load(DEFAULT_FILE.read_text())
    data["lambda"]["concurrency"] = concurrency
    if p50_ms is not None:
        data["latency"]["lambda"]["default"].update(p50_ms=p50_ms, p99_ms=p50_ms * 2)
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"still not {what}"
        time.sleep(0.01)


class Blocking:
    """A handler that answers 200 once `go` is set, counting who is inside."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.inside = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with self._lock:
            self.inside += 1
        self.go.wait(DEADLINE)
        return {"statusCode": 200, "body": "done"}


def _post_in_background(url: str, answers: list[httpx.Response]) -> threading.Thread:
    def post() -> None:
        answers.append(httpx.post(url, content=b"{}", timeout=DEADLINE))

    t = threading.Thread(target=post, daemon=True)
    t.start()
    return t


def test_a_function_url_over_the_concurrency_answers_429(tmp_path: Path) -> None:
    slept = Slept()
    limits = LambdaLimits.from_model(load(_model_file(tmp_path, concurrency=2)),
                                     seed=1, sleep=slept)
    url_handler, api_handler = Blocking(), Blocking()
    # Two functions of one account: a Function URL and an HTTP API share its pool.
    function_url = EventFront(url_handler, function_url=True, limits=limits)
    http_api = EventFront(api_handler, limits=limits)
    with BackgroundServer(function_url) as fn, BackgroundServer(http_api) as api:
        answers: list[httpx.Response] = []
        threads = [_post_in_background(f"{fn.url}/a", answers),
                   _post_in_background(f"{api.url}/b", answers)]
        _until(lambda: url_handler.inside == 1 and api_handler.inside == 1,
               "two invocations in flight")
        assert limits.running == 2

        throttled = httpx.post(f"{fn.url}/c", content=b"{}", timeout=DEADLINE)
        assert throttled.status_code == 429
        assert throttled.headers["x-amzn-ErrorType"] == "TooManyRequestsException"
        assert throttled.json() == {"Message": "Rate Exceeded."}
        # API Gateway turns Lambda's refusal into its own 500.
        refused = httpx.post(f"{api.url}/d", content=b"{}", timeout=DEADLINE)
        assert refused.status_code == 500
        assert refused.json() == {"message": "Internal server error"}
        assert url_handler.inside == 1 and api_handler.inside == 1  # neither was invoked
        assert limits.throttled == 2 and limits.throttled_api == 1

        url_handler.go.set()
        api_handler.go.set()
        for t in threads:
            t.join(DEADLINE)
        assert [a.status_code for a in answers] == [200, 200]
        after = httpx.post(f"{fn.url}/e", content=b"{}", timeout=DEADLINE)
        assert after.status_code == 200 and after.text == "done"
    assert limits.running == 0 and limits.peak == 2
    # Every invocation waited its delay first, the throttled ones too.
    assert len(slept.seconds) == 5 and all(s > 0 for s in slept.seconds)


def test_a_front_runs_as_many_invocations_as_the_account_allows(tmp_path: Path) -> None:
    # More than the loop's default executor has threads (min(32, cores + 4)): the front
    # runs on a pool of its own, so the account's limit, not a thread pool, is what
    # answers 429.
    n = 40
    limits = LambdaLimits.from_model(load(_model_file(tmp_path, concurrency=n)),
                                     seed=1, sleep=Slept())
    handler = Blocking()
    with BackgroundServer(EventFront(handler, function_url=True, limits=limits)) as fn:
        answers: list[httpx.Response] = []
        threads = [_post_in_background(f"{fn.url}/{i}", answers) for i in range(n)]
        try:
            _until(lambda: handler.inside == n, f"{n} invocations in flight")
            assert limits.running == n
            over = httpx.post(f"{fn.url}/over", content=b"{}", timeout=DEADLINE)
            assert over.status_code == 429
        finally:
            handler.go.set()
            for t in threads:
                t.join(DEADLINE)
    assert [a.status_code for a in answers] == [200] * n and limits.running == 0


def test_a_freed_slot_goes_at_once_to_an_invocation_waiting_for_one() -> None:
    # A mapping waiting to poll (`until_free`, takes no slot) and a schedule waiting for a
    # slot (`acquire`): a release wakes both, so the schedule need not wait for its poll.
    limits = LambdaLimits(1, None)
    stop = threading.Event()
    assert limits.try_acquire()
    polled = threading.Thread(target=limits.until_free, args=(stop, 3600), daemon=True)
    polled.start()
    _until(lambda: limits.waiting == 1, "the mapping waiting")  # first in line
    took = threading.Event()
    taker = threading.Thread(target=lambda: limits.acquire(stop, 3600) and took.set(),
                             daemon=True)
    taker.start()
    _until(lambda: limits.waiting == 2, "the schedule waiting too")
    limits.release()
    try:
        assert took.wait(DEADLINE), "the freed slot was not taken (woken by its poll only)"
        assert limits.running == 1
    finally:
        stop.set()
        if took.is_set():
            limits.release()  # wakes the mapping too, if it went back to waiting
        polled.join(DEADLINE)
        taker.join(DEADLINE)


@pytest.fixture
def sqs() -> Iterator[Any]:
    with Emulator() as emulator:
        session = boto3.session.Session(aws_access_key_id="local",
                                        aws_secret_access_key="local", region_name="us-east-1")
        yield session.client("sqs", endpoint_url=emulator.url)


class Recording:
    """A worker handler that records each message it handles and how many invocations
    ran at once; each invocation works a few milliseconds, so that overlaps would show."""

    def __init__(self) -> None:
        self.bodies: Counter[str] = Counter()
        self.inside = 0
        self.most = 0
        self._lock = threading.Lock()
        self._work = threading.Event()  # never set: a wait that lasts its timeout

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self._work.wait(0.005)
        with self._lock:
            self.inside -= 1
            self.bodies.update(r["body"] for r in event["Records"])
        return {"batchItemFailures": []}


def _counts(sqs: Any, url: str) -> tuple[int, int]:
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return (int(got["ApproximateNumberOfMessages"]),
            int(got["ApproximateNumberOfMessagesNotVisible"]))


def test_a_throttled_mapping_leaves_its_messages_and_runs_one_at_a_time(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="limited")["QueueUrl"]
    bodies = [f"m{i}" for i in range(24)]
    for i in range(0, len(bodies), 10):
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(j), "MessageBody": b} for j, b in enumerate(bodies[i:i + 10])])
    limits = LambdaLimits(1, load(DEFAULT_FILE).latency_of("lambda", "default"), seed=3,
                          sleep=Slept())
    handler = Recording()
    # Up to four invocations of its own, but the account allows one.
    mapping = QueueMapping(sqs, url, handler, concurrency=4, batch_size=2, limits=limits)
    stop = threading.Event()
    other = threading.Event()
    assert limits.acquire(other)  # another function of the account holds the only slot
    runner = threading.Thread(target=mapping.run, args=(stop,), daemon=True)
    runner.start()
    try:
        _until(lambda: limits.waiting >= 1, "waiting for a slot")
        # Throttled, the mapping has received nothing: every message is still visible.
        assert _counts(sqs, url) == (len(bodies), 0)
        assert not handler.bodies
        limits.release()
        _until(lambda: sum(handler.bodies.values()) >= len(bodies), "all handled")
        _until(lambda: _counts(sqs, url) == (0, 0), "all deleted")
    finally:
        stop.set()
        runner.join(DEADLINE)
    assert not runner.is_alive()
    assert handler.bodies == Counter(bodies)  # each exactly once
    assert handler.most == 1 and limits.peak == 1
    assert limits.running == 0


def test_the_delay_follows_the_models_distribution() -> None:
    model = load(DEFAULT_FILE)
    latency = model.latency_of("lambda", "default")
    assert latency is not None
    slept = Slept()
    limits = LambdaLimits.from_model(model, seed=20261206, sleep=slept)
    for _ in range(2000):
        limits.wait()
    assert len(slept.seconds) == 2000 and min(slept.seconds) > 0
    median = statistics.median(slept.seconds)
    assert median == pytest.approx(latency.p50_ms / 1000, rel=0.06)
    over_p99 = sum(s > latency.p99_ms / 1000 for s in slept.seconds) / 2000
    assert 0.002 < over_p99 < 0.025
    # Seeded: the same seed draws the same delays.
    again = Slept()
    replay = LambdaLimits.from_model(model, seed=20261206, sleep=again)
    for _ in range(20):
        replay.wait()
    assert again.seconds == slept.seconds[:20]


def test_without_a_model_there_is_no_limiter(tmp_path: Path) -> None:
    handler = Blocking()
    front = EventFront(handler, function_url=True)
    assert front.limits is None
    with BackgroundServer(front) as fn:
        answers: list[httpx.Response] = []
        threads = [_post_in_background(fn.url, answers) for _ in range(3)]
        _until(lambda: handler.inside == 3, "three invocations in flight")
        handler.go.set()
        for t in threads:
            t.join(DEADLINE)
    assert [a.status_code for a in answers] == [200, 200, 200]

    manifest = tmp_path / "orchestrator.yml"
    stack = LocalStack(StackOptions(manifest=manifest, lambda_mode=True, environ={}),
                       echo=lambda _: None)
    assert stack._lambda_limits() is None  # no model: every front and mapping gets None
    stack.aws_model = load(_model_file(tmp_path, concurrency=7))
    shared = stack._lambda_limits()
    assert isinstance(shared, LambdaLimits) and shared.concurrency == 7
    assert stack._lambda_limits() is shared  # one account: one pool for the whole stack


MANIFEST = """
backends:
  fn: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


def _through_api(c: httpx.Client, limits: LambdaLimits, method: str, path: str,
                 **kwargs: Any) -> httpx.Response:
    """A call to the API, made again while API Gateway answers that Lambda throttled it
    (the account's slots are shared with the workers and the functions they call). A 500
    the limiter did not throttle (its count of throttled API invocations did not move:
    this test is the API's only caller) is the handler's own: a failure."""
    answer: httpx.Response | None = None

    def answered() -> bool:
        nonlocal answer
        before = limits.throttled_api
        answer = c.request(method, path, **kwargs)
        if answer.status_code != 500:
            return True
        assert limits.throttled_api > before, f"{method} {path}: {answer.text}"
        assert answer.json() == {"message": "Internal server error"}
        return False

    _until(answered, f"answered {method} {path}")
    assert answer is not None
    return answer


@pytest.mark.slow
def test_dev_lambda_with_the_aws_model_runs_a_workflow(tmp_path: Path) -> None:
    (tmp_path / "orchestrator.yml").write_text(MANIFEST)
    model = _model_file(tmp_path, concurrency=4, p50_ms=5)
    stack = LocalStack(StackOptions(
        manifest=tmp_path / "orchestrator.yml", api_port=0, functions_port=0, scripts_port=0,
        emulator_port=0, functions_app="tests.support.lambda_fns:create_app",
        sweep_interval=1.0, prefix="lamodel", lambda_mode=True, aws_model=str(model),
        one_core=False, environ={"ORCH_API_AUTH": "off"},
    ), echo=lambda _: None)
    try:
        stack.start()
        limits = stack._lambda_limits()
        assert isinstance(limits, LambdaLimits) and limits.concurrency == 4
        with httpx.Client(base_url=stack.api_url, timeout=DEADLINE) as c:
            r = _through_api(c, limits, "POST", "/runs",
                             json={"workflow": "chain", "input": {"n": 1}})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
            view: dict[str, Any] = {}

            def finished() -> bool:
                nonlocal view
                view = _through_api(c, limits, "GET", f"/runs/{run_id}").json()
                return view["status"] not in ("queued", "running")

            _until(finished, "finished")
        assert view["status"] == "success", json.dumps(view)
        two = next(s for s in view["steps"] if s["step"] == "two")
        assert two["output"]["steps"] == ["one"]
        assert 1 <= limits.peak <= 4 and limits.running <= 4
    finally:
        stack.stop()
        lambda_handlers.forget()
