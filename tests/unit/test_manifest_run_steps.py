"""`run:` steps: a shell command run by a backend with `capabilities: [shell]`, at
`/run`, with the command (a template over `input` and ancestors' outputs) in the
payload as `command`. Every rejection names the file, the line and the step."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engine.definition import Definition
from orchestrator.errors import ManifestError
from orchestrator.expressions import ExpressionError
from orchestrator.manifest.loader import lint_text, manifest_from_text
from orchestrator.manifest.models import Manifest, Step, Workflow
from orchestrator.manifest.shell import bind_command, render_command

BACKENDS = """\
backends:
  api: { url: "http://127.0.0.1:8001" }
  sh: { url: "http://127.0.0.1:8002", capabilities: [shell], timeout: 20s }
  sh2: { url: "http://127.0.0.1:8003", capabilities: [shell] }
"""  # the first line after BACKENDS is line 5


def load(text: str, folder: Path) -> Manifest:
    return manifest_from_text(text, base_dir=folder)


def problems_of(text: str, folder: Path) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load(text, folder)
    return caught.value.problems


def one_problem(text: str, folder: Path) -> str:
    found = problems_of(text, folder)
    assert len(found) == 1, found
    return found[0]


def definition(manifest: Manifest, name: str = "w") -> Definition:
    return Definition.of(manifest.workflows[name], manifest.backends, 60.0, name)


def test_a_run_step_goes_to_the_first_shell_backend(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w:
    steps:
      build: { run: "make build" }
""", tmp_path)
    step = manifest.workflows["w"].steps["build"]
    assert (step.backend, step.route, step.run) == ("sh", None, "make build")


def test_a_run_step_may_name_its_shell_backend(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w: { steps: { build: { run: "make", backend: sh2 } } }
""", tmp_path)
    assert manifest.workflows["w"].steps["build"].backend == "sh2"
    assert definition(manifest).specs["build"].backend == "sh2"


def test_definition_calls_run_with_the_command_in_the_payload(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w:
    steps:
      build: { run: "make ${{ input.target }}", payload: { env: ci } }
""", tmp_path)
    spec = definition(manifest).specs["build"]
    assert (spec.backend, spec.route) == ("sh", "/run")
    assert spec.payload == {"env": "ci", "command": "make ${{ input.target }}"}
    assert spec.timeout == 20.0  # the shell backend's timeout, as for any call
    assert Definition.from_json(definition(manifest).to_json()) == definition(manifest)


def test_everything_else_a_step_has_still_applies(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api, route: /a }
      b:
        run: "echo ${{ steps.a.output.id }}"
        dependsOn: [a]
        if: "${{ input.go }}"
        retry: { max: 5, strategy: exponential }
        timeout: 3s
        lock: "deploy-${{ input.env }}"
""", tmp_path)
    spec = definition(manifest).specs["b"]
    assert spec.deps == ("a",)
    assert spec.condition == "${{ input.go }}"
    assert (spec.retry_max, spec.retry_strategy, spec.timeout) == (5, "exponential", 3.0)
    assert spec.lock == "deploy-${{ input.env }}"


def test_depends_on_is_accepted_as_written_in_reference_pipelines(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w:
    steps:
      ask: { backend: api, route: /ask }
      refund: { run: "echo refunded", depends_on: [ask] }
""", tmp_path)
    assert manifest.workflows["w"].steps["refund"].depends_on == ["ask"]
    assert definition(manifest).specs["refund"].deps == ("ask",)


def test_depends_on_takes_part_in_the_graph_checks(tmp_path: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  w:
    steps:
      b: { run: "echo" }
      a:
        run: "echo"
        depends_on: [b, nope]
""", tmp_path)
    assert problem.startswith("manifest.yml:11: workflows.w.steps.a.depends_on[1]: "), problem
    assert "nope" in problem


def test_a_malformed_depends_on_is_reported_as_written(tmp_path: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  w:
    steps:
      a:
        run: "echo"
        depends_on: 5
""", tmp_path)
    assert problem.startswith("manifest.yml:10: workflows.w.steps.a.depends_on: "), problem


def test_dependson_and_depends_on_together_are_refused(tmp_path: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api, route: /a }
      b: { run: "echo", dependsOn: [a], depends_on: [a] }
""", tmp_path)
    assert problem == ("manifest.yml:9: workflows.w.steps.b: dependsOn and depends_on are "
                       "one field: give one of them")


def test_no_shell_backend_is_an_error_naming_the_step(tmp_path: Path) -> None:
    problem = one_problem("""\
backends:
  api: { url: "http://127.0.0.1:8001" }
workflows:
  w:
    steps:
      build: { run: "make" }
""", tmp_path)
    assert problem == (
        "manifest.yml:6: workflows.w.steps.build: run: step 'build' needs a backend that "
        "runs shell commands, and none declares one: add `capabilities: [shell]` to a backend")


def test_a_named_backend_without_shell_is_refused(tmp_path: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  w:
    steps:
      build:
        run: make
        backend: api
""", tmp_path)
    assert problem == (
        "manifest.yml:10: workflows.w.steps.build.backend: run: step 'build' needs a backend "
        "that runs shell commands, and 'api' declares no `shell`: add "
        "`capabilities: [shell]` to it, or name 'sh'")


def test_an_unknown_backend_is_reported_once(tmp_path: Path) -> None:
    problem = one_problem(BACKENDS + """\
workflows:
  w: { steps: { build: { run: make, backend: shh } } }
""", tmp_path)
    assert "unknown backend 'shh'" in problem


@pytest.mark.parametrize("extra, message", [
    ("route: /x", "run: and route exclude each other"),
    ("approval: { prompt: \"ok\", timeout: 1d }",
     "a step is an approval or a run: command, not both"),
    ("fanOut: { items: input.xs }", "run: runs one command: drop fanOut"),
    ("payload: { command: ls }", "payload.command is what run: sends: drop it from payload"),
])
def test_run_excludes_route_approval_fan_out_and_a_payload_command(
        tmp_path: Path, extra: str, message: str) -> None:
    problem = one_problem(BACKENDS + f"""\
workflows:
  w:
    steps:
      a: {{ run: "make", {extra} }}
""", tmp_path)
    assert problem.startswith("manifest.yml:8: workflows.w.steps.a: "), problem
    assert message in problem


@pytest.mark.parametrize("command, message", [
    ('""', "a run: command must not be empty"),
    ('"echo ${{ env.HOME }}"', "unknown name 'env' (available: input, steps)"),
    ('"echo ${{ input.x "', "unclosed '${{'"),
    ('"echo ${{ steps.nope.output }}"', "steps.nope: no such step"),
    ('"echo ${{ steps.b.output }}"', "steps.b reads step 'b', which is not an ancestor of 'a'"),
])
def test_a_command_template_is_checked_at_lint(tmp_path: Path, command: str,
                                               message: str) -> None:
    problem = one_problem(BACKENDS + f"""\
workflows:
  w:
    steps:
      a: {{ run: {command} }}
      b: {{ run: "echo", dependsOn: [a] }}
""", tmp_path)
    assert problem.startswith("manifest.yml:8: workflows.w.steps.a.run: "), problem
    assert message in problem


def test_the_command_renders_input_and_ancestor_outputs() -> None:
    command = "deploy ${{ input.service }} --tag ${{ steps.build_image.output.tag }}"
    rendered = render_command(command, {"service": "web"},
                              {"build-image": {"tag": "v1.2"}})
    assert rendered == "deploy web --tag v1.2"


def test_shell_syntax_passes_through_the_template_untouched() -> None:
    command = ('echo "called the CRM for ${{ input.tenant }} at $(date +%T)" '
               '$HOME ${HOME:-/root} `id -u` $$ $${{ literal }}')
    rendered = render_command(command, {"tenant": "acme"}, {})
    assert rendered == ('echo "called the CRM for acme at $(date +%T)" '
                        '$HOME ${HOME:-/root} `id -u` $$ ${{ literal }}')


def test_a_hole_renders_json_for_a_non_string_and_empty_for_null() -> None:
    rendered = render_command("x=${{ input.n }} y=${{ input.m }} z=${{ input.list }}",
                              {"n": 3, "list": [1, "a"]}, {})
    assert rendered == 'x=3 y= z=[1,"a"]'


def test_a_hole_that_fails_at_run_time_raises() -> None:
    with pytest.raises(ExpressionError):
        render_command("echo ${{ input.n + 1 }}", {"n": None}, {})


def test_lint_counts_the_shell_backend_as_used(tmp_path: Path) -> None:
    report = lint_text(BACKENDS + """\
workflows:
  w: { steps: { a: { run: make } } }
""", base_dir=tmp_path)
    assert any("backend 'sh' declares no openapi spec" in w for w in report.warnings)
    assert not any("backend 'sh2'" in w for w in report.warnings)


def test_a_workflow_with_run_steps_round_trips_as_json(tmp_path: Path) -> None:
    manifest = load(BACKENDS + """\
workflows:
  w: { steps: { a: { run: "make ${{ input.t }}" }, b: { run: ls, depends_on: [a] } } }
""", tmp_path)
    workflow = manifest.workflows["w"]
    assert Workflow.from_json(workflow.to_json()) == workflow


def test_a_manifest_built_from_mappings_fills_in_the_shell_backend() -> None:
    manifest = Manifest.model_validate({
        "backends": {"api": {"url": "http://a"},
                     "sh": {"url": "http://s", "capabilities": ["shell"]}},
        "workflows": {"w": {"steps": {"a": {"run": "make"}}}},
    })
    assert manifest.workflows["w"].steps["a"].backend == "sh"


def test_a_manifest_built_from_mappings_refuses_a_run_step_without_shell() -> None:
    with pytest.raises(ValueError, match=r"workflows\.w\.steps\.a: run: step 'a' needs a "
                                         r"backend that runs shell commands"):
        Manifest.model_validate({
            "backends": {"api": {"url": "http://a"}},
            "workflows": {"w": {"steps": {"a": {"run": "make"}}}},
        })


def test_a_step_needs_a_route_unless_it_is_a_run_or_an_approval() -> None:
    assert Step.model_validate({"run": "ls"}).route is None
    with pytest.raises(ValueError, match="route"):
        Step.model_validate({"backend": "api"})


def test_the_shell_backend_spec_must_list_run(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text(
        '{"openapi": "3.0.0", "paths": {"/other": {"post": {}}}}', encoding="utf-8")
    problem = one_problem("""\
backends:
  sh: { url: "http://127.0.0.1:8002", capabilities: [shell], openapi: spec.json }
workflows:
  w: { steps: { a: { run: "echo" } } }
""", tmp_path)
    assert problem.startswith("manifest.yml:4: workflows.w.steps.a.run: step w.a calls "
                              "POST /run, which is not a POST operation"), problem


def test_a_bound_command_carries_its_values_as_variables_never_as_code() -> None:
    command = 'echo "called ${{ input.tenant }}" ${{ steps.a.output.n }} $${{ x }}'
    text, values = bind_command(command, {"tenant": "$(touch pwned); `id`"},
                                {"a": {"n": 3}})
    assert text == 'echo "called ${ORCHESTRATOR_VALUE_1}" ${ORCHESTRATOR_VALUE_2} ${{ x }}'
    assert values == {"ORCHESTRATOR_VALUE_1": "$(touch pwned); `id`",
                      "ORCHESTRATOR_VALUE_2": "3"}
