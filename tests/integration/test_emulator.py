"""The embedded emulator over real HTTP: DynamoDB is linearizable (conditional writes and
transactions have exactly one winner under contention), and an SQS long-poll never blocks
anyone else."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.emulator import Emulator
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# Without the DynamoDB lock, about one round in ten has two winners (measured: 5 of 50),
# so 50 rounds miss a broken emulator with odds below 1 in 100. Each race is 1,600 boto3
# calls, CPU-bound at ~8 ms a call on a 2-core box: ~15-20 s, hence `slow`.
RACERS = 32
ROUNDS = 50


@pytest.fixture(scope="module")
def own_emulator() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def clients(own_emulator: Emulator) -> Clients:
    return make_clients(Settings(endpoint_url=own_emulator.url), max_pool=RACERS + 4)


@pytest.fixture(scope="module")
def table(clients: Clients) -> str:
    name = f"emu-{uuid.uuid4().hex[:8]}"
    clients.dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def _race(work: Callable[[int, int], str]) -> list[list[str]]:
    """Run `work(racer, round)` on RACERS threads released together for each of ROUNDS
    rounds; returns the outcomes per round."""
    outcomes: list[list[str]] = [[] for _ in range(ROUNDS)]
    barrier = threading.Barrier(RACERS)

    def racer(me: int) -> None:
        for round_ in range(ROUNDS):
            barrier.wait(timeout=30)
            outcomes[round_].append(work(me, round_))

    with ThreadPoolExecutor(RACERS) as pool:
        for future in [pool.submit(racer, me) for me in range(RACERS)]:
            future.result()
    return outcomes


def _outcome(exc: ClientError) -> str:
    # A retried 5xx would be hidden by boto3's retries: report how often it retried too.
    meta = exc.response.get("ResponseMetadata", {})
    return (
        f"{exc.response['Error']['Code']} "
        f"http={meta.get('HTTPStatusCode')} retries={meta.get('RetryAttempts')}"
    )


@pytest.mark.slow
def test_conditional_update_has_exactly_one_winner_per_round(clients: Clients, table: str) -> None:
    key = {"pk": {"S": "lock"}}

    def claim(me: int, round_: int) -> str:
        try:
            response = clients.dynamodb.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="SET #owner = :me, version = :next",
                ConditionExpression="attribute_not_exists(#owner) OR version = :v",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={
                    ":me": {"S": str(me)},
                    ":v": {"N": str(round_)},
                    ":next": {"N": str(round_ + 1)},
                },
            )
        except ClientError as exc:
            return _outcome(exc)
        return f"won retries={response['ResponseMetadata']['RetryAttempts']}"

    outcomes = _race(claim)

    lost = "ConditionalCheckFailedException http=400 retries=0"
    for round_, results in enumerate(outcomes):
        assert sorted(results) == [lost] * (RACERS - 1) + ["won retries=0"], f"round {round_}"
    item = clients.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["version"] == {"N": str(ROUNDS)}


@pytest.mark.slow
def test_in_process_and_http_clients_race_linearizably(
    own_emulator: Emulator, clients: Clients, table: str
) -> None:
    # Half the racers call the emulator in-process (as `orchestrator dev`'s own parts
    # do), half over HTTP (as other processes do): one lock serializes both.
    local = own_emulator.attach(
        make_clients(Settings(endpoint_url=own_emulator.url), max_pool=RACERS + 4))
    key = {"pk": {"S": "mixed"}}

    def claim(me: int, round_: int) -> str:
        client = (local if me % 2 else clients).dynamodb
        try:
            client.update_item(
                TableName=table, Key=key,
                UpdateExpression="SET #owner = :me, version = :next",
                ConditionExpression="attribute_not_exists(#owner) OR version = :v",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":me": {"S": str(me)}, ":v": {"N": str(round_)},
                                           ":next": {"N": str(round_ + 1)}},
            )
        except ClientError as exc:
            return _outcome(exc)
        return "won"

    outcomes = _race(claim)
    lost = "ConditionalCheckFailedException http=400 retries=0"
    for round_, results in enumerate(outcomes):
        assert sorted(results) == [lost] * (RACERS - 1) + ["won"], f"round {round_}"
    item = local.dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["version"] == {"N": str(ROUNDS)}


def test_attached_clients_need_no_socket() -> None:
    emulator = Emulator().start()
    settings = Settings(endpoint_url=emulator.url, prefix="sock")
    local, remote = emulator.attach(make_clients(settings)), make_clients(settings)
    name = f"emu-{uuid.uuid4().hex[:8]}"
    local.dynamodb.create_table(
        TableName=name, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST")
    # one state, both ways
    assert remote.dynamodb.describe_table(TableName=name)["Table"]["TableName"] == name
    port = int(emulator.url.rsplit(":", 1)[1])
    emulator.stop()  # the port is closed: only the in-process path is left
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    local.dynamodb.put_item(TableName=name, Item={"pk": {"S": "still"}})
    assert local.dynamodb.get_item(TableName=name, Key={"pk": {"S": "still"}})["Item"]


@pytest.mark.slow
def test_transaction_has_exactly_one_winner_per_round(clients: Clients, table: str) -> None:
    """Each racer tries to bump a counter row and create its own claim row in one
    transaction; only the racer that saw the current version may commit."""
    counter = {"pk": {"S": "txn-counter"}}
    clients.dynamodb.put_item(TableName=table, Item={**counter, "version": {"N": "0"}})

    def commit(me: int, round_: int) -> str:
        try:
            response = clients.dynamodb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": table,
                            "Key": counter,
                            "UpdateExpression": "SET version = :next",
                            "ConditionExpression": "version = :v",
                            "ExpressionAttributeValues": {
                                ":v": {"N": str(round_)},
                                ":next": {"N": str(round_ + 1)},
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": table,
                            "Item": {"pk": {"S": f"txn-claim-{round_}-{me}"}},
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        except ClientError as exc:
            return _outcome(exc)
        return f"won retries={response['ResponseMetadata']['RetryAttempts']}"

    outcomes = _race(commit)

    lost = "TransactionCanceledException http=400 retries=0"
    for round_, results in enumerate(outcomes):
        assert sorted(results) == [lost] * (RACERS - 1) + ["won retries=0"], f"round {round_}"
    claims = clients.dynamodb.scan(
        TableName=table,
        FilterExpression="begins_with(pk, :claim)",
        ExpressionAttributeValues={":claim": {"S": "txn-claim-"}},
        ConsistentRead=True,
    )
    # A cancelled transaction left no half-written claim behind.
    assert claims["Count"] == ROUNDS


def test_long_polls_do_not_block_other_requests(clients: Clients, table: str) -> None:
    queue_url = clients.sqs.create_queue(QueueName=f"emu-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    # A call held behind the polls would take about their whole wait (the first starts
    # with them); a loaded 2-core machine stalls a call for up to a second now and then
    # (as test_emulator_process.py's long-poll test says).
    wait_seconds = 4
    polls: list[tuple[float, Any]] = []

    def long_poll() -> None:
        started = time.monotonic()
        response = clients.sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=wait_seconds)
        polls.append((time.monotonic() - started, response.get("Messages")))

    pollers = [threading.Thread(target=long_poll) for _ in range(4)]
    for poller in pollers:
        poller.start()
    # Keep calling DynamoDB and SQS for as long as the polls wait on the (empty) queue.
    # Had a poll blocked them, one of these calls would take about as long as the poll.
    latencies: list[float] = []
    while any(poller.is_alive() for poller in pollers):
        started = time.monotonic()
        clients.dynamodb.get_item(TableName=table, Key={"pk": {"S": "lock"}})
        clients.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])
        latencies.append(time.monotonic() - started)
    for poller in pollers:
        poller.join()

    assert len(polls) == 4
    assert all(elapsed >= wait_seconds - 0.1 and messages is None for elapsed, messages in polls)
    assert len(latencies) >= 10
    assert max(latencies) < wait_seconds * 0.6


def test_stop_closes_the_port() -> None:
    emulator = Emulator().start()
    host, port = emulator.host, int(emulator.url.rsplit(":", 1)[1])
    socket.create_connection((host, port), timeout=5).close()
    emulator.stop()

    with pytest.raises(RuntimeError, match="not running"):
        _ = emulator.url
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=5)


def test_a_client_stalled_mid_request_freezes_no_one_elses_dynamodb(
    own_emulator: Emulator, clients: Clients, table: str
) -> None:
    """A DynamoDB request whose client sends half its body and stops: every other
    client's DynamoDB calls still answer (before, the emulator took its serialization
    lock before reading the body, and froze every DynamoDB call of every process)."""
    host, port = own_emulator.url.removeprefix("http://").split(":")
    body = b'{"TableName": "%s", "Key": {"pk": {"S": "x"}}}' % table.encode()
    stalled = socket.create_connection((host, int(port)))
    try:
        stalled.sendall(
            b"POST / HTTP/1.1\r\nHost: %s\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\n"
            b"Content-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\n\r\n"
            % (host.encode(), len(body)) + body[: len(body) // 2]
        )
        # The stalled request has reached the emulator when the server thread for it
        # exists; give its handler the chance to take the lock (it must not).
        deadline = time.monotonic() + 5
        while not any(t.name.startswith("Thread-") for t in threading.enumerate()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        worst = 0.0
        for i in range(20):
            t0 = time.monotonic()
            clients.dynamodb.put_item(TableName=table, Item={"pk": {"S": f"stall-{i}"}})
            clients.dynamodb.get_item(TableName=table, Key={"pk": {"S": f"stall-{i}"}})
            worst = max(worst, time.monotonic() - t0)
        # Before the fix these calls waited for the stalled client (60 s and more); a
        # loaded machine stalls a call for a second now and then.
        assert worst < 10.0, worst
    finally:
        stalled.close()


def test_the_standalone_command_serves_over_http() -> None:
    # `python -m infra.emulator` (README: other endpoints; the chaos cluster; the bench).
    proc = subprocess.Popen([sys.executable, "-m", "infra.emulator", "--port", "0"],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # "" if it died before serving
        assert url.startswith("http://127.0.0.1:"), url
        clients = make_clients(Settings(endpoint_url=url))
        assert "TableNames" in clients.dynamodb.list_tables(Limit=1)
        assert "QueueUrls" not in clients.sqs.list_queues(QueueNamePrefix="none-such")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_old_import_paths_name_the_same_objects() -> None:
    # The emulator was modules of infra/ before it was the package infra/emulator/.
    from infra import capabilities, emulator_process, moto_speedups
    from infra.emulator import capabilities as now_capabilities
    from infra.emulator import process, speedups, tuning

    assert moto_speedups.install is speedups.install
    assert moto_speedups.SPEEDUPS is speedups.SPEEDUPS
    assert capabilities.report is now_capabilities.report
    assert capabilities.resolve is now_capabilities.resolve
    assert emulator_process.EmulatorProcess is process.EmulatorProcess
    assert emulator_process.spare_core is tuning.spare_core
    for module in (capabilities, emulator_process, moto_speedups):
        assert all(hasattr(module, name) for name in module.__all__), module
