"""Lint: a manifest that loads, plus warnings for settings that will not behave as a
reader might expect. Warnings carry `file:line: field:` like problems do."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import lint_manifest, lint_text

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


def test_schedules_for_each_concurrency_throttle_and_triggers_are_not_warned_about(
    tmp_path: Path,
) -> None:
    # All of these are active now: a workflow that uses them lints clean.
    warnings = lint("""\
  hourly:
    schedule: { every: 1h }
    forEach: { items: [{ id: 1 }, { id: 2 }] }
    concurrency: allow
    steps: { a: { backend: api, route: /load } }
  fan:
    forEach: { backend: api, route: /load, key: tenant }
    concurrency: { group: "crm-${{ input.tenant }}", policy: skip }
    throttle: { limit: 5, period: 1m }
    on: { event: order.paid, if: "event.data.total > 100" }
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert warnings == []


def test_for_each_query_cannot_be_executed(tmp_path: Path) -> None:
    warnings = lint("""\
  tenants:
    forEach:
      query: SELECT id FROM tenant
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert len(warnings) == 1
    assert warnings[0].startswith("m.yml:6: workflows.tenants.forEach.query: ")
    assert "cannot be executed" in warnings[0]
    assert "forEach.backend + forEach.route, or forEach.items" in warnings[0]


def test_priority_without_a_concurrency_limit_orders_nothing(tmp_path: Path) -> None:
    warnings = lint("""\
  ranked:
    priority: 80
    steps: { a: { backend: api, route: /load } }
  limited:
    priority: "${{ input.tier }}"
    concurrency: [{ limit: 5 }, { limit: 2, key: "${{ input.tenant }}" }]
    steps: { a: { backend: api, route: /load } }
""", tmp_path)
    assert len(warnings) == 1
    assert warnings[0].startswith("m.yml:5: workflows.ranked.priority: ")
    assert "concurrency limit" in warnings[0]


def test_reference_tenant_report_warnings() -> None:
    report = lint_manifest(FIXTURES / "reference" / "tenant-report.yml", {})
    fields = [w.split(": ")[1] for w in report.warnings]
    assert fields == [
        "backends.api", "backends.notify", "workflows.tenant-report.forEach.query",
    ]
    assert "declares no openapi spec" in report.warnings[0]
    # The warnings do not stop the manifest from loading.
    assert list(report.manifest.workflows) == ["tenant-report"]


def test_warnings_in_workflow_files_name_that_file() -> None:
    report = lint_manifest(FIXTURES / "multi" / "orchestrator.yml", {})
    query = [w for w in report.warnings if "forEach.query" in w]
    assert query == [
        f"{FIXTURES}/multi/workflows/tenant-report.yml:5: workflows.tenant-report.forEach.query: "
        "workflow 'tenant-report': forEach.query cannot be executed (there is no query engine); "
        "use forEach.backend + forEach.route, or forEach.items"
    ]


def test_unsigned_webhook_is_warned_about(tmp_path: Path) -> None:
    warnings = lint("""\
  w:
    steps: { a: { backend: api, route: /load } }
webhooks:
  signed:
    workflow: w
    verify: { scheme: github, secrets: [s3cret] }
  local:
    workflow: w
    verify:
      scheme: none
""", tmp_path)
    assert warnings == [
        "m.yml:13: webhooks.local.verify.scheme: webhook 'local' accepts unsigned deliveries: "
        "for local development only"
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
