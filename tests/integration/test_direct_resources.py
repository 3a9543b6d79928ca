"""The data resources created straight through the service APIs (infra/direct.py), for
endpoints without CloudFormation: the same tables, indexes, queues and bucket as the
template's stack, a second start reusing them, and a workflow running on them."""

from __future__ import annotations

from pathlib import Path

from infra.direct import create_data_resources
from infra.emulator import Emulator
from orchestrator.adapters.aws import make_clients
from orchestrator.runtime import Runtime
from tests.support.harness import Harness, fresh_settings

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
"""


def test_the_template_resources_created_directly_run_a_workflow(
    emulator: Emulator, testfns: str, tmp_path: Path,
) -> None:
    s = fresh_settings(emulator.url)
    clients = make_clients(s)
    assert create_data_resources(clients, s.prefix) == []  # moto answers every call
    assert create_data_resources(clients, s.prefix) == []  # a second start reuses them
    names = s.names
    runs = clients.dynamodb.describe_table(TableName=names.runs_table)["Table"]
    assert {i["IndexName"] for i in runs["GlobalSecondaryIndexes"]} == {
        "by-workflow-keys", "active", "recent-keys", "wake"}
    ttl = clients.dynamodb.describe_time_to_live(TableName=names.steps_table)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    url = clients.sqs.get_queue_url(QueueName=names.dispatch_queue)["QueueUrl"]
    attrs = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "720" and '"maxReceiveCount": 10' in attrs[
        "RedrivePolicy"].replace("'", '"')
    assert clients.s3.get_bucket_lifecycle_configuration(Bucket=names.blob_bucket)["Rules"]
    # No CloudFormation stack was made, and the orchestrator runs on what was.
    stacks = clients.cloudformation.list_stacks()["StackSummaries"]
    assert not [st for st in stacks if st["StackName"].startswith(s.prefix)]
    from orchestrator.manifest.loader import manifest_from_text

    m = manifest_from_text(MANIFEST, "orchestrator.yml", tmp_path, {"FN": testfns})
    h = Harness(Runtime.build(s, m, clients=clients))
    try:
        h.start_workers()
        run_id = h.start("chain")
        assert h.wait(run_id)["status"] == "success"
    finally:
        h.close()
