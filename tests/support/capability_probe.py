"""Run the embedded emulator on a moto changed the way a future release might change it,
and print what it did, as JSON: `python -m tests.support.capability_probe BREAK`.

BREAK is one of:
- `none`: moto as installed;
- `changed:module:Attr.attr`: that attribute replaced by a wrapper that calls the original
  (moto answers as before, but the code is not the code that was checked);
- `in-process`: moto's DynamoDB handler refuses the request shape the in-process path
  hands it (as moto 5.2.4 did with botocore's request);
- `unsigned`: the clients lack the private botocore handler the emulator unhooks.

The emulator is started, this process's clients attached, and a short script of DynamoDB
and SQS requests touching every speed-up is played; the output holds the capability
verdicts, the answers, and whether the attached clients still answered with the server
stopped (in-process) or not (over HTTP). A process of its own: what it changes in moto
and botocore ends with it."""

from __future__ import annotations

import json
import sys
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError

from infra.emulator import Emulator
from infra.emulator.capabilities import report, resolve
from orchestrator.adapters.aws import make_clients
from orchestrator.settings import Settings

__all__ = ["main", "play"]


def _change(path: str) -> None:
    """Replace the attribute at `path` by a wrapper calling the original."""
    owner_path, _, attr = path.rpartition(".")
    if ":" not in owner_path:  # a module attribute: module:attr
        owner_path, _, attr = path.partition(":")
    owner = resolve(owner_path)
    stock = vars(owner)[attr] if isinstance(owner, type) and attr in vars(owner) \
        else getattr(owner, attr)
    changed: Any
    if isinstance(stock, classmethod):
        func = stock.__func__
        changed = classmethod(lambda cls, *a, **k: func(cls, *a, **k))
    elif isinstance(stock, property):
        getter = stock.fget
        assert getter is not None
        changed = property(lambda self: getter(self))
    elif isinstance(stock, type):
        changed = type(stock.__name__, (stock,), {})
    else:
        changed = lambda *a, **k: stock(*a, **k)  # noqa: E731
    setattr(owner, attr, changed)


def _refuse_direct_requests() -> None:
    import moto.dynamodb.urls  # noqa: F401  (the HTTP server's routes keep moto's own)

    handler = resolve("moto.dynamodb.responses:DynamoHandler")
    stock = vars(handler).get("dispatch") or handler.dispatch

    def dispatch(cls: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(request, "from_wsgi_server", False):
            raise AttributeError(
                f"{type(request).__name__!r} object has no attribute 'from_wsgi_server'")
        return stock.__func__(cls, request, *args, **kwargs)

    handler.dispatch = classmethod(dispatch)


class _Without:
    """An object as `inner`, less one attribute (as a botocore release might drop it)."""

    def __init__(self, inner: Any, missing: str) -> None:
        self._inner, self._missing = inner, missing

    def __getattr__(self, name: str) -> Any:
        if name == self._missing:
            raise AttributeError(name)
        return getattr(self._inner, name)


def play(clients: Any) -> list[Any]:
    """Requests that go through every speed-up; their answers, as moto gave them."""
    ddb, sqs = clients.dynamodb, clients.sqs
    out: list[Any] = []
    ddb.create_table(
        TableName="probe", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, t in
                              (("pk", "S"), ("sk", "S"), ("shard", "N"), ("at", "N"))],
        GlobalSecondaryIndexes=[{
            "IndexName": "wake", "Projection": {"ProjectionType": "ALL"},
            "KeySchema": [{"AttributeName": "shard", "KeyType": "HASH"},
                          {"AttributeName": "at", "KeyType": "RANGE"}]}])
    for i in range(12):
        ddb.put_item(TableName="probe", Item={
            "pk": {"S": "r"}, "sk": {"S": f"s{i:02d}"}, "shard": {"N": str(i % 2)},
            "at": {"N": str(100 + i)}, "status": {"S": "ready"}, "attempt": {"N": "1"}})
    update = {"TableName": "probe", "Key": {"pk": {"S": "r"}, "sk": {"S": "s03"}},
              "UpdateExpression": "SET #s = :d, attempt = attempt + :one REMOVE shard",
              "ConditionExpression": "#s = :r AND attempt = :one",
              "ExpressionAttributeNames": {"#s": "status"},
              "ExpressionAttributeValues": {":d": {"S": "dispatched"}, ":r": {"S": "ready"},
                                            ":one": {"N": "1"}},
              "ReturnValues": "ALL_NEW"}
    for _ in range(2):  # the second finds its guard false
        try:
            out.append(ddb.update_item(**update)["Attributes"])
        except ClientError as exc:
            out.append(exc.response["Error"]["Code"])
    out.append(ddb.query(TableName="probe", IndexName="wake",
                         KeyConditionExpression="shard = :s AND at BETWEEN :a AND :b",
                         ExpressionAttributeValues={":s": {"N": "1"}, ":a": {"N": "103"},
                                                    ":b": {"N": "109"}})["Items"])
    out.append(ddb.query(TableName="probe", KeyConditionExpression="pk = :p AND sk > :k",
                         ExpressionAttributeValues={":p": {"S": "r"},
                                                    ":k": {"S": "s08"}})["Items"])
    out.append(ddb.get_item(TableName="probe", Key={"pk": {"S": "r"}, "sk": {"S": "s03"}},
                            ProjectionExpression="#s, attempt",
                            ExpressionAttributeNames={"#s": "status"})["Item"])
    url = sqs.create_queue(QueueName="probe")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)])
    got: list[str] = []
    for _ in range(10):
        if len(got) == 5:
            break
        for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                           WaitTimeSeconds=0).get("Messages", []):
            got.append(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    out.append(sorted(got))
    return out


def main(argv: list[str]) -> None:
    brk = argv[0] if argv else "none"
    if brk.startswith("changed:"):
        _change(brk.removeprefix("changed:"))
    elif brk == "in-process":
        _refuse_direct_requests()
    emulator = Emulator().start()
    clients = make_clients(Settings(endpoint_url=emulator.url))
    if brk == "unsigned":
        for client in (clients.dynamodb, clients.sqs):
            client._user_agent_creator = _Without(client._user_agent_creator,
                                                  "rebuild_and_replace_user_agent_handler")
    emulator.attach(clients)
    answers = play(clients)
    emulator.stop()
    try:
        clients.dynamodb.list_tables()
        after_stop = "answered"
    except EndpointConnectionError:
        after_stop = "refused"
    print(json.dumps({
        "verdicts": {v.name: {"active": v.active, "reason": v.reason} for v in report()},
        "answers": answers,
        "after_stop": after_stop,
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
