"""`script:` workflows: a durable workflow whose code is a bash file (relative to the
manifest), served under the workflow's own name by a backend with `shell`. The
loader reads the file once and the workflow keeps its text and sha256; the run's
`Definition` keeps the name and sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from orchestrator.engine.definition import DRIVER, Definition
from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import load_manifest, manifest_from_text
from orchestrator.manifest.models import Manifest, Workflow

BACKENDS = """\
backends:
  api: { url: "http://127.0.0.1:8001", timeout: 5s }
  sh: { url: "http://127.0.0.1:8002", capabilities: [shell], timeout: 20s }
  sh2: { url: "http://127.0.0.1:8003", capabilities: [shell] }
"""  # the first line after BACKENDS is line 5

SCRIPT = '#!/usr/bin/env bash\necho "deploy started $(date +%T)"\nspool wait signal go\n'


def load(text: str, folder: Path) -> Manifest:
    return manifest_from_text(text, base_dir=folder)


def one_problem(text: str, folder: Path) -> str:
    with pytest.raises(ManifestError) as caught:
        load(text, folder)
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "deploy.sh").write_text(SCRIPT, encoding="utf-8")
    return tmp_path


def test_a_script_workflow_keeps_the_text_and_its_sha256(folder: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  deploy: { script: scripts/deploy.sh }
""", folder)
    workflow = manifest.workflows["deploy"]
    assert workflow.durable
    assert workflow.backend == "sh"  # the first backend with shell
    assert workflow.script == "scripts/deploy.sh"
    assert workflow.script_text == SCRIPT
    assert workflow.script_sha256 == hashlib.sha256(SCRIPT.encode()).hexdigest()


def test_the_text_is_not_part_of_the_stored_json(folder: Path) -> None:
    workflow = load(BACKENDS + """\
workflows:
  deploy: { script: scripts/deploy.sh }
""", folder).workflows["deploy"]
    stored = json.loads(workflow.to_json())
    assert stored["script"] == "scripts/deploy.sh"
    assert "spool wait" not in workflow.to_json()
    again = Workflow.from_json(workflow.to_json())
    assert again.model_dump() == workflow.model_dump()
    assert (again.script_text, again.script_sha256) == (None, None)  # read at load only


def test_other_workflows_have_no_script() -> None:
    workflow = Workflow.model_validate({"steps": {"a": {"backend": "api", "route": "/a"}}})
    assert (workflow.script, workflow.script_text, workflow.script_sha256) == (None, None, None)
    assert not workflow.durable


def test_the_path_is_relative_to_the_manifest_file(folder: Path) -> None:
    path = folder / "orchestrator.yml"
    path.write_text(BACKENDS + "workflows:\n  deploy: { script: scripts/deploy.sh }\n",
                    encoding="utf-8")
    assert load_manifest(path, {}).workflows["deploy"].script_text == SCRIPT


def test_a_script_may_name_its_shell_backend(folder: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  deploy: { script: scripts/deploy.sh, backend: sh2 }
""", folder)
    assert manifest.workflows["deploy"].backend == "sh2"


def test_everything_around_a_workflow_applies_to_a_script(folder: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  deploy:
    script: scripts/deploy.sh
    description: roll out
    on: { event: release.tagged }
    schedule: { every: 1h }
    concurrency: { group: deploy-prod, policy: queue }
    throttle: { limit: 6, period: 1m, key: "crm-${{ input.tenant }}" }
    timeout: 2m
  debounced:
    script: scripts/deploy.sh
    debounce: { period: 30s }
""", folder)
    deploy = manifest.workflows["deploy"]
    assert deploy.description == "roll out" and deploy.on[0].event == "release.tagged"
    assert deploy.group is not None and deploy.throttle is not None
    assert deploy.schedule is not None and deploy.timeout == 120.0
    assert manifest.workflows["debounced"].debounce is not None


def test_definition_drives_the_script_on_its_shell_backend(folder: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  deploy: { script: scripts/deploy.sh, timeout: 2m }
  plain: { script: scripts/deploy.sh }
""", folder)
    workflow = manifest.workflows["deploy"]
    definition = Definition.of(workflow, manifest.backends, 60.0, "deploy")
    [driver] = definition.steps
    assert (driver.name, driver.backend, driver.route) == (DRIVER, "sh", "/durable/deploy")
    assert driver.timeout == 120.0
    assert definition.durable == "deploy"
    assert definition.script == {"name": "deploy", "sha256": workflow.script_sha256}
    plain = Definition.of(manifest.workflows["plain"], manifest.backends, 60.0, "plain")
    assert plain.steps[0].timeout == 20.0  # the shell backend's


def test_definition_round_trips_the_script_field(folder: Path) -> None:
    manifest = load(BACKENDS + "workflows:\n  deploy: { script: scripts/deploy.sh }\n", folder)
    definition = Definition.of(manifest.workflows["deploy"], manifest.backends, 60.0, "deploy")
    doc = definition.to_json()
    assert doc["script"] == {"name": "deploy",
                             "sha256": hashlib.sha256(SCRIPT.encode()).hexdigest()}
    again = Definition.from_json(json.loads(json.dumps(doc)))
    assert again == definition and again.script == definition.script
    assert again.reusing({}).script == definition.script


def test_other_definitions_store_no_script(folder: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  dag: { steps: { a: { backend: api, route: /a } } }
  code: { backend: api }
""", folder)
    for name in ("dag", "code"):
        definition = Definition.of(manifest.workflows[name], manifest.backends, 60.0, name)
        assert definition.script is None and "script" not in definition.to_json()
        assert Definition.from_json(definition.to_json()).script is None


def test_no_shell_backend_is_a_clear_error(folder: Path) -> None:
    problem = one_problem("""\
backends:
  api: { url: "http://127.0.0.1:8001" }
workflows:
  deploy: { script: scripts/deploy.sh }
""", folder)
    assert problem == (
        "manifest.yml:4: workflows.deploy: a script: workflow needs a backend that runs "
        "shell commands, and none declares one: add `capabilities: [shell]` to a backend")


def test_a_named_backend_without_shell_is_refused(folder: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  deploy:
    script: scripts/deploy.sh
    backend: api
""", folder)
    assert problem == (
        "manifest.yml:8: workflows.deploy.backend: a script: workflow needs a backend that "
        "runs shell commands, and 'api' declares no `shell`: add `capabilities: [shell]` "
        "to it, or name 'sh'")


@pytest.mark.parametrize("name, content, message", [
    ("missing.sh", None, "script 'missing.sh' not found (looked for "),
    ("adir", "DIR", "script 'adir' is a directory, not a file"),
    ("bin.sh", b"echo\x00\x01", "script 'bin.sh' is binary, not a bash script (a NUL byte at "
                                "offset 4)"),
    ("latin.sh", "echo café".encode("latin-1"), "script 'latin.sh' is not UTF-8 text (byte 8)"),
    ("empty.sh", b"", "script 'empty.sh' is empty"),
    ("blank.sh", b"\n  \n", "script 'blank.sh' is empty"),
    ("../outside.sh", b"echo", "script '../outside.sh' is outside the manifest's folder"),
])
def test_a_script_that_cannot_be_read_names_the_workflow_and_the_path(
        tmp_path: Path, name: str, content: bytes | str | None, message: str) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    if content == "DIR":
        (folder / name).mkdir()
    elif isinstance(content, bytes):
        (folder / name).write_bytes(content)
    problem = one_problem(BACKENDS + f"""\
workflows:
  deploy:
    script: {name}
""", folder)
    assert problem.startswith(f"manifest.yml:7: workflows.deploy.script: workflow 'deploy': "
                              f"{message}"), problem


@pytest.mark.parametrize("extra, message", [
    ("steps: { a: { run: ls } }", "steps and script exclude each other"),
    ("workflow: other", "a script: workflow is served under its own name: drop workflow"),
])
def test_a_script_workflow_declared_wrongly_is_refused(folder: Path, extra: str,
                                                       message: str) -> None:
    problem = one_problem(BACKENDS + f"""\
workflows:
  deploy: {{ script: scripts/deploy.sh, {extra} }}
""", folder)
    assert problem.startswith("manifest.yml:6: workflows.deploy: "), problem
    assert message in problem


def test_an_empty_script_path_is_refused(folder: Path) -> None:
    problem = one_problem(BACKENDS + 'workflows:\n  deploy: { script: "" }\n', folder)
    assert problem.startswith("manifest.yml:6: workflows.deploy.script: "), problem


def test_a_durable_workflow_round_trips_as_json_without_steps() -> None:
    for raw in ({"backend": "api"}, {"script": "deploy.sh", "backend": "sh"}):
        workflow = Workflow.model_validate(raw)
        assert "steps" not in json.loads(workflow.to_json())
        assert Workflow.from_json(workflow.to_json()) == workflow


def test_only_a_script_workflow_holds_a_script_text() -> None:
    with pytest.raises(ValueError, match="only a script: workflow"):
        Workflow.model_validate({"backend": "api"}).with_script("echo", "0" * 64)
