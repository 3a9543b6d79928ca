"""The endpoints, read from the environment with boto3's names: `AWS_ENDPOINT_URL` for every
service, `AWS_ENDPOINT_URL_<SERVICE>` over it for one, each client sent to its own, and
`orchestrator dev` leaving its embedded emulator out when any of them is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.adapters.aws import make_clients
from orchestrator.cli.commands import main
from orchestrator.settings import (
    SERVICE_ENDPOINT_VARIABLES,
    ClientDefaults,
    LambdaSettings,
    Settings,
    SettingsError,
)

ROOT = Path(__file__).resolve().parents[2]
MOTO = "http://127.0.0.1:4566"
DYNALITE = "http://127.0.0.1:4567"


def test_a_service_endpoint_is_read_over_the_common_one() -> None:
    s = Settings.from_env({"AWS_ENDPOINT_URL": MOTO, "AWS_ENDPOINT_URL_DYNAMODB": DYNALITE})
    assert s.endpoint_url == MOTO and s.service_endpoints == {"dynamodb": DYNALITE}
    assert s.endpoint_for("dynamodb") == DYNALITE
    assert [s.endpoint_for(x) for x in ("sqs", "s3", "cloudformation")] == [MOTO] * 3
    assert s.has_endpoint


def test_boto3s_names_for_each_service() -> None:
    assert SERVICE_ENDPOINT_VARIABLES == {
        "dynamodb": "AWS_ENDPOINT_URL_DYNAMODB", "sqs": "AWS_ENDPOINT_URL_SQS",
        "s3": "AWS_ENDPOINT_URL_S3", "cloudformation": "AWS_ENDPOINT_URL_CLOUDFORMATION"}
    env = {variable: f"http://{service}:1" for service, variable in
           SERVICE_ENDPOINT_VARIABLES.items()}
    s = Settings.from_env(env)
    assert s.endpoint_url is None
    assert {x: s.endpoint_for(x) for x in SERVICE_ENDPOINT_VARIABLES} == {
        x: f"http://{x}:1" for x in SERVICE_ENDPOINT_VARIABLES}


def test_no_endpoint_is_aws_and_an_empty_variable_is_none() -> None:
    for env in ({}, {"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_SQS": " "}):
        s = Settings.from_env(env)
        assert s.endpoint_url is None and s.service_endpoints == {}
        assert s.endpoint_for("sqs") is None and not s.has_endpoint
    assert Settings() == Settings.from_env({})


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"])
def test_an_endpoint_that_is_no_url_names_its_variable(variable: str) -> None:
    with pytest.raises(ValueError, match=f"{variable}='localhost:4567'"):
        Settings.from_env({variable: "localhost:4567"})


def test_settings_keep_their_own_copy_and_refuse_a_service_without_a_client() -> None:
    given = {"dynamodb": DYNALITE}
    s = Settings(service_endpoints=given)
    given["sqs"] = MOTO
    assert s.service_endpoints == {"dynamodb": DYNALITE}
    assert s.with_(prefix="other").service_endpoints == {"dynamodb": DYNALITE}
    assert isinstance(hash(s), int)  # still hashable, as a frozen dataclass is
    with pytest.raises(ValueError, match="no client for \\['dynamo'\\]"):
        Settings(service_endpoints={"dynamo": DYNALITE})


def test_each_client_goes_to_its_services_endpoint_with_dummy_credentials() -> None:
    clients = make_clients(Settings(endpoint_url=MOTO, service_endpoints={"dynamodb": DYNALITE}))
    assert clients.dynamodb.meta.endpoint_url == DYNALITE
    assert {c.meta.endpoint_url for c in (clients.sqs, clients.s3, clients.cloudformation)} == {
        MOTO}
    # Nothing goes looking for real credentials (environment, files, instance metadata).
    for client in (clients.dynamodb, clients.sqs, clients.s3, clients.cloudformation):
        assert client._request_signer._credentials.access_key == "local"


def test_any_endpoint_set_leaves_the_embedded_emulator_out_of_dev() -> None:
    assert ClientDefaults.from_env({}).endpoint is None
    assert ClientDefaults.from_env({"AWS_ENDPOINT_URL": MOTO}).endpoint == MOTO
    assert ClientDefaults.from_env({"AWS_ENDPOINT_URL_SQS": MOTO}).endpoint == MOTO
    assert ClientDefaults.from_env(
        {"AWS_ENDPOINT_URL_DYNAMODB": DYNALITE, "AWS_ENDPOINT_URL": MOTO}).endpoint == MOTO


def test_dev_refuses_cloudformation_that_would_make_the_tables_on_another_dynamodb() -> None:
    # CloudFormation (moto) would make the tables in its own DynamoDB, not dynalite's:
    # `dev` says so before starting anything, and names the way out.
    env = {"AWS_ENDPOINT_URL": MOTO, "AWS_ENDPOINT_URL_DYNAMODB": DYNALITE}
    res = CliRunner().invoke(main, ["dev", "--manifest", str(ROOT / "orchestrator.yml")],
                             env=env)
    assert res.exit_code == 2, res.output
    assert f"endpoint   {MOTO}; dynamodb {DYNALITE}" in res.output
    assert "emulator   " not in res.output
    assert f"dynamodb is at {DYNALITE} but CloudFormation at {MOTO}" in res.output
    assert "--provision direct" in res.output


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("ORCH_DURABLE_PROTOCOL", "3", "ORCH_DURABLE_PROTOCOL: 3 is no durable protocol version"),
    ("ORCH_DURABLE_MAX_ENTRIES", "lots", "ORCH_DURABLE_MAX_ENTRIES='lots' is not a number"),
    ("ORCH_LOG_FORMAT", "xml", "ORCH_LOG_FORMAT='xml': use text or json"),
    ("ORCH_OTEL", "maybe", "ORCH_OTEL='maybe': use on or off"),
])
def test_a_setting_it_cannot_use_stops_dev_in_one_line_naming_it(
        variable: str, value: str, said: str) -> None:
    res = CliRunner().invoke(main, ["dev", "--manifest", str(ROOT / "orchestrator.yml")],
                             env={variable: value})
    assert res.exit_code == 2, res.output
    assert said in res.output and "Traceback" not in res.output


def test_a_lambda_container_reads_its_manifest_path_and_margin_through_settings() -> None:
    assert LambdaSettings.from_env({}) == LambdaSettings("./orchestrator.yml", 5.0)
    got = LambdaSettings.from_env({"LAMBDA_TASK_ROOT": "/var/task", "ORCH_MANIFEST": "m.yml",
                                   "ORCH_LAMBDA_MARGIN": "2.5"})
    assert got == LambdaSettings("/var/task/m.yml", 2.5)
    with pytest.raises(SettingsError, match="ORCH_LAMBDA_MARGIN='soon' is not a number"):
        LambdaSettings.from_env({"ORCH_LAMBDA_MARGIN": "soon"})


def test_only_settings_reads_the_environment() -> None:
    """STYLE.md, convention 6: every variable is named in settings.py, the one reader."""
    readers = [
        str(p.relative_to(ROOT)) for p in sorted((ROOT / "orchestrator").rglob("*.py"))
        if p.name != "settings.py"
        and any(w in p.read_text() for w in ("os.environ", "os.getenv", "getenv("))
    ]
    assert readers == []


@pytest.mark.parametrize(("env", "tracing"), [
    ({}, False),
    ({"ORCH_OTEL": "on"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "ORCH_OTEL": "off"}, False),
])
def test_tracing_is_on_when_asked_or_when_an_exporter_is_configured(
        env: dict[str, str], tracing: bool) -> None:
    assert Settings.from_env(env).tracing is tracing


def test_logs_are_text_by_default_and_json_in_lambda() -> None:
    assert Settings.from_env({}).log_format == "text"
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "worker"}).log_format == "json"
    assert Settings.from_env({"AWS_LAMBDA_FUNCTION_NAME": "worker",
                              "ORCH_LOG_FORMAT": "TEXT"}).log_format == "text"
