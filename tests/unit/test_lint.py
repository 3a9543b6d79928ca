"""Lint: a manifest that loads, plus warnings for settings that are accepted but not
active yet. Warnings carry `file:line: field:` like problems do."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest import lint_manifest, lint_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"

SPEC = FIXTURES / "openapi" / "api.json"
HEADER = f"""\
backends:
  api: {{ url: "http://127.0.0.1:8001", openapi: "{SPEC}" }}
workflows:
"""  # with a spec, so no "routes are not checked" warning


def lint(text: str, tmp_path: Path) -> list[str]:
    return lint_text(HEADER + text, "m.yml", tmp_path, {}).warnings


def test_plain_workflow_has_no_warnings(tmp_path: Path) -> None:
    assert lint("  w:\n    steps: { a: { backend: api, route: /load } }\n", tmp_path) == []


def test_every_scheduled_workflow_is_warned_about(tmp_path: Path) -> None:
    warnings = lint("""\
  hourly:
    schedule: { every: 1h }
    steps: { a: { backend: api, route: /load } }
  on-demand:
    steps: { a: { backend: api, route: /load } }
  daily:
    steps: { a: { backend: api, route: /load } }
    schedule: { cron: "0 2 * * *" }
""", tmp_path)
    assert warnings == [
        "m.yml:5: workflows.hourly.schedule: workflow 'hourly' has a schedule; schedules are "
        "not active yet (trigger by hand)",
        "m.yml:11: workflows.daily.schedule: workflow 'daily' has a schedule; schedules are "
        "not active yet (trigger by hand)",
    ]


def test_for_each_and_concurrency_are_not_active_yet(tmp_path: Path) -> None:
    warnings = lint("""\
  fan:
    forEach: { items: [{ id: 1 }, { id: 2 }] }
    concurrency: allow
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert warnings == [
        "m.yml:5: workflows.fan.forEach: workflow 'fan': forEach takes effect in a later release",
        "m.yml:6: workflows.fan.concurrency: workflow 'fan': concurrency takes effect in a "
        "later release",
    ]


def test_default_concurrency_is_not_warned_about(tmp_path: Path) -> None:
    warnings = lint("""\
  fan:
    forEach: { backend: api, route: /load, key: tenant }
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert len(warnings) == 1 and "forEach takes effect" in warnings[0]


def test_for_each_query_cannot_be_executed(tmp_path: Path) -> None:
    warnings = lint("""\
  tenants:
    forEach:
      query: SELECT id FROM tenant
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert warnings[1].startswith("m.yml:6: workflows.tenants.forEach.query: ")
    assert "cannot be executed" in warnings[1]
    assert "forEach.backend + forEach.route, or forEach.items" in warnings[1]


def test_reference_tenant_report_warnings() -> None:
    report = lint_manifest(FIXTURES / "reference" / "tenant-report.yml", {})
    fields = [w.split(": ")[1] for w in report.warnings]
    assert fields == [
        "backends.api", "backends.notify", "workflows.tenant-report.schedule",
        "workflows.tenant-report.forEach", "workflows.tenant-report.forEach.query",
        "workflows.tenant-report.concurrency",
    ]
    assert "declares no openapi spec" in report.warnings[0]
    # The warnings do not stop the manifest from loading.
    assert list(report.manifest.workflows) == ["tenant-report"]


def test_warnings_in_workflow_files_name_that_file() -> None:
    report = lint_manifest(FIXTURES / "multi" / "orchestrator.yml", {})
    schedule = [w for w in report.warnings if "monthly-report.schedule" in w]
    assert schedule == [
        f"{FIXTURES}/multi/workflows/monthly-report.yml:2: workflows.monthly-report.schedule: "
        "workflow 'monthly-report' has a schedule; schedules are not active yet (trigger by hand)"
    ]


def test_unused_backend_without_spec_is_not_warned_about(tmp_path: Path) -> None:
    text = HEADER.replace("workflows:", "  spare: { url: http://127.0.0.1:9 }\nworkflows:")
    text += "  w:\n    steps: { a: { backend: api, route: /load } }\n"
    assert lint_text(text, "m.yml", tmp_path, {}).warnings == []


def test_lint_raises_every_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        lint("""\
  w:
    schedule: { cron: "0 25 * * *" }
    steps:
      a: { backend: api, route: /nowhere }
      b: { backend: api, route: /load, dependsOn: [c] }
""", tmp_path)
    problems = caught.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("m.yml:5: workflows.w.schedule.cron: cron '0 25 * * *'")
    assert problems[1].startswith("m.yml:7: workflows.w.steps.a.route: step w.a calls POST "
                                  "/nowhere, which is not a POST operation")
    assert problems[2].startswith("m.yml:8: workflows.w.steps.b.dependsOn[0]: step 'b' depends "
                                  "on unknown step 'c'")
    assert caught.value.code == "invalid_manifest"
