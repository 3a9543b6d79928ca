"""`orchestrator deploy` / `destroy`: the plan of a dry run, the package, and the whole
translated template deployed through a change set into the emulator's CloudFormation
(functions, roles, event source mappings and schedule included; moto has no Function URL
or API Gateway v2 resources, so the functions app is left out there and the HTTP API is
skipped by moto), then driven through the Lambda handlers against what it created."""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from infra import deploy as d
from infra.emulator import Emulator
from infra.lambda_events import Context, http_event, sqs_event
from orchestrator import lambda_handlers as L
from orchestrator.cli.commands import main
from orchestrator.settings import ResourceNames, Settings
from tests.support.legacy import RUNS_INDEXES_BEFORE_22

ROOT = Path(__file__).resolve().parents[2]
# moto warns of each resource type its CloudFormation does not create (the alarm, the HTTP
# API, the Function URL); the suite turns warnings into errors.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")
MANIFEST = ROOT / "orchestrator.yml"


def test_a_dry_run_prints_the_plan_and_touches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # No endpoint answers here: a dry run must not need one.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    out = CliRunner().invoke(main, ["deploy", "--dry-run", "--manifest", str(MANIFEST),
                                    "--stack", "demo", "-p", "FunctionsSecret=hush"])
    assert out.exit_code == 0, out.output
    text = out.output
    for needle in ("stack demo", "AWS::Lambda::Function", "WorkerFunction",
                   "AWS::Lambda::EventSourceMapping", "AWS::IAM::Role", "FunctionsFunctionUrl",
                   "Prefix = 'demo'", "FunctionsSecret = '****'",
                   "estimated monthly cost standing idle: $"):
        assert needle in text, needle
    assert "hush" not in text


def test_a_bad_manifest_is_refused_before_anything_is_planned(tmp_path: Path) -> None:
    bad = tmp_path / "orchestrator.yml"
    bad.write_text("workflows:\n  w:\n    steps:\n      a: { backend: nowhere, route: /a }\n")
    out = CliRunner().invoke(main, ["deploy", "--dry-run", "--manifest", str(bad)])
    assert out.exit_code == 2
    assert "nowhere" in out.output


def test_the_package_holds_the_code_and_the_manifest_and_is_reproducible() -> None:
    plan = d.plan(MANIFEST, "demo", region="us-east-1", no_deps=True)
    first, second = d.package(plan), d.package(plan)
    assert first == second  # the same code, the same zip: an unchanged stack stays so
    names = set(zipfile.ZipFile(io.BytesIO(first)).namelist())
    for needed in ("orchestrator/lambda_handlers.py", "functions/sdk/lambda_adapter.py",
                   "functions/sdk/durable/workflow.py", "functions/durable/__init__.py",
                   "orchestrator.yml", "functions/examples/monthly_report.py"):
        assert needed in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Emulator, Any]]:
    with Emulator() as emu:
        for k, v in {"AWS_ENDPOINT_URL": emu.url, "AWS_ACCESS_KEY_ID": "testing",
                     "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        from orchestrator.cli.deploy import _clients

        yield emu, _clients(Settings.from_env())


def test_the_stack_deploys_through_a_change_set_and_serves_a_run(
    cloud: tuple[Emulator, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, clients = cloud
    plan = d.plan(MANIFEST, "dep", region="us-east-1", no_deps=True,
                  parameters={"FunctionsApp": "", "DeployScripts": "no",
                              "WorkerMaxConcurrency": "20"})
    d.deploy(clients, plan, d.package(plan), timeout=60, echo=lambda s: None)
    names = ResourceNames("dep")
    # (moto answers no outputs for a stack with resource types it skipped)
    created = {r["LogicalResourceId"]: r["ResourceStatus"] for r in
               clients.cloudformation.describe_stack_resources(StackName="dep")["StackResources"]
               if "LogicalResourceId" in r}
    for logical_id in ("RunsTable", "StepsTable", "ControlTable", "DispatchQueue", "TimerQueue",
                       "BlobBucket", "ApiFunction", "WorkerFunction", "SweeperFunction",
                       "WorkerFunctionDispatch", "WorkerFunctionTimers", "SweeperFunctionSweep",
                       "ApiRole", "WorkerRole", "SweeperRole"):
        assert created.get(logical_id) == "CREATE_COMPLETE", logical_id

    session_kw = {"endpoint_url": emu.url, "region_name": "us-east-1"}
    import boto3

    dispatch_url = boto3.client("sqs", **session_kw).get_queue_url(
        QueueName=names.dispatch_queue)["QueueUrl"]

    lam = boto3.client("lambda", **session_kw)
    iam = boto3.client("iam", **session_kw)
    functions = {f["FunctionName"]: f for f in lam.list_functions()["Functions"]}
    assert {f: functions[f]["Handler"] for f in ("dep-api", "dep-worker", "dep-sweeper")} == {
        "dep-api": "orchestrator.lambda_handlers.api",
        "dep-worker": "orchestrator.lambda_handlers.worker",
        "dep-sweeper": "orchestrator.lambda_handlers.sweeper",
    }
    assert functions["dep-worker"]["Timeout"] == 120
    mappings = lam.list_event_source_mappings(FunctionName="dep-worker")["EventSourceMappings"]
    assert sorted(m["EventSourceArn"].rsplit(":", 1)[-1] for m in mappings) == [
        names.dispatch_queue, names.timer_queue]
    for m in mappings:
        assert m["BatchSize"] == 10 and m["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert m["ScalingConfig"] == {"MaximumConcurrency": 20}
    # Every permission the worker's handler uses, on the resources it uses.
    role = functions["dep-worker"]["Role"].rsplit("/", 1)[-1]
    (policy,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
    doc = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
    if isinstance(doc, str):  # moto keeps a document CloudFormation gave it as its repr
        doc = ast.literal_eval(doc)
    granted = {(a, r) for st in doc["Statement"]
               for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
               for r in (st["Resource"] if isinstance(st["Resource"], list)
                         else [st["Resource"]])}
    table_arn = boto3.client("dynamodb", **session_kw).describe_table(
        TableName=names.steps_table)["Table"]["TableArn"]
    queue_arn = boto3.client("sqs", **session_kw).get_queue_attributes(
        QueueUrl=dispatch_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    for action in ("dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchWriteItem"):
        assert (action, table_arn) in granted, action
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
                   "sqs:SendMessage"):
        assert (action, queue_arn) in granted, action

    # The handlers, configured as the deployed functions are, run a workflow on it.
    (tmp_path / "orchestrator.yml").write_text(
        "backends:\n  none: { url: \"http://127.0.0.1:9\" }\nworkflows:\n"
        "  empty:\n    steps:\n      a: { backend: none, route: /a, retry: { max: 0 },"
        " timeout: 2s }\n")
    for k, v in {"LAMBDA_TASK_ROOT": str(tmp_path), "ORCH_PREFIX": "dep",
                 "ORCH_API_AUTH": "off"}.items():
        monkeypatch.setenv(k, v)
    L.forget()
    try:
        out = L.api(http_event("POST", "/runs", headers={"content-type": "application/json"},
                               body=b'{"workflow": "empty"}'), Context())
        assert out["statusCode"] == 201, out
        run_id = json.loads(out["body"])["run_id"]
        sqs = boto3.client("sqs", **session_kw)
        msgs = sqs.receive_message(QueueUrl=dispatch_url, WaitTimeSeconds=2,
                                   MaxNumberOfMessages=10)["Messages"]
        assert L.worker(sqs_event(msgs, queue_arn), Context(timeout=30)) == {
            "batchItemFailures": []}
        view = json.loads(L.api(http_event("GET", f"/runs/{run_id}"), Context())["body"])
        # Nothing listens on the backend's port: the step fails, and the run with it.
        assert view["status"] == "failed", view
    finally:
        L.forget()


def test_an_update_that_replaces_indexes_is_made_one_index_at_a_time(
    cloud: tuple[Emulator, Any],
) -> None:
    _, clients = cloud
    plan = d.plan(MANIFEST, "mig", region="us-east-1", no_deps=True,
                  parameters={"FunctionsApp": "", "DeployScripts": "no"})
    code = d.package(plan)
    # A stack deployed before issue 22: the runs table's ALL-projected listing indexes.
    old = copy.deepcopy(plan.template)
    old["Resources"]["RunsTable"]["Properties"]["GlobalSecondaryIndexes"] = (
        RUNS_INDEXES_BEFORE_22)
    d.deploy(clients, dataclasses.replace(plan, template=old), code, timeout=60,
             echo=lambda s: None)
    sent: list[list[str]] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        body = json.loads(params["TemplateBody"])
        sent.append(sorted(i["IndexName"] for i in body["Resources"]["RunsTable"][
            "Properties"]["GlobalSecondaryIndexes"]))

    clients.cloudformation.meta.events.register(
        "provide-client-params.cloudformation.CreateChangeSet", note)
    said: list[str] = []
    d.deploy(clients, plan, code, timeout=60, echo=said.append)
    # CloudFormation takes one index creation or deletion per update of a table.
    assert sent == [
        ["active", "by-workflow", "by-workflow-keys", "recent", "wake"],
        ["active", "by-workflow", "by-workflow-keys", "recent", "recent-keys", "wake"],
        ["active", "by-workflow-keys", "recent", "recent-keys", "wake"],
        ["active", "by-workflow-keys", "recent-keys", "wake"],
    ]
    assert [line for line in said if line.startswith("index migration")] == [
        "index migration, step 1 of 4", "index migration, step 2 of 4",
        "index migration, step 3 of 4", "index migration, step 4 of 4: the template as it is"]


def test_destroy_keeps_the_data_unless_asked(cloud: tuple[Emulator, Any]) -> None:
    _, clients = cloud
    plan = d.plan(MANIFEST, "gone", region="us-east-1", no_deps=True,
                  parameters={"FunctionsApp": "", "DeployScripts": "no"})
    d.deploy(clients, plan, d.package(plan), timeout=60, echo=lambda s: None)
    names = ResourceNames("gone")
    assert d.destroy(clients, "gone", timeout=60) == []
    assert _table_exists(clients, names.runs_table)  # kept
    deadline = time.monotonic() + 10
    while True:
        try:
            clients.cloudformation.describe_stacks(StackName="gone")
        except Exception:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    gone = d.destroy(clients, "gone", delete_data=True, timeout=60)
    assert names.runs_table in gone and names.blob_bucket in gone
    assert not _table_exists(clients, names.runs_table)


def _table_exists(clients: Any, name: str) -> bool:
    try:
        clients.dynamodb.describe_table(TableName=name)
    except clients.dynamodb.exceptions.ResourceNotFoundException:
        return False
    return True
