"""Deploy the data resources of template.yaml (tables, queues, bucket) as one CloudFormation
stack `${prefix}-data`, through whatever endpoint the clients point at (moto locally).

    deploy_data_stack(make_clients(settings), settings.prefix)

Deploying is idempotent: an existing complete stack is reused. After the stack is complete
the resources are checked against orchestrator.settings.ResourceNames, and what moto's
CloudFormation leaves out is applied through the service APIs (on AWS these are no-ops,
since CloudFormation already applied them):

- TimeToLiveSpecification of a table (moto ignores it): UpdateTimeToLive;
- GlobalSecondaryIndexes of a table that exists (moto's update leaves them as they
  were): UpdateTable, one index at a time (infra/indexes.py), each waited for;
- LifecycleConfiguration and PublicAccessBlockConfiguration of a bucket (moto ignores
  both): PutBucketLifecycleConfiguration, PutPublicAccessBlock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from infra.indexes import attributes, index_steps, index_update
from infra.template import data_resources_template
from orchestrator.adapters.aws import Clients
from orchestrator.errors import OrchestratorError
from orchestrator.settings import ResourceNames

__all__ = [
    "Deadline",
    "DeployError",
    "call",
    "converge_indexes",
    "deploy_data_stack",
    "destroy_data_stack",
    "empty_bucket",
    "failure_reasons",
    "stack_name",
    "wait_for_stack",
]

T = TypeVar("T")

_REUSABLE = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}
_IN_PROGRESS_SUFFIX = "_IN_PROGRESS"


class DeployError(OrchestratorError):
    """The data stack could not be created, verified or deleted (the cause is chained)."""

    code = "deploy_error"


def stack_name(prefix: str) -> str:
    return f"{prefix}-data"


def call(what: str, fn: Callable[..., T], **kwargs: Any) -> T:
    try:
        return fn(**kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise DeployError(f"{what}: {error.get('Code')}: {error.get('Message')}") from exc


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class Deadline:
    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.end = time.monotonic() + timeout
        self.delay = 0.02

    def sleep(self, state: str) -> None:
        if time.monotonic() >= self.end:
            raise DeployError(f"{self.what}: still {state} after {self.timeout:g}s")
        # Locally everything completes at once; on AWS a stack takes tens of seconds.
        time.sleep(min(self.delay, max(0.0, self.end - time.monotonic())))
        self.delay = min(self.delay * 2, 2.0)


def _stack_status(clients: Clients, name: str) -> str | None:
    try:
        stacks = clients.cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as exc:
        if _error_code(exc) == "ValidationError" and "does not exist" in str(exc):
            return None
        raise DeployError(f"stack {name}: DescribeStacks failed: {exc}") from exc
    status = stacks[0]["StackStatus"] if stacks else None
    return None if status == "DELETE_COMPLETE" else status


def failure_reasons(clients: Clients, name: str) -> str:
    try:
        events = clients.cloudformation.describe_stack_events(StackName=name)["StackEvents"]
    except ClientError:
        return "(no stack events)"
    reasons = [
        f"{e['LogicalResourceId']}: {e['ResourceStatusReason']}"
        for e in events
        if e.get("ResourceStatus", "").endswith("FAILED") and e.get("ResourceStatusReason")
    ]
    return "; ".join(reasons) or "(no failure reason recorded)"


def wait_for_stack(clients: Clients, name: str, deadline: Deadline) -> str:
    while True:
        status = _stack_status(clients, name)
        if status is None or not status.endswith(_IN_PROGRESS_SUFFIX):
            return status or "DELETE_COMPLETE"
        deadline.sleep(status)


def deploy_data_stack(clients: Clients, prefix: str, *, timeout: float = 30.0) -> None:
    """Create (or reuse) the stack `${prefix}-data` with the data resources of template.yaml,
    wait until it is complete, and check that every table, queue and bucket is usable.

    Raises TemplateError for a prefix the template refuses, DeployError otherwise."""
    name = stack_name(prefix)
    template = data_resources_template(prefix)
    deadline = Deadline(f"stack {name}", timeout)
    status = wait_for_stack(clients, name, deadline)
    if status == "ROLLBACK_COMPLETE":
        # A failed first creation holds no resources, and CloudFormation only lets it be
        # deleted: clear it and create again.
        call(f"stack {name}: DeleteStack", clients.cloudformation.delete_stack, StackName=name)
        status = wait_for_stack(clients, name, deadline)
    if status == "DELETE_COMPLETE":
        try:
            clients.cloudformation.create_stack(
                StackName=name,
                TemplateBody=json.dumps(template),
                Parameters=[{"ParameterKey": "Prefix", "ParameterValue": prefix}],
                Tags=[{"Key": "orchestrator:prefix", "Value": prefix}],
            )
        except ClientError as exc:
            # Another process is creating the same stack: wait for it like for our own.
            if _error_code(exc) != "AlreadyExistsException":
                error = exc.response.get("Error", {})
                raise DeployError(
                    f"stack {name}: CreateStack: {error.get('Code')}: {error.get('Message')}"
                ) from exc
        status = wait_for_stack(clients, name, deadline)
    if status not in _REUSABLE:
        raise DeployError(f"stack {name} is {status}: {failure_reasons(clients, name)}")
    _converge(clients, name, template, ResourceNames(prefix), deadline)


def _physical_ids(clients: Clients, name: str) -> dict[str, str]:
    resources = call(
        f"stack {name}: DescribeStackResources",
        clients.cloudformation.describe_stack_resources,
        StackName=name,
    )["StackResources"]
    return {r["LogicalResourceId"]: r.get("PhysicalResourceId", "") for r in resources}


def _check_names(stack: str, kind: str, found: set[str], expected: set[str]) -> None:
    if found != expected:
        raise DeployError(
            f"stack {stack}: its {kind} are {sorted(found)} but ResourceNames expects "
            f"{sorted(expected)}: template.yaml and orchestrator/settings.py disagree"
        )


def _converge(
    clients: Clients,
    stack: str,
    template: dict[str, Any],
    names: ResourceNames,
    deadline: Deadline,
) -> None:
    physical = _physical_ids(clients, stack)
    by_type: dict[str, dict[str, str]] = {}
    for logical_id, resource in template["Resources"].items():
        if logical_id not in physical:
            raise DeployError(f"stack {stack}: resource {logical_id} is missing from the stack")
        by_type.setdefault(resource["Type"], {})[logical_id] = physical[logical_id]

    tables = by_type.get("AWS::DynamoDB::Table", {})
    expected_tables = {names.runs_table, names.steps_table, names.control_table}
    _check_names(stack, "tables", set(tables.values()), expected_tables)
    for logical_id, table in tables.items():
        _converge_table(clients, table, template["Resources"][logical_id]["Properties"], deadline)

    # A queue's physical id is its URL; the name is its last path segment.
    queues = by_type.get("AWS::SQS::Queue", {})
    queue_names = {url.rstrip("/").rsplit("/", 1)[-1] for url in queues.values()}
    expected_queues = {names.dispatch_queue, names.timer_queue, names.dead_letter_queue}
    _check_names(stack, "queues", queue_names, expected_queues)
    for queue in sorted(queue_names):
        call(f"queue {queue}: GetQueueUrl", clients.sqs.get_queue_url, QueueName=queue)

    buckets = by_type.get("AWS::S3::Bucket", {})
    _check_names(stack, "buckets", set(buckets.values()), {names.blob_bucket})
    for logical_id, bucket in buckets.items():
        _converge_bucket(clients, bucket, template["Resources"][logical_id]["Properties"])


def _converge_table(
    clients: Clients, table: str, properties: dict[str, Any], deadline: Deadline
) -> None:
    while True:
        description = call(
            f"table {table}: DescribeTable", clients.dynamodb.describe_table, TableName=table
        )["Table"]
        if description["TableStatus"] == "ACTIVE":
            break
        deadline.sleep(f"table {table} {description['TableStatus']}")
    converge_indexes(clients, table, properties, deadline)
    wanted = properties.get("TimeToLiveSpecification")
    if not wanted or not wanted.get("Enabled"):
        return
    ttl = call(
        f"table {table}: DescribeTimeToLive",
        clients.dynamodb.describe_time_to_live,
        TableName=table,
    )["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
        if ttl.get("AttributeName") != wanted["AttributeName"]:
            raise DeployError(
                f"table {table}: TTL is on attribute {ttl.get('AttributeName')!r}, "
                f"template.yaml says {wanted['AttributeName']!r}"
            )
        return
    # moto's CloudFormation ignores TimeToLiveSpecification.
    call(
        f"table {table}: UpdateTimeToLive",
        clients.dynamodb.update_time_to_live,
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": wanted["AttributeName"]},
    )


def converge_indexes(clients: Clients, table: str, properties: dict[str, Any],
                     deadline: Deadline) -> list[dict[str, Any]]:
    """`table`'s indexes brought to `properties`' (a template's table), one UpdateTable
    per index created or deleted, each waited for until ACTIVE (or gone): what
    CloudFormation does on AWS. The updates made (none if the indexes agree)."""
    description = call(f"table {table}: DescribeTable", clients.dynamodb.describe_table,
                       TableName=table)["Table"]
    have = description.get("GlobalSecondaryIndexes", [])
    done: list[dict[str, Any]] = []
    known = [*description.get("AttributeDefinitions", []),
             *properties.get("AttributeDefinitions", [])]
    for indexes in index_steps(have, properties.get("GlobalSecondaryIndexes", [])):
        update = index_update(have, indexes)
        # AttributeDefinitions go with a creation only: they name its keys' types.
        extra = ({"AttributeDefinitions": attributes(properties, indexes, known)}
                 if "Create" in update else {})
        call(f"table {table}: UpdateTable {update}", clients.dynamodb.update_table,
             TableName=table, GlobalSecondaryIndexUpdates=[update], **extra)
        names = {i["IndexName"] for i in indexes}
        while True:
            now = call(f"table {table}: DescribeTable", clients.dynamodb.describe_table,
                       TableName=table)["Table"].get("GlobalSecondaryIndexes", [])
            if ({i["IndexName"] for i in now} == names
                    and all(i.get("IndexStatus", "ACTIVE") == "ACTIVE" for i in now)):
                break
            deadline.sleep(f"table {table}: indexes changing")
        have = indexes
        done.append(update)
    return done


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """One rule of AWS::S3::Bucket LifecycleConfiguration in the S3 API's shape."""
    converted: dict[str, Any] = {
        "Status": rule["Status"],
        "Filter": {"Prefix": rule.get("Prefix", "")},
    }
    for key, value in rule.items():
        if key == "Id":
            converted["ID"] = value
        elif key == "ExpirationInDays":
            converted["Expiration"] = {"Days": value}
        elif key == "NoncurrentVersionExpirationInDays":
            converted["NoncurrentVersionExpiration"] = {"NoncurrentDays": value}
        elif key == "AbortIncompleteMultipartUpload":
            converted[key] = value
        elif key not in ("Status", "Prefix"):
            raise DeployError(f"lifecycle rule {rule.get('Id')!r}: {key} is not supported here")
    return converted


def _converge_bucket(clients: Clients, bucket: str, properties: dict[str, Any]) -> None:
    call(f"bucket {bucket}: HeadBucket", clients.s3.head_bucket, Bucket=bucket)
    lifecycle = properties.get("LifecycleConfiguration")
    if lifecycle:
        try:
            clients.s3.get_bucket_lifecycle_configuration(Bucket=bucket)
        except ClientError as exc:
            if _error_code(exc) != "NoSuchLifecycleConfiguration":
                raise DeployError(
                    f"bucket {bucket}: GetBucketLifecycleConfiguration: {exc}"
                ) from exc
            # moto's CloudFormation ignores LifecycleConfiguration.
            call(
                f"bucket {bucket}: PutBucketLifecycleConfiguration",
                clients.s3.put_bucket_lifecycle_configuration,
                Bucket=bucket,
                LifecycleConfiguration={"Rules": [_lifecycle_rule(r) for r in lifecycle["Rules"]]},
            )
    block = properties.get("PublicAccessBlockConfiguration")
    if block:
        try:
            clients.s3.get_public_access_block(Bucket=bucket)
        except ClientError as exc:
            if _error_code(exc) != "NoSuchPublicAccessBlockConfiguration":
                raise DeployError(f"bucket {bucket}: GetPublicAccessBlock: {exc}") from exc
            # moto's CloudFormation ignores PublicAccessBlockConfiguration.
            call(
                f"bucket {bucket}: PutPublicAccessBlock",
                clients.s3.put_public_access_block,
                Bucket=bucket,
                PublicAccessBlockConfiguration=block,
            )


def destroy_data_stack(clients: Clients, prefix: str, *, timeout: float = 30.0) -> None:
    """Delete the stack `${prefix}-data` and with it every table, queue and the bucket, after
    emptying the bucket (CloudFormation refuses to delete a non-empty bucket). A stack that
    does not exist is not an error."""
    name = stack_name(prefix)
    deadline = Deadline(f"stack {name}", timeout)
    if wait_for_stack(clients, name, deadline) == "DELETE_COMPLETE":
        return
    bucket = ResourceNames(prefix).blob_bucket
    try:
        empty_bucket(clients, bucket)
    except ClientError as exc:
        if _error_code(exc) not in ("NoSuchBucket", "404"):
            raise DeployError(f"bucket {bucket}: emptying it failed: {exc}") from exc
    call(f"stack {name}: DeleteStack", clients.cloudformation.delete_stack, StackName=name)
    status = wait_for_stack(clients, name, deadline)
    if status != "DELETE_COMPLETE":
        raise DeployError(f"stack {name} is {status}: {failure_reasons(clients, name)}")


def empty_bucket(clients: Clients, bucket: str) -> None:
    paginator = clients.s3.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=bucket):
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if doomed:
            clients.s3.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
