"""template.yaml: it lints clean, translates offline, and its data resources deploy into the
emulator through CloudFormation with the keys, indexes, TTL, redrive and lifecycle that
the orchestrator relies on."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.emulator import Emulator
from infra.stack import deploy_data_stack, destroy_data_stack, stack_name
from infra.template import (
    TEMPLATE_PATH,
    TemplateError,
    cloudformation_template,
    data_resources_template,
    load_template,
)
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.settings import ResourceNames, Settings

REPO = TEMPLATE_PATH.parent

_CFN_LINT = (
    "import sys; from cfnlint.runner import main; sys.argv[0] = 'cfn-lint'; sys.exit(main())"
)

# Translates the template with no region, no credentials and every HTTP(S) request sent to
# a closed port: it only succeeds if the translation makes no AWS call at all.
_OFFLINE_TRANSLATION = (
    "import json; from infra.template import cloudformation_template; "
    "resources = cloudformation_template()['Resources'].values(); "
    "print(json.dumps(sorted({r['Type'] for r in resources})))"
)


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="",
    )
    return env


@pytest.fixture(scope="module", autouse=True)
def subprocess_checks() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """cfn-lint and the offline translation each take seconds in a fresh interpreter: start
    them first, so that they run while the emulator tests below deploy stacks."""
    processes = {
        "cfn-lint": subprocess.Popen(
            [sys.executable, "-c", _CFN_LINT, str(TEMPLATE_PATH)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "offline": subprocess.Popen(
            [sys.executable, "-c", _OFFLINE_TRANSLATION],
            cwd=REPO,
            env=_offline_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
    yield processes
    for process in processes.values():
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def own_emulator() -> Iterator[Emulator]:
    with Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def clients(own_emulator: Emulator) -> Clients:
    return make_clients(Settings(endpoint_url=own_emulator.url))


@pytest.fixture(scope="module")
def names(clients: Clients) -> ResourceNames:
    prefix = f"tpl{uuid.uuid4().hex[:8]}"
    deploy_data_stack(clients, prefix)
    return ResourceNames(prefix)


# --- the template itself ------------------------------------------------------------------


def test_short_form_tags_load_as_long_form(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "AWSTemplateFormatVersion: 2010-09-09\n"
        "Resources:\n"
        "  Q:\n"
        "    Type: AWS::SQS::Queue\n"
        "    Properties:\n"
        "      QueueName: !Sub '${Prefix}-q'\n"
        "      RedrivePolicy: {deadLetterTargetArn: !GetAtt D.Arn, maxReceiveCount: 3}\n"
        "      Tags: [{Key: k, Value: !Join ['-', [!Ref Prefix, !Select [0, !GetAZs '']]]}]\n"
        "      Other: !GetAtt [D, QueueName]\n"
        "    Condition: !Condition IsProd\n"
    )
    template = load_template(path)

    assert template["AWSTemplateFormatVersion"] == "2010-09-09"
    queue = template["Resources"]["Q"]
    assert queue["Properties"]["QueueName"] == {"Fn::Sub": "${Prefix}-q"}
    assert queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["D", "Arn"]
    }
    assert queue["Properties"]["Tags"][0]["Value"] == {
        "Fn::Join": ["-", [{"Ref": "Prefix"}, {"Fn::Select": [0, {"Fn::GetAZs": ""}]}]]
    }
    assert queue["Properties"]["Other"] == {"Fn::GetAtt": ["D", "QueueName"]}
    assert queue["Condition"] == {"Condition": "IsProd"}


def test_template_yaml_is_sam_with_every_resource() -> None:
    template = load_template()

    assert template["Transform"] == "AWS::Serverless-2016-10-31"
    assert set(template["Resources"]) == {
        "RunsTable",
        "StepsTable",
        "ControlTable",
        "DeadLetterQueue",
        "DispatchQueue",
        "TimerQueue",
        "BlobBucket",
        "ApiFunction",
        "WorkerFunction",
        "SweeperFunction",
        "ApiRole",
        "WorkerRole",
        "SweeperRole",
        "ApiLogGroup",
        "WorkerLogGroup",
        "SweeperLogGroup",
        "DeadLetterAlarm",
        "FunctionsFunction",
        "FunctionsRole",
        "FunctionsLogGroup",
        "ScriptsFunction",
        "ScriptsRole",
        "ScriptsLogGroup",
    }


def test_translation_yields_plain_cloudformation() -> None:
    resources = cloudformation_template()["Resources"]
    by_type: dict[str, dict[str, Any]] = {}
    for logical_id, resource in resources.items():
        by_type.setdefault(resource["Type"], {})[logical_id] = resource["Properties"]

    assert not [t for t in by_type if t.startswith("AWS::Serverless::")]
    functions = by_type["AWS::Lambda::Function"]
    # The orchestrator's three entry points, the functions app's and the script host's,
    # each a callable of this code base.
    assert sorted(f["Handler"] for f in functions.values()) == [
        "functions.sdk.lambda_adapter.handler",
        "functions.sdk.scripts.lambda_host.handler",
        "orchestrator.lambda_handlers.api",
        "orchestrator.lambda_handlers.sweeper",
        "orchestrator.lambda_handlers.worker",
    ]
    for function in functions.values():
        module, _, attr = function["Handler"].rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr))
    url = {"Fn::If": ["DeployFunctions", {"Fn::GetAtt": ["FunctionsFunctionUrl", "FunctionUrl"]},
                      ""]}
    for name in ("ApiFunction", "WorkerFunction", "SweeperFunction"):
        assert functions[name]["Environment"]["Variables"]["FUNCTIONS_URL"] == url
    assert by_type["AWS::Lambda::Url"]["FunctionsFunctionUrl"]["AuthType"] == "NONE"
    # The script host: its URL given to the orchestrator's functions, public but signed.
    scripts = {"Fn::If": ["DeployScripts", {"Fn::GetAtt": ["ScriptsFunctionUrl", "FunctionUrl"]},
                          ""]}
    for name in ("ApiFunction", "WorkerFunction", "SweeperFunction"):
        assert functions[name]["Environment"]["Variables"]["SCRIPTS_URL"] == scripts
    assert by_type["AWS::Lambda::Url"]["ScriptsFunctionUrl"]["AuthType"] == "NONE"
    for function in functions.values():
        assert function["Environment"]["Variables"]["ORCH_PREFIX"] == {"Ref": "Prefix"}
    mappings = by_type["AWS::Lambda::EventSourceMapping"].values()
    assert sorted(m["EventSourceArn"]["Fn::GetAtt"][0] for m in mappings) == [
        "DispatchQueue",
        "TimerQueue",
    ]
    for mapping in mappings:
        assert mapping["BatchSize"] == 10
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["FunctionName"] == {"Ref": "WorkerFunction"}
    [rule] = by_type["AWS::Events::Rule"].values()
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert "AWS::ApiGatewayV2::Api" in by_type

    for mapping in mappings:
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "WorkerMaxConcurrency"}}
        assert mapping["MaximumBatchingWindowInSeconds"] == {"Ref": "WorkerBatchingWindow"}
    for table in by_type["AWS::DynamoDB::Table"].values():
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    [bucket] = by_type["AWS::S3::Bucket"].values()
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    [alarm] = by_type["AWS::CloudWatch::Alarm"].values()
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [st for policy in role["Properties"]["Policies"]
            for st in policy["PolicyDocument"]["Statement"]]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _names_a_stack_resource(resource: Any, logical_ids: set[str]) -> bool:
    """An ARN built from one of the stack's own resources: `!GetAtt X.Arn`, or a `!Sub`
    that starts with `${X.Arn}` (an index of a table, the objects under a prefix)."""
    if isinstance(resource, dict) and set(resource) == {"Fn::GetAtt"}:
        return bool(resource["Fn::GetAtt"][0] in logical_ids
                    and resource["Fn::GetAtt"][1] == "Arn")
    if isinstance(resource, dict) and set(resource) == {"Fn::Sub"}:
        text = resource["Fn::Sub"]
        if not isinstance(text, str) or not text.startswith("${"):
            return False
        head = text[2:text.index("}")]
        owner, _, attribute = head.partition(".")
        return owner in logical_ids and attribute == "Arn" and "*" not in text[:-1]
    return False


def test_every_function_is_granted_only_what_it_calls_on_this_stacks_resources() -> None:
    resources = cloudformation_template()["Resources"]
    logical_ids = set(resources)
    roles = {k: v for k, v in resources.items() if v["Type"] == "AWS::IAM::Role"}
    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Lambda::Function"}
    # Each function runs under its own role; no managed policy widens one.
    assert sorted(f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()) \
        == sorted(roles)
    granted: dict[str, set[str]] = {}
    for name, role in roles.items():
        assert "ManagedPolicyArns" not in role["Properties"], name
        for st in _statements(role):
            assert st["Effect"] == "Allow"
            for action in _listed(st["Action"]):
                assert "*" not in action, (name, action)
                granted.setdefault(name, set()).add(action)
            for resource in _listed(st["Resource"]):
                assert _names_a_stack_resource(resource, logical_ids), (name, resource)
    # What the handlers call (orchestrator/adapters), and the event source mapping's polling.
    item_ops = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:BatchGetItem",
                "dynamodb:BatchWriteItem"}
    logs = {"logs:CreateLogStream", "logs:PutLogEvents"}
    send = {"sqs:SendMessage", "sqs:GetQueueUrl"}
    # ... and the queues' depths GET /health and /metrics read, and the dead letters the
    # dashboard reads and redrives (adapters/dead_letters.py).
    assert granted["ApiRole"] == item_ops | logs | send | {
        "s3:GetObject", "sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility"}
    assert granted["WorkerRole"] == item_ops | logs | send | {
        "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
        "sqs:GetQueueAttributes", "s3:GetObject", "s3:PutObject"}
    assert granted["SweeperRole"] == item_ops | logs | send
    assert granted["FunctionsRole"] == logs  # it calls nothing of the stack's


def test_data_resources_template_keeps_only_data() -> None:
    template = data_resources_template("abc")

    assert {r["Type"] for r in template["Resources"].values()} == {
        "AWS::DynamoDB::Table",
        "AWS::SQS::Queue",
        "AWS::S3::Bucket",
    }
    assert "ApiUrl" not in template["Outputs"]
    assert {"RunsTableName", "DispatchQueueUrl", "BlobBucketName"} <= set(template["Outputs"])
    assert template["Parameters"]["Prefix"]["Default"] == "abc"
    # The cached translation is not shared with callers.
    assert cloudformation_template()["Parameters"]["Prefix"]["Default"] == "orch"


@pytest.mark.parametrize("prefix", ["Orch", "orch_1", "-orch", "orch-", "x" * 58, ""])
def test_prefix_outside_the_allowed_pattern_is_refused(prefix: str) -> None:
    with pytest.raises(TemplateError, match="AllowedPattern"):
        data_resources_template(prefix)


# --- deployed into the emulator -----------------------------------------------------------


def test_runs_table(clients: Clients, names: ResourceNames) -> None:
    table = clients.dynamodb.describe_table(TableName=names.runs_table)["Table"]

    assert table["KeySchema"] == [{"AttributeName": "run_id", "KeyType": "HASH"}]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    indexes = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}
    assert set(indexes) == {"by-workflow-keys", "active", "recent-keys", "wake"}
    assert indexes["by-workflow-keys"]["KeySchema"] == [
        {"AttributeName": "workflow", "KeyType": "HASH"},
        {"AttributeName": "created_at", "KeyType": "RANGE"},
    ]
    # Written when a run is created and never again (adapters/store/run_listing.py).
    assert indexes["by-workflow-keys"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert indexes["recent-keys"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert indexes["active"]["KeySchema"] == [
        {"AttributeName": "active", "KeyType": "HASH"},
        {"AttributeName": "run_id", "KeyType": "RANGE"},
    ]
    assert indexes["active"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert indexes["recent-keys"]["KeySchema"] == [
        {"AttributeName": "listed", "KeyType": "HASH"},
        {"AttributeName": "created_at", "KeyType": "RANGE"},
    ]
    assert indexes["wake"]["KeySchema"] == WAKE_INDEX
    assert indexes["wake"]["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    assert types == {"run_id": "S", "workflow": "S", "created_at": "N", "active": "S",
                     "listed": "S", "wake_shard": "N", "wake_at": "N"}


WAKE_INDEX = [
    {"AttributeName": "wake_shard", "KeyType": "HASH"},
    {"AttributeName": "wake_at", "KeyType": "RANGE"},
]


def test_control_table(clients: Clients, names: ResourceNames) -> None:
    table = clients.dynamodb.describe_table(TableName=names.control_table)["Table"]

    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_steps_table(clients: Clients, names: ResourceNames) -> None:
    table = clients.dynamodb.describe_table(TableName=names.steps_table)["Table"]

    assert table["KeySchema"] == [
        {"AttributeName": "run_id", "KeyType": "HASH"},
        {"AttributeName": "step", "KeyType": "RANGE"},
    ]
    # One index: the wakes (when each row must next be looked at), keys only.
    [index] = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "wake" and index["KeySchema"] == WAKE_INDEX
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}


def test_wake_index_reads_a_window_of_one_shard(clients: Clients, names: ResourceNames) -> None:
    from orchestrator.adapters.store import Store

    store = Store(clients.dynamodb, names)
    for step, extra in [("early", {"wake_at": {"N": "100"}}), ("late", {"wake_at": {"N": "200"}}),
                        ("blocked", {}), ("other", {"wake_at": {"N": "150"}})]:
        shard = 1 if step == "other" else 0
        clients.dynamodb.put_item(
            TableName=names.steps_table,
            Item={"run_id": {"S": "r"}, "step": {"S": step}, "wake_shard": {"N": str(shard)}}
            | extra,
        )
    def window(shard: int, after: float, upto: float) -> list[str]:
        keys = store.steps.woken(names.steps_table, shard, after, upto)
        return sorted(str(k.step) for k in keys)

    assert window(0, 0, 1000) == ["early", "late"]  # the blocked row has no wake
    assert window(0, 100, 200) == ["late"]  # (after, upto]: 100 was read last time
    assert window(0, 99.9, 199.9) == ["early"]
    assert window(1, 0, 1000) == ["other"]


def test_ttl_is_enabled_on_every_table(clients: Clients, names: ResourceNames) -> None:
    for table in (names.runs_table, names.steps_table, names.control_table):
        ttl = clients.dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}, table


def test_active_index_is_sparse(clients: Clients, names: ResourceNames) -> None:
    for run_id, extra in [("r-running", {"active": {"S": "1"}}), ("r-done", {})]:
        clients.dynamodb.put_item(
            TableName=names.runs_table,
            Item={"run_id": {"S": run_id}, "workflow": {"S": "w"}, "created_at": {"N": "1"}}
            | extra,
        )
    found = clients.dynamodb.query(
        TableName=names.runs_table,
        IndexName="active",
        KeyConditionExpression="active = :a",
        ExpressionAttributeValues={":a": {"S": "1"}},
    )["Items"]

    assert [item["run_id"]["S"] for item in found] == ["r-running"]


def _queue_attributes(clients: Clients, name: str) -> dict[str, str]:
    url = clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes: dict[str, str] = clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["All"]
    )["Attributes"]
    return attributes


def test_queues_redrive_to_the_dead_letter_queue(clients: Clients, names: ResourceNames) -> None:
    dlq = _queue_attributes(clients, names.dead_letter_queue)
    assert dlq["MessageRetentionPeriod"] == str(14 * 24 * 3600)
    assert "RedrivePolicy" not in dlq

    for queue in (names.dispatch_queue, names.timer_queue):
        attributes = _queue_attributes(clients, queue)
        # Six times the worker function's timeout, as AWS advises for an event source
        # mapping (the function's own handing back makes a refused record visible at once).
        worker_timeout = load_template()["Resources"]["WorkerFunction"]["Properties"]["Timeout"]
        assert int(attributes["VisibilityTimeout"]) >= 6 * int(worker_timeout), queue
        assert attributes["ReceiveMessageWaitTimeSeconds"] == "20", queue
        assert json.loads(attributes["RedrivePolicy"]) == {
            "deadLetterTargetArn": dlq["QueueArn"],
            "maxReceiveCount": 10,
        }, queue


def test_bucket_expires_objects_and_blocks_public_access(
    clients: Clients, names: ResourceNames
) -> None:
    rules = clients.s3.get_bucket_lifecycle_configuration(Bucket=names.blob_bucket)["Rules"]
    # Outputs, journals and call bodies expire; script texts (scripts/) are kept.
    assert sorted((r["Filter"]["Prefix"], r["Status"], r["Expiration"]["Days"])
                  for r in rules) == [("calls/", "Enabled", 31), ("journal/", "Enabled", 31),
                                      ("outputs/", "Enabled", 31)]
    block = clients.s3.get_public_access_block(Bucket=names.blob_bucket)
    assert block["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }


def test_stack_outputs_name_every_resource(clients: Clients, names: ResourceNames) -> None:
    [stack] = clients.cloudformation.describe_stacks(StackName=stack_name(names.prefix))["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}

    assert stack["StackStatus"] == "CREATE_COMPLETE"
    assert outputs["RunsTableName"] == names.runs_table
    assert outputs["StepsTableName"] == names.steps_table
    assert outputs["DispatchQueueName"] == names.dispatch_queue
    assert outputs["TimerQueueName"] == names.timer_queue
    assert outputs["DeadLetterQueueName"] == names.dead_letter_queue
    assert outputs["BlobBucketName"] == names.blob_bucket
    assert outputs["DispatchQueueUrl"].endswith("/" + names.dispatch_queue)


def test_deploying_twice_reuses_the_stack(clients: Clients, names: ResourceNames) -> None:
    stack = stack_name(names.prefix)
    before = clients.cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackId"]
    key = {"run_id": {"S": "r"}, "step": {"S": "s"}}
    clients.dynamodb.put_item(TableName=names.steps_table, Item=key)

    deploy_data_stack(clients, names.prefix)

    after = clients.cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackId"]
    assert after == before
    assert "Item" in clients.dynamodb.get_item(TableName=names.steps_table, Key=key)


def test_destroy_removes_every_resource(clients: Clients) -> None:
    prefix = f"tpl{uuid.uuid4().hex[:8]}"
    gone = ResourceNames(prefix)
    deploy_data_stack(clients, prefix)
    clients.s3.put_object(Bucket=gone.blob_bucket, Key="blob", Body=b"x")

    destroy_data_stack(clients, prefix)
    destroy_data_stack(clients, prefix)  # nothing left to destroy is not an error

    tables = clients.dynamodb.list_tables()["TableNames"]
    assert gone.runs_table not in tables and gone.steps_table not in tables
    queues = clients.sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert queues == []
    buckets = [b["Name"] for b in clients.s3.list_buckets()["Buckets"]]
    assert gone.blob_bucket not in buckets


def test_template_passes_cfn_lint(subprocess_checks: dict[str, subprocess.Popen[str]]) -> None:
    output, _ = subprocess_checks["cfn-lint"].communicate(timeout=120)

    assert subprocess_checks["cfn-lint"].returncode == 0, output


def test_translation_needs_no_network(
    subprocess_checks: dict[str, subprocess.Popen[str]],
) -> None:
    output, _ = subprocess_checks["offline"].communicate(timeout=60)

    assert subprocess_checks["offline"].returncode == 0, output
    types = json.loads(output.strip().splitlines()[-1])
    assert "AWS::Lambda::Function" in types
    assert not [t for t in types if t.startswith("AWS::Serverless::")]
