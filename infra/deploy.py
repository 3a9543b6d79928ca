"""`orchestrator deploy` and `orchestrator destroy`: the whole stack of template.yaml (the
orchestrator's three Lambda functions, the user's functions app, the tables, queues and
bucket) created or updated through a CloudFormation change set, with boto3 only (no SAM
CLI, no Docker).

deploy: lint the manifest; package the code (orchestrator/, functions/, the manifest as
orchestrator.yml, and the Lambda dependencies pip installs for the Lambda platform, or
none with `no_deps`) into one zip named by its hash; upload it to an artifacts bucket;
translate template.yaml to plain CloudFormation pointing every function at that zip;
create a change set (CREATE or UPDATE), show it, execute it, wait, and print the stack's
outputs. An update that changes a table's indexes by more than one is made in steps
(infra/indexes.py). The dry run does none of the AWS part: it prints the plan (resources,
parameters, the change set it would create, what is packaged) and the estimated monthly
cost of the stack standing idle.

destroy: delete the stack. The tables and the blob bucket are kept (DeletionPolicy
Retain) unless `delete_data`, which deletes them too once the stack is gone."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from infra.idle_cost import idle_month
from infra.indexes import staged_templates, table_name
from infra.stack import (
    Deadline,
    DeployError,
    call,
    empty_bucket,
    failure_reasons,
    wait_for_stack,
)
from infra.template import TEMPLATE_PATH, cloudformation_template

__all__ = ["LAMBDA_REQUIREMENTS", "Plan", "deploy", "deployed_indexes", "destroy", "package",
           "plan", "render"]

ROOT = TEMPLATE_PATH.parent
# What the Lambda functions import beyond the runtime's own boto3 (pinned to the versions
# installed here: what the tests ran against).
LAMBDA_REQUIREMENTS = ("starlette", "pydantic", "httpx", "PyYAML", "cronsim", "simpleeval",
                       "mangum", "prometheus-client",
                       # The dashboard the API serves (/ui): templates, form posts, live
                       # updates (tests/unit/test_lambda_requirements.py checks the list).
                       "jinja2", "python-multipart", "sse-starlette")
CODE_PACKAGES = ("orchestrator", "functions")
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
SECRET_PARAMETERS = ("FunctionsSecret", "WebhookSecret", "ScriptsSecret")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entries' time: the same code, the same hash


@dataclass(frozen=True)
class Plan:
    stack: str
    region: str
    parameters: dict[str, str]
    template: dict[str, Any]
    files: list[str]
    requirements: list[str]
    manifest: Path
    notes: list[str] = field(default_factory=list)

    @property
    def resources(self) -> list[tuple[str, str]]:
        return sorted((k, r["Type"]) for k, r in self.template["Resources"].items())


def requirements() -> list[str]:
    out = []
    for name in LAMBDA_REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def _code_files(root: Path) -> list[Path]:
    files = []
    for pkg in CODE_PACKAGES:
        for path in sorted((root / pkg).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path)
    return files


def plan(
    manifest: Path, stack: str, *, region: str, parameters: Mapping[str, str] | None = None,
    no_deps: bool = False, root: Path = ROOT,
) -> Plan:
    """What `deploy` would do. Raises ManifestError for a manifest that does not lint."""
    from orchestrator.manifest.loader import lint_manifest

    lint_manifest(str(manifest))  # raises with file, line and field on a bad manifest
    params = {"Prefix": stack, **dict(parameters or {})}
    template = cloudformation_template(region=region)
    files = [str(p.relative_to(root)) for p in _code_files(root)] + ["orchestrator.yml"]
    return Plan(stack, region, params, template, files, [] if no_deps else requirements(),
                manifest)


def package(p: Plan, *, root: Path = ROOT) -> bytes:
    """The deployment zip: the code, the manifest as orchestrator.yml, and the
    dependencies pip installs for Lambda (python3.13, x86_64) unless the plan has none."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        def add(name: str, data: bytes) -> None:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)

        for path in _code_files(root):
            add(str(path.relative_to(root)), path.read_bytes())
        add("orchestrator.yml", p.manifest.read_bytes())
        if p.requirements:
            with tempfile.TemporaryDirectory() as tmp:
                _pip_install(p.requirements, Path(tmp))
                for path in sorted(Path(tmp).rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts:
                        add(str(path.relative_to(tmp)), path.read_bytes())
    return buf.getvalue()


def _pip_install(reqs: list[str], target: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target),
           "--platform", "manylinux2014_x86_64", "--implementation", "cp",
           "--python-version", "3.13", "--only-binary=:all:", *reqs]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise DeployError(f"installing the Lambda dependencies failed: {done.stderr.strip()}")


def render(p: Plan, *, code_bytes: int | None = None) -> str:
    """The dry run's plan, for a reviewer."""
    shown = {k: ("****" if k in SECRET_PARAMETERS and v else v) for k, v in p.parameters.items()}
    lines = [f"stack {p.stack} in {p.region}: a change set of {len(p.resources)} resources"
             " (CREATE if the stack is new, else UPDATE with what differs)",
             f"manifest {p.manifest} (lint: ok), packaged as orchestrator.yml", "",
             "parameters:"]
    declared = p.template.get("Parameters", {})
    for name in sorted(declared):
        value = shown.get(name, declared[name].get("Default", ""))
        lines.append(f"  {name} = {value!r}" + ("" if name in shown else "  (default)"))
    lines += ["", "resources:"]
    for logical_id, kind in p.resources:
        lines.append(f"  {kind:34s} {logical_id}")
    deps = ", ".join(p.requirements) if p.requirements else "none (--no-deps)"
    size = f", {code_bytes / 1024:.0f} KB zipped" if code_bytes is not None else ""
    lines += ["", f"package: {len(p.files)} files of orchestrator/ and functions/{size}",
              f"dependencies (pip, manylinux2014_x86_64, cp313): {deps}", ""]
    cost = idle_month()
    lines.append(f"estimated monthly cost standing idle: ${cost['total']:.2f}"
                 " (us-east-1 on-demand prices; everything else is per use):")
    for item, dollars in cost.items():
        if item != "total":
            lines.append(f"  {item:60s} ${dollars:.3f}")
    return "\n".join([*lines, *p.notes])


def _artifact_bucket(clients: Any, stack: str, region: str) -> str:
    account = call("GetCallerIdentity", clients.sts.get_caller_identity)["Account"]
    bucket = f"{stack}-artifacts-{account}-{region}"[:63]
    try:
        clients.s3.head_bucket(Bucket=bucket)
    except ClientError:
        extra = {} if region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": region}}
        call(f"bucket {bucket}: CreateBucket", clients.s3.create_bucket, Bucket=bucket, **extra)
    return bucket


def deploy(clients: Any, p: Plan, code: bytes, *, timeout: float = 1800.0,
           echo: Any = print) -> dict[str, str]:
    """Upload `code`, create and execute the change set, wait; the stack's outputs.

    An update whose tables' indexes differ from the deployed ones by more than one index
    is made in steps, one index created or deleted in each (CloudFormation takes one per
    update: infra/indexes.py), the new code from the first step on."""
    bucket = _artifact_bucket(clients, p.stack, p.region)
    key = f"{p.stack}/code-{hashlib.sha256(code).hexdigest()[:16]}.zip"
    call(f"s3://{bucket}/{key}: PutObject", clients.s3.put_object, Bucket=bucket, Key=key,
          Body=code)
    status = wait_for_stack(clients, p.stack, Deadline(f"stack {p.stack}", timeout))
    if status == "ROLLBACK_COMPLETE":  # a failed first creation: it can only be deleted
        call("DeleteStack", clients.cloudformation.delete_stack, StackName=p.stack)
        status = wait_for_stack(clients, p.stack, Deadline(f"stack {p.stack}", timeout))
    kind = "CREATE" if status == "DELETE_COMPLETE" else "UPDATE"
    stages = [p.template]
    if kind == "UPDATE":
        stages = staged_templates(p.template, deployed_indexes(clients.dynamodb, p))
    outputs: dict[str, str] = {}
    for i, template in enumerate(stages, 1):
        if len(stages) > 1:
            echo(f"index migration, step {i} of {len(stages)}"
                 f"{': the template as it is' if i == len(stages) else ''}")
        outputs = _apply(clients, p, template, bucket, key, kind,
                         Deadline(f"stack {p.stack}", timeout), echo)
        kind = "UPDATE"
    return outputs


def deployed_indexes(ddb: Any, p: Plan) -> dict[str, dict[str, Any]]:
    """The indexes and attribute definitions of the plan's tables that exist (logical
    id -> {"indexes", "attributes"}), as DescribeTable gives them."""
    out: dict[str, dict[str, Any]] = {}
    for logical_id, resource in p.template["Resources"].items():
        if resource.get("Type") != "AWS::DynamoDB::Table":
            continue
        name = table_name(resource["Properties"], p.parameters)
        try:
            table = ddb.describe_table(TableName=name)["Table"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                continue
            raise DeployError(f"table {name}: DescribeTable: {exc}") from exc
        out[logical_id] = {"indexes": table.get("GlobalSecondaryIndexes", []),
                           "attributes": table.get("AttributeDefinitions", [])}
    return out


def _apply(clients: Any, p: Plan, template: dict[str, Any], bucket: str, key: str,
           kind: str, deadline: Deadline, echo: Any) -> dict[str, str]:
    """One change set of `template` (its functions' code at s3://bucket/key), executed
    and waited for; the stack's outputs."""
    template = json.loads(json.dumps(template))
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            resource["Properties"]["Code"] = {"S3Bucket": bucket, "S3Key": key}
    body = json.dumps(template)
    where: dict[str, str] = {"TemplateBody": body}
    if len(body) > 51_200:  # CloudFormation's limit for a body sent inline
        tkey = f"{p.stack}/template-{hashlib.sha256(body.encode()).hexdigest()[:16]}.json"
        clients.s3.put_object(Bucket=bucket, Key=tkey, Body=body.encode())
        where = {"TemplateURL": f"https://{bucket}.s3.amazonaws.com/{tkey}"}
    name = f"deploy-{hashlib.sha256((body + key).encode()).hexdigest()[:12]}"
    params = [{"ParameterKey": k, "ParameterValue": v} for k, v in p.parameters.items()]
    call(f"stack {p.stack}: CreateChangeSet", clients.cloudformation.create_change_set,
          StackName=p.stack, ChangeSetName=name, ChangeSetType=kind, Parameters=params,
          Capabilities=CAPABILITIES, **where)
    while True:
        cs = call("DescribeChangeSet", clients.cloudformation.describe_change_set,
                   StackName=p.stack, ChangeSetName=name)
        if cs["Status"] in ("CREATE_COMPLETE", "FAILED"):
            break
        deadline.sleep(cs["Status"])
    if cs["Status"] == "FAILED":
        reason = cs.get("StatusReason", "")
        if "didn't contain changes" in reason or "No updates" in reason:
            echo(f"stack {p.stack}: up to date")
            return _outputs(clients, p.stack)
        raise DeployError(f"stack {p.stack}: change set failed: {reason}")
    echo(f"change set {name} ({kind}):")
    for change in cs.get("Changes", []):
        rc = change.get("ResourceChange", {})
        echo(f"  {rc.get('Action', '?'):7s} {rc.get('ResourceType', ''):34s}"
             f" {rc.get('LogicalResourceId', '')}")
    call("ExecuteChangeSet", clients.cloudformation.execute_change_set, StackName=p.stack,
          ChangeSetName=name)
    status = wait_for_stack(clients, p.stack, deadline)
    if status not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
        raise DeployError(f"stack {p.stack} is {status}: {failure_reasons(clients, p.stack)}")
    return _outputs(clients, p.stack)


def _outputs(clients: Any, stack: str) -> dict[str, str]:
    stacks = call("DescribeStacks", clients.cloudformation.describe_stacks, StackName=stack)
    return {o["OutputKey"]: o["OutputValue"] for o in stacks["Stacks"][0].get("Outputs", [])}


def destroy(clients: Any, stack: str, *, delete_data: bool = False,
            timeout: float = 1800.0) -> list[str]:
    """Delete the stack; with `delete_data`, its kept tables and bucket too. What was
    deleted besides the stack."""
    from orchestrator.settings import ResourceNames

    deadline = Deadline(f"stack {stack}", timeout)
    if wait_for_stack(clients, stack, deadline) != "DELETE_COMPLETE":
        call(f"stack {stack}: DeleteStack", clients.cloudformation.delete_stack,
              StackName=stack)
        status = wait_for_stack(clients, stack, deadline)
        if status != "DELETE_COMPLETE":
            raise DeployError(f"stack {stack} is {status}: {failure_reasons(clients, stack)}")
    gone: list[str] = []
    if not delete_data:
        return gone
    names = ResourceNames(stack)
    for table in (names.runs_table, names.steps_table, names.control_table):
        try:
            clients.dynamodb.delete_table(TableName=table)
            gone.append(table)
        except ClientError as exc:
            if "ResourceNotFound" not in str(exc):
                raise DeployError(f"table {table}: {exc}") from exc
    try:
        empty_bucket(clients, names.blob_bucket)
        clients.s3.delete_bucket(Bucket=names.blob_bucket)
        gone.append(names.blob_bucket)
    except ClientError as exc:
        if "NoSuchBucket" not in str(exc):
            raise DeployError(f"bucket {names.blob_bucket}: {exc}") from exc
    return gone
