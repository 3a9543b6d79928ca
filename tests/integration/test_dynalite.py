"""The orchestrator on a DynamoDB that is not moto's: dynalite (the npm package, a DynamoDB
on LevelDB, pinned in infra/dynalite), with SQS and S3 on moto, each client sent to its
service's own endpoint (`AWS_ENDPOINT_URL_DYNAMODB` over `AWS_ENDPOINT_URL`) and the
resources made straight through the services' APIs (infra/direct.py), as on any endpoint
without CloudFormation.

The race tests of the moto suite run here unchanged: this module overrides `build_harness`
(tests/conftest.py), so the harness of every test below keeps its tables on dynalite.
Without dynalite installed (`npm ci --prefix infra/dynalite`) they skip, unless
ORCH_REQUIRE_DYNALITE=1 (CI), where they fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.direct import create_data_resources
from infra.emulator import Emulator
from infra.template import data_resources_template
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.settings import Settings
from tests.faults import test_faults as faults
from tests.integration import test_api_runs as api_runs
from tests.integration import test_demo as demos
from tests.integration import test_wide_join as wide_join
from tests.integration.test_cli import clean_env, run_dev
from tests.support.dynalite import REQUIRE_VARIABLE, Dynalite, required, unavailable
from tests.support.harness import BuildHarness, Harness, fresh_settings

# What dynalite does not serve, as infra/direct.py reports it for each table.
LACKS = ("TTL", "point-in-time recovery")

# The moto suite's tests, run here as they are (their harness is this module's).
test_monthly_report_end_to_end = demos.test_monthly_report_end_to_end
test_two_workers_racing_for_one_step_dispatch_it_once = (
    faults.test_two_workers_racing_for_one_step_dispatch_it_once)
test_claims_are_exclusive_under_a_32_way_race = faults.test_claims_are_exclusive_under_a_32_way_race
test_duplicated_completion_promotes_the_join_once = (
    faults.test_duplicated_completion_promotes_the_join_once)
test_counts_given_twice_or_split_promote_the_join_once = (
    wide_join.test_counts_given_twice_or_split_promote_the_join_once)
test_hundred_concurrent_posts_with_one_key_make_one_run = (
    api_runs.test_hundred_concurrent_posts_with_one_key_make_one_run)
# dynalite sends no row with a failed guard: the store reads it (Tables.landed).
test_a_write_whose_answer_was_lost_is_known_by_its_resent_copy = (
    faults.test_a_write_whose_answer_was_lost_is_known_by_its_resent_copy)
# ... and the fixtures of theirs that build on `build_harness`.
demo = demos.demo
api = api_runs.api


@pytest.fixture(scope="session")
def dynalite() -> Iterator[Dynalite]:
    reason = unavailable()
    if reason is not None:
        if required():
            pytest.fail(f"{reason} ({REQUIRE_VARIABLE}=1: these tests may not skip)")
        pytest.skip(reason)
    with Dynalite() as dyn:
        yield dyn


def on_dynalite(emulator: Emulator, dynalite: Dynalite, **overrides: Any) -> Settings:
    return fresh_settings(emulator.url, service_endpoints={"dynamodb": dynalite.url},
                          **overrides)


def clients_for(emulator: Emulator, settings: Settings) -> Clients:
    clients = make_clients(settings)
    # SQS and S3 are moto's: those two call the emulator in-process, as the moto suite's
    # harness does. DynamoDB goes over HTTP to dynalite, signed as for AWS.
    emulator.attach(clients.sqs)
    emulator.attach(clients.s3)
    return clients


@pytest.fixture
def build_harness(emulator: Emulator, dynalite: Dynalite) -> BuildHarness:
    def build(manifest_text: str, tmp: Path, env: dict[str, str],
              **settings: object) -> Harness:
        s = on_dynalite(emulator, dynalite, **settings)
        clients = clients_for(emulator, s)
        assert clients.dynamodb.meta.endpoint_url == dynalite.url
        return Harness.build(s, manifest_text, tmp, env, clients=clients,
                             provision=create_data_resources)

    return build


def test_the_template_resources_are_made_on_dynalite_and_what_it_lacks_is_named(
    emulator: Emulator, dynalite: Dynalite,
) -> None:
    s = on_dynalite(emulator, dynalite)
    clients = clients_for(emulator, s)
    names = s.names
    tables = [names.runs_table, names.steps_table, names.control_table]
    skipped = create_data_resources(clients, s.prefix)
    assert skipped == [f"table {t}: {what} (UnknownOperationException)"
                       for t in tables for what in LACKS]
    assert create_data_resources(clients, s.prefix) == skipped  # a second start reuses them
    # Each table has the template's keys and indexes, on dynalite and not on moto.
    template = data_resources_template(s.prefix)["Resources"]
    wanted = {r["Properties"]["TableName"]["Fn::Sub"].replace("${Prefix}", s.prefix):
              r["Properties"] for r in template.values() if r["Type"] == "AWS::DynamoDB::Table"}
    assert sorted(wanted) == sorted(tables)
    for name, props in wanted.items():
        table = clients.dynamodb.describe_table(TableName=name)["Table"]
        assert table["TableStatus"] == "ACTIVE" and table["KeySchema"] == props["KeySchema"]
        assert {(i["IndexName"], str(i["KeySchema"])) for i in table.get(
            "GlobalSecondaryIndexes", [])} == {(i["IndexName"], str(i["KeySchema"]))
                                               for i in props.get("GlobalSecondaryIndexes", [])}
    moto = make_clients(Settings(endpoint_url=emulator.url)).dynamodb
    for name in tables:
        with pytest.raises(moto.exceptions.ResourceNotFoundException):
            moto.describe_table(TableName=name)
    # The queues and the bucket are moto's, with what dynalite has nothing to do with.
    url = clients.sqs.get_queue_url(QueueName=names.dispatch_queue)["QueueUrl"]
    assert "RedrivePolicy" in clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert clients.s3.get_bucket_lifecycle_configuration(Bucket=names.blob_bucket)["Rules"]


def test_a_failed_guard_on_dynalite_carries_no_row(emulator: Emulator,
                                                   dynalite: Dynalite) -> None:
    # What Tables.landed reads the row again for: dynalite ignores
    # ReturnValuesOnConditionCheckFailure (AWS and moto send the row as the guard found it).
    s = on_dynalite(emulator, dynalite)
    ddb = make_clients(s).dynamodb
    table = s.names.control_table
    ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    ddb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.05})
    key = {"pk": {"S": "row"}}
    ddb.put_item(TableName=table, Item={**key, "v": {"N": "1"}})
    with pytest.raises(ClientError) as caught:
        ddb.update_item(
            TableName=table, Key=key, UpdateExpression="SET v = :two",
            ConditionExpression="v = :zero",
            ExpressionAttributeValues={":two": {"N": "2"}, ":zero": {"N": "0"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD")
    error = caught.value.response
    assert error["Error"]["Code"] == "ConditionalCheckFailedException"
    assert "Item" not in error


@pytest.mark.slow
def test_dev_runs_the_demo_with_dynamodb_on_dynalite(
    tmp_path: Path, emulator: Emulator, dynalite: Dynalite,
) -> None:
    # The README's way to point the orchestrator at such endpoints, as a user types it.
    prefix = on_dynalite(emulator, dynalite).prefix
    env = clean_env() | {"AWS_ENDPOINT_URL": emulator.url,
                         "AWS_ENDPOINT_URL_DYNAMODB": dynalite.url, "ORCH_PREFIX": prefix}
    proc = run_dev(tmp_path, env, "--provision", "direct")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"endpoint   {emulator.url}; dynamodb {dynalite.url}" in out
    assert "emulator   " not in out
    assert out.count("resources  skipped, the endpoint does not support it: ") == 6
    assert "monthly-report" in out and "success" in out
    runs = make_clients(on_dynalite(emulator, dynalite)).dynamodb.scan(
        TableName=f"{prefix}-runs")["Items"]
    assert [r["status"]["S"] for r in runs] == ["success"]
