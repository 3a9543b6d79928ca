"""How a setting names the emulator's AWS model (`orchestrator dev --aws-model [FILE]`,
ORCH_EMULATOR_MODEL): one reading for both (`model_file`), a file it cannot use refused
as a usage error naming where the setting came from, the file and the field, and the
model asked for where no embedded emulator runs refused (the flag) or passed over in one
line (the variable)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from infra.emulator.aws_model import DEFAULT_FILE, MODEL_VARIABLE, from_environ, load, model_file
from orchestrator.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
MOTO = "http://127.0.0.1:4566"
DYNALITE = "http://127.0.0.1:4567"
FIELD = "dynamodb.partition.write_units_per_second"


@pytest.mark.parametrize(("value", "path"), [
    ("aws", DEFAULT_FILE), (" AWS\n", DEFAULT_FILE), ("on", DEFAULT_FILE), ("1", DEFAULT_FILE),
    ("", None), ("  ", None), ("off", None), ("OFF ", None), ("0", None), ("None", None),
    ("my/model.yaml", Path("my/model.yaml")), (" /tmp/Model.yaml ", Path("/tmp/Model.yaml")),
])
def test_model_file_reads_a_setting_one_way(value: str, path: Path | None) -> None:
    assert model_file(value) == path


def test_the_environment_is_read_through_model_file() -> None:
    assert from_environ({MODEL_VARIABLE: " Off "}) is None
    assert from_environ({}) is None
    assert from_environ({MODEL_VARIABLE: " On"}) == load(DEFAULT_FILE)


@pytest.fixture
def bad_model(tmp_path: Path) -> Path:
    data = yaml.safe_load(DEFAULT_FILE.read_text())
    data["dynamodb"]["partition"]["write_units_per_second"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def dev(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`orchestrator dev ARGS` with only these endpoint and model variables set."""
    unset: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("AWS_ENDPOINT_URL", MODEL_VARIABLE))}
    res = CliRunner().invoke(
        main, ["dev", "--manifest", str(ROOT / "orchestrator.yml"), *args], env={**unset, **env})
    return res.exit_code, res.output


def test_a_model_file_it_cannot_use_is_a_usage_error_naming_flag_file_and_field(
    bad_model: Path,
) -> None:
    code, said = dev(["--aws-model", str(bad_model)], {})
    assert code == 2, said
    assert f"--aws-model: {bad_model}: {FIELD}: " in said, said
    assert "Traceback" not in said and "emulator   http" not in said  # nothing started


def test_the_variable_s_bad_model_file_is_named_as_the_variable_s(bad_model: Path) -> None:
    code, said = dev([], {MODEL_VARIABLE: f" {bad_model} "})
    assert code == 2, said
    assert f"{MODEL_VARIABLE}: {bad_model}: {FIELD}: " in said, said


@pytest.mark.parametrize(("args", "env", "why"), [
    (["--no-emulator", "--aws-model"], {}, "--no-emulator"),
    (["--aws-model", str(DEFAULT_FILE)], {"AWS_ENDPOINT_URL": MOTO}, "AWS_ENDPOINT_URL* is set"),
])
def test_the_flag_without_the_embedded_emulator_is_refused(
    args: list[str], env: dict[str, str], why: str,
) -> None:
    code, said = dev(args, env)
    assert code == 2, said
    assert f"--aws-model needs the embedded emulator, which is not used here ({why})" in said
    assert "resources" not in said  # refused before anything was made


def test_the_variable_without_the_embedded_emulator_is_passed_over_in_one_line() -> None:
    # The variable may be set for other runs: said once, and dev goes on (here to the
    # refusal of CloudFormation on another DynamoDB, which stops it before starting).
    code, said = dev([], {MODEL_VARIABLE: "aws", "AWS_ENDPOINT_URL": MOTO,
                          "AWS_ENDPOINT_URL_DYNAMODB": DYNALITE})
    assert (f"emulator   {MODEL_VARIABLE}=aws does not apply: the embedded emulator is not"
            " used (AWS_ENDPOINT_URL* is set)") in said, said
    assert f"dynamodb is at {DYNALITE} but CloudFormation at {MOTO}" in said
    assert code == 2
