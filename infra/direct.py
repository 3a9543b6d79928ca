"""The data resources of template.yaml created straight through the services' own APIs,
for endpoints that serve DynamoDB, SQS and S3 but no CloudFormation (DynamoDB Local,
dynalite, ElasticMQ, ScyllaDB Alternator...). The template stays the one definition: each
resource is read from `data_resources_template` and turned into the calls CloudFormation
would make. Creating what exists already is not an error (a second start reuses it).

What an endpoint refuses that the orchestrator can do without is skipped and reported:
TTL (rows then stay until deleted), point-in-time recovery, a bucket's encryption,
lifecycle or public-access block."""

from __future__ import annotations

import json
import re
from typing import Any

from botocore.exceptions import ClientError

from infra.stack import DeployError
from infra.template import data_resources_template

__all__ = ["create_data_resources"]

_SUB = re.compile(r"\$\{([^}]+)\}")


def _sub(value: Any, prefix: str) -> str:
    if isinstance(value, dict) and "Fn::Sub" in value:
        return _SUB.sub(lambda m: prefix if m.group(1) == "Prefix" else m.group(0),
                        str(value["Fn::Sub"]))
    return str(value)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def create_data_resources(clients: Any, prefix: str) -> list[str]:
    """Create every table, queue and bucket of the template for `prefix`; what was
    skipped because the endpoint does not support it (empty: nothing)."""
    template = data_resources_template(prefix)
    skipped: list[str] = []
    arns: dict[str, str] = {}
    resources = template["Resources"]
    # Queues a redrive policy points at first (the dead-letter queue).
    order = sorted(resources, key=lambda k: "RedrivePolicy" in resources[k].get(
        "Properties", {}))
    for logical_id in order:
        resource = resources[logical_id]
        props = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::DynamoDB::Table":
            skipped += _table(clients.dynamodb, props, prefix)
        elif kind == "AWS::SQS::Queue":
            arns[logical_id] = _queue(clients.sqs, props, prefix, arns)
        elif kind == "AWS::S3::Bucket":
            skipped += _bucket(clients.s3, props, prefix)
    return skipped


def _table(ddb: Any, props: dict[str, Any], prefix: str) -> list[str]:
    name = _sub(props["TableName"], prefix)
    args: dict[str, Any] = {
        "TableName": name, "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"], "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        args["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
    try:
        ddb.create_table(**args)
    except ClientError as exc:
        if _code(exc) != "ResourceInUseException":
            raise DeployError(f"table {name}: {exc}") from exc
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2,
                                                                       "MaxAttempts": 150})
    skipped = []
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        try:
            ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        except ClientError as exc:
            if "already enabled" not in str(exc).lower():
                skipped.append(f"table {name}: TTL ({_code(exc)})")
    pitr = props.get("PointInTimeRecoverySpecification")
    if pitr:
        try:
            ddb.update_continuous_backups(TableName=name,
                                          PointInTimeRecoverySpecification=pitr)
        except ClientError as exc:
            skipped.append(f"table {name}: point-in-time recovery ({_code(exc)})")
    return skipped


def _queue(sqs: Any, props: dict[str, Any], prefix: str, arns: dict[str, str]) -> str:
    name = _sub(props["QueueName"], prefix)
    attributes = {k: str(v) for k, v in props.items()
                  if k in ("VisibilityTimeout", "ReceiveMessageWaitTimeSeconds",
                           "MessageRetentionPeriod", "DelaySeconds")}
    redrive = props.get("RedrivePolicy")
    if redrive:
        target = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
        attributes["RedrivePolicy"] = json.dumps({
            "deadLetterTargetArn": arns[target],
            "maxReceiveCount": int(redrive["maxReceiveCount"]),
        })
    try:
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    except ClientError as exc:
        if _code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
            raise DeployError(f"queue {name}: {exc}") from exc
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    return arn


def _bucket(s3: Any, props: dict[str, Any], prefix: str) -> list[str]:
    name = _sub(props["BucketName"], prefix)
    try:
        s3.create_bucket(Bucket=name)
    except ClientError as exc:
        if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise DeployError(f"bucket {name}: {exc}") from exc
    skipped = []
    calls = (
        ("public-access block", "put_public_access_block", "PublicAccessBlockConfiguration",
         "PublicAccessBlockConfiguration"),
        ("encryption", "put_bucket_encryption", "BucketEncryption",
         "ServerSideEncryptionConfiguration"),
        ("lifecycle", "put_bucket_lifecycle_configuration", "LifecycleConfiguration",
         "LifecycleConfiguration"),
    )
    for what, method, prop, arg in calls:
        if prop not in props:
            continue
        value = props[prop]
        if prop == "BucketEncryption":
            value = {"Rules": [{"ApplyServerSideEncryptionByDefault":
                                r["ServerSideEncryptionByDefault"]}
                               for r in props[prop]["ServerSideEncryptionConfiguration"]]}
        elif prop == "LifecycleConfiguration":
            value = {"Rules": [{"ID": r["Id"], "Status": r["Status"],
                                "Filter": {"Prefix": r.get("Prefix", "")},
                                "Expiration": {"Days": int(r["ExpirationInDays"])}}
                               for r in props[prop]["Rules"]]}
        try:
            getattr(s3, method)(Bucket=name, **{arg: value})
        except ClientError as exc:
            skipped.append(f"bucket {name}: {what} ({_code(exc)})")
    return skipped
