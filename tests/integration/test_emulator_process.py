"""The embedded emulator in a process of its own (`orchestrator dev`'s default): the
clients it is attached to and plain HTTP clients share one linearizable state, its
answers (errors included) are the in-process emulator's, a long-poll holds only its own
connection, and the process ends with its parent, not with a Ctrl-C or a SIGTERM sent to
the process group. Its socket finds a short enough path under a long TMPDIR, and
`orchestrator dev` comes up with the in-process emulator when the process does not
start."""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from infra.emulator import Emulator
from infra.emulator.process import SOCKET_PATH_MAX, EmulatorProcess, unavailable
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.cli.dev import LocalStack, StackOptions
from orchestrator.errors import OrchestratorError
from orchestrator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RACERS = 12
ROUNDS = 15


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorProcess]:
    with EmulatorProcess() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def attached(emulator: EmulatorProcess) -> Clients:
    settings = Settings(endpoint_url=emulator.url, prefix="emuproc")
    clients: Clients = emulator.attach(make_clients(settings, max_pool=RACERS + 4))
    return clients


@pytest.fixture(scope="module")
def over_http(emulator: EmulatorProcess) -> Clients:
    return make_clients(Settings(endpoint_url=emulator.url, prefix="emuproc"),
                        max_pool=RACERS + 4)


def _table(clients: Clients, name: str = "") -> str:
    name = name or f"emu-{uuid.uuid4().hex[:8]}"
    clients.dynamodb.create_table(
        TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST")
    return name


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie (ended, not yet reaped) has ended too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_attached_and_http_clients_share_one_state_and_race_with_one_winner(
    attached: Clients, over_http: Clients
) -> None:
    table = _table(attached)
    assert over_http.dynamodb.describe_table(TableName=table)["Table"]["TableName"] == table
    key = {"pk": {"S": "lock"}}
    outcomes: list[list[str]] = [[] for _ in range(ROUNDS)]
    barrier = threading.Barrier(RACERS)

    def racer(me: int) -> None:
        client = (attached if me % 2 else over_http).dynamodb
        for round_ in range(ROUNDS):
            barrier.wait(timeout=30)
            try:
                client.update_item(
                    TableName=table, Key=key,
                    UpdateExpression="SET #owner = :me, version = :next",
                    ConditionExpression="attribute_not_exists(#owner) OR version = :v",
                    ExpressionAttributeNames={"#owner": "owner"},
                    ExpressionAttributeValues={":me": {"S": str(me)},
                                               ":v": {"N": str(round_)},
                                               ":next": {"N": str(round_ + 1)}})
            except ClientError as exc:
                outcomes[round_].append(exc.response["Error"]["Code"])
            else:
                outcomes[round_].append("won")

    with ThreadPoolExecutor(RACERS) as pool:
        for future in [pool.submit(racer, me) for me in range(RACERS)]:
            future.result()
    for round_, results in enumerate(outcomes):
        assert sorted(results) == (["ConditionalCheckFailedException"] * (RACERS - 1)
                                   + ["won"]), f"round {round_}"
    item = over_http.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["version"] == {"N": str(ROUNDS)}


def _answers(clients: Clients, table: str) -> list[Any]:
    """What a few requests answer, errors included (request ids and dates left out)."""
    ddb, out = clients.dynamodb, []
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "n": {"N": "1"},
                                        "tags": {"SS": ["x", "y"]}, "blob": {"B": b"\x00\x01"}})
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_item", {"Key": {"pk": {"S": "a"}}}),
        ("update_item", {"Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET n = n + :one",
                         "ExpressionAttributeValues": {":one": {"N": "1"}},
                         "ReturnValues": "ALL_NEW"}),
        ("put_item", {"Item": {"pk": {"S": "a"}}, "ConditionExpression": "n = :z",
                      "ExpressionAttributeValues": {":z": {"N": "0"}},
                      "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}),
        ("update_item", {"Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET n = missing + :one",
                         "ExpressionAttributeValues": {":one": {"N": "1"}}}),
        ("update_item", {"Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET = broken"}),
        ("get_item", {"Key": {"nope": {"S": "a"}}}),
    ]
    for method, kwargs in calls:
        try:
            answer = getattr(ddb, method)(TableName=table, **kwargs)
        except ClientError as exc:
            out.append((exc.response["Error"], exc.response.get("Item"),
                        exc.response["ResponseMetadata"]["HTTPStatusCode"]))
        else:
            answer.pop("ResponseMetadata")
            out.append(answer)
    return out


def test_its_answers_and_errors_are_the_in_process_emulators(attached: Clients) -> None:
    with Emulator() as local:
        here = local.attach(make_clients(Settings(endpoint_url=local.url, prefix="emuproc")))
        expected = _answers(here, _table(here, "emu-same-answers"))
    assert _answers(attached, _table(attached, "emu-same-answers")) == expected
    assert len(expected) == 6 and sum(isinstance(a, tuple) for a in expected) == 4


def test_sqs_s3_and_cloudformation_go_through_it(attached: Clients, over_http: Clients
                                                 ) -> None:
    url = attached.sqs.create_queue(QueueName=f"emu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    attached.sqs.send_message(QueueUrl=url, MessageBody="hello")
    got = over_http.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in got] == ["hello"]
    bucket = f"emu-{uuid.uuid4().hex[:8]}"
    attached.s3.create_bucket(Bucket=bucket)
    attached.s3.put_object(Bucket=bucket, Key="k", Body=b"\x00bytes\xff")
    assert over_http.s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"\x00bytes\xff"
    assert isinstance(attached.cloudformation.list_stacks()["StackSummaries"], list)


def test_a_long_poll_holds_only_its_own_connection(attached: Clients) -> None:
    table = _table(attached)
    url = attached.sqs.create_queue(QueueName=f"emu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    # A read held behind the polls would take about their whole wait (the first starts
    # with them); a loaded 2-core machine stalls a read for up to a second now and then.
    wait_seconds = 4
    polls: list[float] = []

    def long_poll() -> None:
        started = time.monotonic()
        attached.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=wait_seconds)
        polls.append(time.monotonic() - started)

    pollers = [threading.Thread(target=long_poll) for _ in range(3)]
    for poller in pollers:
        poller.start()
    latencies = []
    while any(p.is_alive() for p in pollers):
        started = time.monotonic()
        attached.dynamodb.get_item(TableName=table, Key={"pk": {"S": "x"}})
        latencies.append(time.monotonic() - started)
    for poller in pollers:
        poller.join()
    assert len(polls) == 3 and min(polls) >= wait_seconds - 0.1
    assert len(latencies) >= 10 and max(latencies) < wait_seconds * 0.6


def test_signals_to_the_group_leave_its_end_to_the_parent() -> None:
    emulator = EmulatorProcess().start()
    clients = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))
    for sig in (signal.SIGINT, signal.SIGTERM):
        os.kill(emulator.pid, sig)
    # Both were delivered (a signal is handled before the next request is): still serving.
    clients.dynamodb.list_tables()
    pid = emulator.pid
    emulator.stop()
    assert _gone(pid)
    with pytest.raises(RuntimeError, match="not running"):
        _ = emulator.pid


PARENT = """
import sys, time
from infra.emulator.process import EmulatorProcess
emulator = EmulatorProcess().start()
print(emulator.pid, emulator.url, flush=True)
time.sleep(600)
"""


def test_it_ends_when_its_parent_dies() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert parent.stdout is not None
        pid_text, url = parent.stdout.readline().split()
        pid = int(pid_text)
        assert make_clients(Settings(endpoint_url=url)).dynamodb.list_tables()["TableNames"] \
            is not None
        parent.kill()  # SIGKILL: no clean-up of any kind
        parent.wait(timeout=10)
        _until(lambda: _gone(pid), 15, f"the emulator process {pid} outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


EXITING_PARENT = """
import sys
from infra.emulator.process import EmulatorProcess
emulator = EmulatorProcess().start()
print(emulator.pid, flush=True)
sys.exit(0)  # without stop(): its socket's directory goes with this interpreter
"""


def test_a_parent_that_exits_without_stopping_it_hears_nothing_from_it() -> None:
    parent = subprocess.Popen([sys.executable, "-c", EXITING_PARENT], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        # The child shares the parent's stderr: it reaches its end once both have ended.
        out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert parent.returncode == 0, err
    _until(lambda: _gone(int(out)), 15, f"the emulator process {out} outlived its parent")
    assert "Traceback" not in err, err


def test_a_request_moto_fails_on_is_answered_500_and_the_connection_goes_on(
    emulator: EmulatorProcess, attached: Clients
) -> None:
    # What moto's own server answers for a handler that raises: a 500 (botocore retries
    # it), not a dropped connection that would end the caller's loop.
    from botocore.awsrequest import AWSPreparedRequest
    from botocore.compat import HTTPHeaders

    from infra.emulator.process import Remote

    remote = Remote(emulator.address, emulator._authkey, emulator.url, "dynamodb",
                    "us-east-1")
    for target in ("DynamoDB_20120810.NoSuchOperation", "DynamoDB_20120810.ListTables"):
        request = AWSPreparedRequest(
            "POST", f"{emulator.url}/", HTTPHeaders.from_dict(
                {"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.0"}),
            b"{}", stream_output=False)
        answer = remote(request)
        assert answer is not None
        if target.endswith("NoSuchOperation"):
            assert answer.status_code == 500
            assert b'"InternalFailure"' in answer.content and b"NoSuchOperation" in answer.content
        else:  # the same thread, the same connection, still answered
            assert answer.status_code == 200 and b"TableNames" in answer.content
    assert attached.dynamodb.list_tables()["TableNames"] is not None


def test_a_caller_without_the_key_is_refused_and_the_socket_goes_on(
    emulator: EmulatorProcess
) -> None:
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    with pytest.raises(AuthenticationError):
        Client(emulator.address, "AF_UNIX", authkey=b"not the key")
    # A thread of its own: a new connection, accepted as before.
    fresh = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))
    answers: list[Any] = []
    worker = threading.Thread(target=lambda: answers.append(fresh.dynamodb.list_tables()))
    worker.start()
    worker.join(timeout=30)
    assert answers and "TableNames" in answers[0]


def test_under_a_long_tmpdir_its_socket_goes_to_a_short_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # macOS's TMPDIR (/var/folders/xx/yyyy/T/) leaves little room; this one leaves none.
    long = tmp_path / ("t" * SOCKET_PATH_MAX)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again, as a new process
    assert tempfile.gettempdir() == str(long)
    assert unavailable() is None
    with EmulatorProcess() as emulator:
        directory = os.path.dirname(emulator.address)
        assert len(os.fsencode(emulator.address)) <= SOCKET_PATH_MAX
        assert not directory.startswith(str(long))
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        clients = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))
        assert clients.dynamodb.list_tables()["TableNames"] == []
    assert not os.path.exists(directory)


def test_where_no_directory_is_short_enough_for_its_socket_none_is_chosen(
    tmp_path: Path
) -> None:
    from infra.emulator.process import _socket_parent

    long = tmp_path / ("t" * SOCKET_PATH_MAX)
    long.mkdir()
    assert _socket_parent(str(tmp_path)) == str(tmp_path)
    assert _socket_parent(str(long), fallback=str(tmp_path)) == str(tmp_path)
    assert _socket_parent(str(long), fallback=str(long)) is None
    assert _socket_parent(str(long), fallback=str(tmp_path / "missing")) is None


CHAIN = """
backends:
  fn: { url: "${FUNCTIONS_URL}", secret: "${FUNCTIONS_SECRET}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


def _stack(tmp_path: Path, echoed: list[str], emulator_port: int = 0) -> LocalStack:
    (tmp_path / "orchestrator.yml").write_text(CHAIN)
    return LocalStack(StackOptions(
        manifest=tmp_path / "orchestrator.yml", api_port=0, functions_port=0, scripts_port=0,
        emulator_port=emulator_port, functions_app="tests.support.lambda_fns:create_app",
        prefix=f"fall{uuid.uuid4().hex[:6]}", one_core=False,
        environ={"ORCH_API_AUTH": "off"},
    ), echo=echoed.append)


def _finished(c: httpx.Client, run_id: str, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        view: dict[str, Any] = c.get(f"/runs/{run_id}").json()
        if view["status"] not in ("queued", "running"):
            return view
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


@pytest.mark.slow
def test_dev_comes_up_in_process_when_its_emulator_process_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new interpreter that cannot find its standard library exits before any of our
    # code runs; this one, already running, goes on.
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-python-here"))
    echoed: list[str] = []
    stack = _stack(tmp_path, echoed)
    try:
        stack.start()
        assert type(stack.emulator) is Emulator
        said = [line for line in echoed if line.startswith("emulator   runs in this process")]
        assert len(said) == 1 and said[0].startswith(
            "emulator   runs in this process: its own process did not start: it exited with"
            " code "), echoed
        assert any(" · in-process calls" in line for line in echoed), echoed
        with httpx.Client(base_url=stack.api_url, timeout=10) as c:
            r = c.post("/runs", json={"workflow": "chain", "input": {"n": 1}})
            assert r.status_code == 201, r.text
            assert _finished(c, r.json()["run_id"])["status"] == "success"
    finally:
        stack.stop()


def test_dev_says_why_when_neither_emulator_can_have_its_port(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        echoed: list[str] = []
        stack = _stack(tmp_path, echoed, emulator_port=port)
        try:
            with pytest.raises(OrchestratorError) as raised:
                stack.start()
        finally:
            stack.stop()
    in_use = os.strerror(errno.EADDRINUSE)
    fallback = [line for line in echoed if "runs in this process" in line]
    assert len(fallback) == 1 and in_use in fallback[0], echoed
    message = raised.value.message
    assert message.startswith(f"the embedded emulator did not start on 127.0.0.1:{port}: "
                              f"[Errno {errno.EADDRINUSE}] {in_use} (another --emulator-port"
                              ), message
    assert message.endswith(f"; before that, {fallback[0].partition(': ')[2]}"), message
    assert not any(line.startswith("api") for line in echoed), echoed


def _emulator_children() -> set[int]:
    """This process's live emulator processes (infra/emulator/child.py)."""
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rpartition(")")[2].split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # it ended while we looked (or is no process)
            continue
        if (fields[0] != "Z" and int(fields[1]) == os.getpid()
                and b"infra.emulator.child" in cmdline):
            found.add(int(proc.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc")
def test_dev_stops_its_emulator_process_when_a_later_part_does_not_start(
    tmp_path: Path
) -> None:
    before = _emulator_children()  # this module's own emulator, say
    echoed: list[str] = []
    (tmp_path / "orchestrator.yml").write_text(CHAIN)
    stack = LocalStack(StackOptions(
        manifest=tmp_path / "orchestrator.yml", api_port=0, functions_port=0, scripts_port=0,
        emulator_port=0, functions_app="tests.support.no_such_module:create_app",
        one_core=False, environ={"ORCH_API_AUTH": "off"},
    ), echo=echoed.append)
    try:
        with pytest.raises(OrchestratorError, match=r"cannot import tests\.support\.no_such_"):
            stack.start()  # no stop() before the checks: start() undoes what it started
        assert any(line.startswith("emulator   http://") for line in echoed), echoed
        assert _emulator_children() == before
    finally:
        stack.stop()
