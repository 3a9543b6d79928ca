"""Manifest loading: safe YAML, durations, models, graph checks, files, env, OpenAPI.

Every rejection asserts the problem names the file, the line and the field."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest.durations import format_duration, parse_duration
from orchestrator.manifest.loader import load_manifest, manifest_from_text
from orchestrator.manifest.models import (
    ConcurrencyGroup,
    EventTrigger,
    Manifest,
    RetryPolicy,
    Throttle,
    Verify,
    Workflow,
)
from orchestrator.manifest.yamlsafe import MAX_MANIFEST_BYTES, load_yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"

BACKENDS = """\
backends:
  api: { url: "http://127.0.0.1:8001" }
  analytics: { url: "http://127.0.0.1:8002" }
  notify: { url: "http://127.0.0.1:8003" }
  warehouse: { url: "http://127.0.0.1:8004" }
"""  # 5 lines: the first workflow line of BACKENDS + text is line 6


def write(folder: Path, text: str, name: str = "orchestrator.yml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def problems(folder: Path, text: str, environ: dict[str, str] | None = None) -> list[str]:
    path = write(folder, text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path, environ or {})
    return caught.value.problems


def one_problem(folder: Path, text: str, environ: dict[str, str] | None = None) -> str:
    found = problems(folder, text, environ)
    assert len(found) == 1, found
    return found[0]


def assert_problem(problem: str, line: int, field: str, *fragments: str) -> None:
    assert f"orchestrator.yml:{line}: {field}: " in problem, problem
    for fragment in fragments:
        assert fragment in problem, problem


# --- the reference examples load unchanged (with a backends: section) ---------------


@pytest.mark.parametrize(
    "name", ["monthly-report", "ingest-nightly", "nightly", "tenant-report"]
)
def test_reference_examples_load(name: str) -> None:
    manifest = load_manifest(FIXTURES / "reference" / f"{name}.yml", {})
    assert list(manifest.workflows) == [name]
    assert set(manifest.backends) == {"api", "analytics", "notify", "warehouse"}
    assert manifest.source == FIXTURES / "reference" / f"{name}.yml"


def test_monthly_report_shape() -> None:
    wf = load_manifest(FIXTURES / "reference" / "monthly-report.yml", {}).workflows[
        "monthly-report"
    ]
    assert wf.roots() == ["extract-orders", "extract-users"]
    assert wf.steps["transform"].depends_on == ["extract-orders", "extract-users"]
    assert wf.dependants()["transform"] == ["notify", "archive"]
    assert wf.dependants()["notify"] == []
    assert wf.topological_order() == [
        "extract-orders", "extract-users", "transform", "notify", "archive"
    ]
    assert wf.on_failure == "halt"
    assert wf.schedule is not None and wf.schedule.cron == "0 6 1 * *"
    assert wf.schedule.timezone == "UTC"


def test_ingest_nightly_values() -> None:
    wf = load_manifest(FIXTURES / "reference" / "ingest-nightly.yml", {}).workflows[
        "ingest-nightly"
    ]
    fetch, load = wf.steps["fetch"], wf.steps["load"]
    assert (fetch.retry.max, fetch.retry.strategy, fetch.timeout) == (5, "exponential", 300.0)
    assert load.retry == RetryPolicy()  # defaults: 3, linear
    assert load.backend == "warehouse" and load.payload == {"mode": "append"}
    assert wf.schedule is not None and wf.schedule.every == 3600.0


def test_nightly_and_tenant_report_values() -> None:
    nightly = load_manifest(FIXTURES / "reference" / "nightly.yml", {}).workflows["nightly"]
    assert nightly.on_failure == "continue-independent"
    assert nightly.roots() == ["fetch-orders", "fetch-reviews"]
    tenant = load_manifest(FIXTURES / "reference" / "tenant-report.yml", {}).workflows[
        "tenant-report"
    ]
    assert tenant.for_each is not None
    assert tenant.for_each.query == "SELECT id FROM tenant WHERE plan != 'free'"
    assert tenant.for_each.key == "id"
    assert tenant.concurrency == "skip"


def test_workflows_in_their_own_files() -> None:
    manifest = load_manifest(FIXTURES / "multi" / "orchestrator.yml", {})
    assert list(manifest.workflows) == ["monthly-report", "tenant-report", "quick-ping"]
    assert manifest.workflows["monthly-report"].steps["transform"].backend == "analytics"
    # tenant-report.yml wraps its body in the workflow's name: also accepted.
    assert manifest.workflows["tenant-report"].for_each is not None
    assert manifest.workflows["quick-ping"].roots() == ["ping"]


def test_problem_lines_inside_a_workflow_file_refer_to_that_file(tmp_path: Path) -> None:
    write(tmp_path, "steps:\n  a: { backend: api, route: /a }\n  b:\n    backend: api\n"
          "    route: /b\n    dependsOn: [c]\n", "flows/w.yml")
    found = problems(tmp_path, BACKENDS + "workflows:\n  w: ./flows/w.yml\n")
    assert len(found) == 1
    assert found[0].startswith(f"{tmp_path}/flows/w.yml:6: workflows.w.steps.b.dependsOn[0]: ")
    assert "unknown step 'c'" in found[0]


def test_yaml_errors_inside_a_workflow_file_name_that_file(tmp_path: Path) -> None:
    write(tmp_path, "steps:\n  a: { backend: api, route: /a }\n  a: { backend: api, "
          "route: /b }\n", "w.yml")
    found = problems(tmp_path, BACKENDS + "workflows:\n  w: w.yml\n")
    assert found == [f"{tmp_path}/w.yml:3: steps.a: duplicate key 'a' (first defined at line 2)"]


# --- graph checks ---------------------------------------------------------------------


def test_unknown_dependency_suggests_a_close_name(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  nightly:
    steps:
      fetch: { backend: api, route: /fetch }
      load: { backend: api, route: /load, dependsOn: [fetsh] }
""")
    assert_problem(problem, 10, "workflows.nightly.steps.load.dependsOn[0]",
                   "step 'load' depends on unknown step 'fetsh'", "did you mean 'fetch'?")


def test_self_dependency(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a:
        backend: api
        route: /a
        dependsOn:
          - a
""")
    assert_problem(problem, 13, "workflows.w.steps.a.dependsOn[0]", "depends on itself")


def test_cycle_path_is_printed(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      root: { backend: api, route: /r }
      a: { backend: api, route: /a, dependsOn: [root, c] }
      b: { backend: api, route: /b, dependsOn: [a] }
      c: { backend: api, route: /c, dependsOn: [b] }
""")
    assert_problem(problem, 10, "workflows.w.steps.a.dependsOn", "cycle: a -> b -> c -> a")


def test_duplicate_dependency(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api, route: /a }
      b: { backend: api, route: /b, dependsOn: [a, a] }
""")
    assert_problem(problem, 10, "workflows.w.steps.b.dependsOn[1]", "lists 'a' more than once")


def test_unknown_backend_suggests_a_close_name(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: warehose, route: /a }
""")
    assert_problem(problem, 9, "workflows.w.steps.a.backend",
                   "unknown backend 'warehose'", "did you mean 'warehouse'?")


# --- field validation -------------------------------------------------------------------


def test_misspelt_field_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api, route: /a }
      b:
        backend: api
        route: /b
        dependson: [a]
""")
    assert_problem(problem, 13, "workflows.w.steps.b.dependson",
                   "unknown field 'dependson'", "did you mean 'dependsOn'?")


def test_python_field_names_are_not_accepted_in_yaml(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    on_failure: halt
    steps:
      a: { backend: api, route: /a }
""")
    assert_problem(problem, 8, "workflows.w.on_failure", "did you mean 'onFailure'?")


def test_bad_duration(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api, route: /a, timeout: 5 minutes }
""")
    assert_problem(problem, 9, "workflows.w.steps.a.timeout", "'5 minutes' is not a duration")


@pytest.mark.parametrize(
    ("retry", "field", "fragment"),
    [
        ("{ max: -1 }", "max", "greater than or equal to 0 (got -1)"),
        ("{ max: 101 }", "max", "less than or equal to 100"),
        ("{ max: two }", "max", "valid integer"),
        ("{ strategy: fibonacci }", "strategy", "'linear' or 'exponential' (got 'fibonacci')"),
        ("{ delay: 0s }", "delay", "must be greater than zero"),
        ("{ delay: 1m, maxDelay: 10s }", "", "maxDelay (10s) is shorter than delay (60s)"),
    ],
)
def test_bad_retry_values(tmp_path: Path, retry: str, field: str, fragment: str) -> None:
    problem = one_problem(tmp_path, BACKENDS + f"""\
workflows:
  nightly:
    steps:
      fetch:
        backend: api
        route: /fetch
        retry: {retry}
""")
    path = "workflows.nightly.steps.fetch.retry" + (f".{field}" if field else "")
    assert_problem(problem, 12, path, fragment)


def test_reserved_payload_key(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a:
        backend: api
        route: /a
        payload:
          mode: append
          steps: 3
""")
    assert_problem(problem, 14, "workflows.w.steps.a.payload.steps", "'steps' is reserved")


def test_missing_field_points_at_the_enclosing_entry(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: api }
""")
    assert_problem(problem, 9, "workflows.w.steps.a.route", "required field 'route' is missing")


def test_route_and_names_are_checked(tmp_path: Path) -> None:
    found = problems(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      "bad name": { backend: api, route: fetch }
""")
    assert len(found) == 2
    assert_problem(found[0], 9, "workflows.w.steps.bad name", "must start with a letter")
    assert_problem(found[1], 9, "workflows.w.steps.bad name.route", "must start with '/'")


def test_empty_steps_and_bad_backend_url(tmp_path: Path) -> None:
    found = problems(tmp_path, """\
backends:
  api: { url: "ftp://example.com" }
workflows:
  w: { steps: {} }
""")
    assert_problem(found[0], 2, "backends.api.url", "http:// or https://")
    assert_problem(found[1], 4, "workflows.w.steps", "must not be empty")


def test_every_problem_is_reported_in_line_order(tmp_path: Path) -> None:
    found = problems(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: { backend: nope, route: /a, timeout: soon }
      b: { backend: api, route: /b, dependsOn: [x], retry: { strategy: random } }
    onFailure: panic
""")
    assert [p.split(":")[1] for p in found] == ["9", "9", "10", "10", "11"]
    assert "unknown backend 'nope'" in found[0] and "'soon' is not a duration" in found[1]


# --- schedules and forEach ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "field", "fragment"),
    [
        ('{ cron: "61 * * * *" }', "schedule.cron", "cron '61 * * * *' does not parse"),
        ('{ cron: "0 6 * *" }', "schedule.cron", "does not parse"),
        ('{ cron: "0 6 * * *", timezone: Mars/Olympus }', "schedule.timezone",
         "unknown timezone 'Mars/Olympus'"),
        ('{ cron: "0 6 * * *", every: 1h }', "schedule", "exactly one of cron or every"),
        ("{ timezone: UTC }", "schedule", "exactly one of cron or every"),
        ("{ every: -1h }", "schedule.every", "negative"),
    ],
)
def test_bad_schedule(tmp_path: Path, schedule: str, field: str, fragment: str) -> None:
    problem = one_problem(tmp_path, BACKENDS + f"""\
workflows:
  w:
    steps:
      a: {{ backend: api, route: /a }}
    schedule: {schedule}
""")
    assert_problem(problem, 10, f"workflows.w.{field}", fragment)


def test_schedule_with_timezone_loads(tmp_path: Path) -> None:
    path = write(tmp_path, BACKENDS + """\
workflows:
  w:
    steps: { a: { backend: api, route: /a } }
    schedule: { cron: "30 2 * * 1-5", timezone: Europe/Paris }
""")
    schedule = load_manifest(path, {}).workflows["w"].schedule
    assert schedule is not None and schedule.timezone == "Europe/Paris"


def test_for_each_takes_one_source(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps: { a: { backend: api, route: /a } }
    forEach: { items: [1, 2], backend: api, route: /rows }
""")
    assert_problem(problem, 9, "workflows.w.forEach", "at most one row source")


def test_for_each_backend_is_checked(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps: { a: { backend: api, route: /a } }
    forEach: { backend: tenants, route: /rows }
""")
    assert_problem(problem, 9, "workflows.w.forEach.backend", "unknown backend 'tenants'")


# --- event triggers, concurrency groups, throttles -----------------------------------------


def test_every_trigger_concurrency_throttle_and_webhook_shape_loads() -> None:
    manifest = load_manifest(
        FIXTURES / "triggers" / "orchestrator.yml", {"GITHUB_SECRET": "gh-new"}
    )
    paid, push, nightly = (manifest.workflows[n] for n in ("order-paid", "push-build", "nightly"))

    assert paid.on == [
        EventTrigger(event="order.paid",
                     if_="event.data.total > 100 and event.data.currency == 'EUR'"),
        EventTrigger(event="order.refunded"),
    ]
    assert paid.concurrency == ConcurrencyGroup(
        group="crm-${{ input.tenant }}", key="${{ input.account }}", policy="cancel-running"
    )
    assert paid.group is paid.concurrency and paid.overlap == "replace"
    assert paid.throttle == Throttle(
        limit=10, period=60.0, key="${{ input.tenant }}", burst=5, policy="drop"
    )

    # One trigger mapping is a list of one; the group and throttle defaults.
    assert push.on == [EventTrigger(event="github:push", if_=None)]
    assert push.group == ConcurrencyGroup(group="builds", key="", policy="queue")
    assert push.overlap == "queue"
    assert push.throttle == Throttle(limit=1, period=10.0, key="", burst=1, policy="queue")

    # The string form of concurrency stays; no triggers, no throttle by default.
    assert (nightly.concurrency, nightly.overlap, nightly.group) == ("replace", "replace", None)
    assert nightly.on == [] and nightly.throttle is None

    github, payments, local = (manifest.webhooks[n] for n in ("github", "payments", "local"))
    assert github.workflow == "push-build"
    assert github.verify.scheme == "github"
    # ${GITHUB_SECRET_OLD:-} is unset, so the optional rotation secret drops out.
    assert github.verify.secrets == ["gh-new"]
    assert github.verify.tolerance == 300.0
    assert github.headers == ["x-github-event", "x-github-delivery"]
    assert github.input == {
        "ref": "body.ref",
        "repo": "body.repository.full_name",
        "event": "headers['x-github-event']",
    }
    assert payments.verify.secrets == ["whsec_dev"] and payments.verify.tolerance == 120.0
    assert payments.input is None and payments.headers == []
    assert local.verify.scheme == "none" and local.verify.secrets == []
    assert "gh-new" not in repr(manifest.webhooks)


def test_rotation_keeps_two_secrets_and_templates_are_not_env_substituted(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, BACKENDS + """\
workflows:
  w:
    steps: { a: { backend: api, route: /a } }
    concurrency: { group: "g-${{ input.t }}-${HOME}", key: "$${{ input.k }}" }
    on: { event: x, if: "event.data.path == '${HOME}'" }
webhooks:
  h:
    workflow: w
    verify: { scheme: standard, secrets: ["${NEW}", "${OLD:-whsec_b2xk}", "$${LITERAL}"] }
""")
    with pytest.raises(ManifestError, match="needs one secret, or two while rotating"):
        load_manifest(path, {"NEW": "n", "HOME": "/root"})
    path.write_text(path.read_text().replace(', "$${LITERAL}"', ""))
    manifest = load_manifest(path, {"NEW": "n", "HOME": "/root"})
    assert manifest.webhooks["h"].verify.secrets == ["n", "whsec_b2xk"]
    w = manifest.workflows["w"]
    assert w.group is not None
    assert (w.group.group, w.group.key) == ("g-${{ input.t }}-${HOME}", "$${{ input.k }}")
    assert w.on[0].if_ == "event.data.path == '${HOME}'"


def test_workflow_json_round_trip_with_triggers_and_groups() -> None:
    manifest = load_manifest(FIXTURES / "triggers" / "orchestrator.yml", {"GITHUB_SECRET": "s"})
    for wf in manifest.workflows.values():
        assert Workflow.from_json(wf.to_json()) == wf
    stored = json.loads(manifest.workflows["order-paid"].to_json())
    assert stored["on"][0] == {
        "event": "order.paid",
        "if": "event.data.total > 100 and event.data.currency == 'EUR'",
    }
    assert stored["concurrency"]["policy"] == "cancel-running"
    assert stored["throttle"]["period"] == 60.0


@pytest.mark.parametrize(
    ("snippet", "line", "field", "fragment"),
    [
        ("on: { event: 'bad name' }", 9, "on.event", "event name 'bad name' must start"),
        ("on: [{ event: ok }, { event: 'x y' }]", 9, "on[1].event", "event name 'x y'"),
        ("on: { event: x, iff: y }", 9, "on.iff", "unknown field 'iff' (did you mean 'if'?)"),
        ("on: { if: 'event.x' }", 9, "on.event", "required field 'event' is missing"),
        ("on: order.paid", 9, "on", "give one trigger mapping ({event: NAME, if: CONDITION})"),
        ("on: [order.paid]", 9, "on[0]", "must be a mapping (got 'order.paid')"),
        ("on: { event: x, if: 'event.total >' }", 9, "on.if", "syntax error"),
        ("on: { event: x, if: 'evnt.total > 1' }", 9, "on.if",
         "unknown name 'evnt' (did you mean 'event'?) (available: event) (column 1 of"),
        ("on: { event: x, if: \"lower(event.a) == 'b'.upper()\" }", 9, "on.if",
         "method calls are not allowed: write upper(x) instead of x.upper() (column 23 of"),
        ("on: { event: x, if: 'event.__class__' }", 9, "on.if", "attributes starting with '_'"),
        ("concurrency: sometimes", 9, "concurrency",
         "Input should be 'skip', 'allow' or 'replace' (got 'sometimes')"),
        ("concurrency: { group: g, policy: wait }", 9, "concurrency.policy",
         "'queue', 'skip' or 'cancel-running' (got 'wait')"),
        ("concurrency: { limit: 0, key: k }", 9, "concurrency.limit",
         "greater than or equal to 1"),
        ("concurrency: { limit: 1001 }", 9, "concurrency.limit", "less than or equal to 1000"),
        ("concurrency: [{ limit: 5 }, { limit: 2, kye: t }]", 9, "concurrency[1].kye",
         "unknown field 'kye'"),
        ("concurrency: [{ limit: 5 }, { limit: 2 }]", 9, "concurrency",
         "[1] repeats the group and key of an earlier limit"),
        ("concurrency: []", 9, "concurrency", "must not be empty"),
        ("priority: 101", 9, "priority", "priority 101 is outside 0-100"),
        ("priority: '${{ inpt.p }}'", 9, "priority", "unknown name 'inpt'"),
        ("priority: true", 9, "priority", "not a boolean"),
        ("concurrency: { group: g, grop: h }", 9, "concurrency.grop",
         "unknown field 'grop' (did you mean 'group'?)"),
        ("concurrency: { group: '' }", 9, "concurrency.group", "at least 1 character"),
        ("concurrency: { group: g, key: 'k-${{ input.t' }", 9, "concurrency.key",
         "unclosed '${{' (end the hole with '}}') (column 3 of"),
        ("concurrency: { group: 'g-${{ inpt.t }}' }", 9, "concurrency.group",
         "unknown name 'inpt' (did you mean 'input'?)"),
        ("throttle: { limit: 0, period: 1m }", 9, "throttle.limit", "greater than or equal to 1"),
        ("throttle: { limit: '5', period: 1m }", 9, "throttle.limit", "valid integer (got '5')"),
        ("throttle: { limit: 5, period: 0s }", 9, "throttle.period", "must be greater than zero"),
        ("throttle: { limit: 5 }", 9, "throttle.period", "required field 'period' is missing"),
        ("throttle: { limit: 5, period: 1m, burst: 0 }", 9, "throttle.burst",
         "greater than or equal to 1"),
        ("throttle: { limit: 5, period: 1m, policy: wait }", 9, "throttle.policy",
         "'queue' or 'drop' (got 'wait')"),
        ("throttle: { limit: 5, period: 1m, key: '${{ input.x.y() }}' }", 9, "throttle.key",
         "method calls are not allowed"),
        ("throttle: 5", 9, "throttle", "must be a mapping (got 5)"),
    ],
)
def test_bad_triggers_concurrency_and_throttle(
    tmp_path: Path, snippet: str, line: int, field: str, fragment: str
) -> None:
    problem = one_problem(tmp_path, BACKENDS + f"""\
workflows:
  w:
    steps: {{ a: {{ backend: api, route: /a }} }}
    {snippet}
""")
    assert_problem(problem, line, f"workflows.w.{field}", fragment)


def test_trigger_problems_point_at_their_line(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps: { a: { backend: api, route: /a } }
    on:
      - event: order.paid
      - event: order.refunded
        if: "event.data.total >> 2"
""")
    assert_problem(problem, 12, "workflows.w.on[1].if", "operator >> is not allowed")


# --- webhooks ------------------------------------------------------------------------------

WEBHOOK = BACKENDS + """\
workflows:
  deploy:
    steps: { a: { backend: api, route: /a } }
webhooks:
  gh:
    workflow: deploy
"""  # the next line of WEBHOOK + text is line 12


@pytest.mark.parametrize(
    ("snippet", "line", "field", "fragment"),
    [
        ("verify: { scheme: none, secrets: [s] }", 12, "verify.secrets",
         "scheme 'none' checks no signature, so it takes no secrets"),
        ("verify: { scheme: github }", 12, "verify.secrets",
         "scheme 'github' needs one secret, or two while rotating (got 0)"),
        ("verify: { scheme: stripe, secrets: [] }", 12, "verify.secrets", "(got 0)"),
        ("verify: { scheme: standard, secrets: [a, b, c] }", 12, "verify.secrets", "(got 3)"),
        ("verify: { scheme: standard, secrets: ['whsec_!!!'] }", 12, "verify.secrets[0]",
         "a whsec_ secret must be base64 after the prefix"),
        ("verify: { scheme: github, secrets: [''] }", 12, "verify.secrets[0]",
         "a webhook secret must be non-empty text"),
        ("verify: { scheme: hmac, secrets: [s] }", 12, "verify.scheme",
         "'github', 'standard', 'stripe' or 'none' (got 'hmac')"),
        ("verify: { scheme: stripe, secrets: [s], tolerance: soon }", 12, "verify.tolerance",
         "'soon' is not a duration"),
        ("verify: { scheme: none, secret: s }", 12, "verify.secret",
         "unknown field 'secret' (did you mean 'secrets'?)"),
        ("headers: ['X Bad']", 12, "headers[0]", "'X Bad' is not an HTTP header name"),
        ("headers: [X-Event, x-event]", 12, "headers",
         "header 'x-event' is listed twice (names are case-insensitive)"),
        ("input: { ref: 'bodyy.ref' }", 12, "input.ref",
         "unknown name 'bodyy' (did you mean 'body'?) (available: body, headers)"),
        ("input: { ref: \"body['a'].lower()\" }", 12, "input.ref",
         "method calls are not allowed: write lower(x) instead of x.lower() (column 11 of"),
        ("input: { '': body }", 12, "input", "an input field name must not be empty"),
        ("inputs: { ref: body.ref }", 12, "inputs", "did you mean 'input'?"),
    ],
)
def test_bad_webhooks(tmp_path: Path, snippet: str, line: int, field: str, fragment: str) -> None:
    verify = "" if snippet.startswith("verify") else "    verify: { scheme: none }\n"
    problem = one_problem(tmp_path, WEBHOOK + f"    {snippet}\n" + verify)
    assert_problem(problem, line, f"webhooks.gh.{field}", fragment)


def test_webhook_must_name_a_declared_workflow(tmp_path: Path) -> None:
    text = WEBHOOK + "    verify: { scheme: none }\n"
    problem = one_problem(tmp_path, text.replace("workflow: deploy", "workflow: deplyo"))
    assert_problem(problem, 11, "webhooks.gh.workflow",
                   "unknown workflow 'deplyo' (did you mean 'deploy'?) (declared: deploy)")
    # A workflow that is declared but invalid is still declared: no second problem.
    broken = text.replace("route: /a", "route: a")
    assert_problem(one_problem(tmp_path, broken), 8, "workflows.deploy.steps.a.route",
                   "must start with '/'")
    assert list(load_manifest(write(tmp_path, text), {}).webhooks) == ["gh"]


def test_webhook_secret_env_problems_are_reported_once(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, WEBHOOK + """\
    verify:
      scheme: github
      secrets:
        - ${GH_SECRET}
""")
    assert_problem(problem, 15, "webhooks.gh.verify.secrets[0]",
                   "environment variable GH_SECRET is not set")
    problem = one_problem(tmp_path, WEBHOOK + """\
    verify:
      scheme: github
      secrets: ["${{ secrets.GH }}"]
""")
    assert_problem(problem, 14, "webhooks.gh.verify.secrets[0]",
                   "'${{ ... }}' expressions are not evaluated here",
                   "only ${NAME} and ${NAME:-default} are substituted")


def test_secret_values_are_never_echoed(tmp_path: Path) -> None:
    found = problems(tmp_path, WEBHOOK + "    verify: { scheme: github, secrets: [12345678] }\n")
    assert found == [f"{tmp_path}/orchestrator.yml:12: webhooks.gh.verify.secrets[0]: "
                     "Input should be a valid string"]


def test_webhooks_section_shape(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + "workflows: {}\nwebhooks: [x]\n")
    assert_problem(problem, 7, "webhooks", "must be a mapping of name -> definition")
    found = problems(tmp_path, WEBHOOK.replace("  gh:\n    workflow: deploy\n",
                                               "  'bad name': 3\n"))
    assert_problem(found[0], 10, "webhooks.bad name", "must start with a letter or digit")
    assert_problem(found[1], 10, "webhooks.bad name", "must be a mapping (got 3)")
    found = problems(tmp_path, WEBHOOK.replace("    workflow: deploy\n", "    verify: {}\n"))
    assert_problem(found[0], 10, "webhooks.gh.workflow", "required field 'workflow'")
    assert_problem(found[1], 11, "webhooks.gh.verify.scheme", "required field 'scheme'")
    problem = one_problem(tmp_path, BACKENDS + "workflows: {}\nwebhook: {}\n")
    assert_problem(problem, 7, "webhook", "did you mean 'webhooks'?",
                   "(expected backends, workflows or webhooks)")


def test_manifest_model_checks_webhook_workflows() -> None:
    steps = {"a": {"backend": "api", "route": "/a"}}
    data = {
        "backends": {"api": {"url": "http://127.0.0.1:8001"}},
        "workflows": {"deploy": {"steps": steps}},
        "webhooks": {"gh": {"workflow": "deplyo", "verify": {"scheme": "none"}}},
    }
    with pytest.raises(ValueError, match=r"webhooks\.gh\.workflow: unknown workflow 'deplyo'"):
        Manifest.model_validate(data)
    data["webhooks"] = {"gh": {"workflow": "deploy", "verify": {"scheme": "none"}}}
    assert list(Manifest.model_validate(data).webhooks) == ["gh"]


def test_verify_hides_secrets_from_pydantic_errors() -> None:
    with pytest.raises(ValueError) as caught:
        Verify(scheme="standard", secrets=["whsec_n0t-base64!"])
    assert "n0t-base64" not in str(caught.value)
    assert "n0t-base64" not in repr(Verify(scheme="github", secrets=["n0t-base64"]))


# --- safe YAML -------------------------------------------------------------------------------


def test_duplicate_keys(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      fetch: { backend: api, route: /a }
      fetch: { backend: api, route: /b }
""")
    assert problem == (f"{tmp_path}/orchestrator.yml:10: workflows.w.steps.fetch: duplicate key "
                       "'fetch' (first defined at line 9)")


def test_anchor_and_alias_are_refused(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + """\
workflows:
  w:
    steps:
      a: &step { backend: api, route: /a }
      b: *step
""")
    assert problem.startswith(f"{tmp_path}/orchestrator.yml:9: anchor &step is not allowed")
    assert "alias" in problem
    with pytest.raises(ManifestError, match=r"m\.yml:2: alias \*x is not allowed"):
        load_yaml("a: 1\nb: *x\n", "m.yml")


def test_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    bomb = (
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(
            f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n"
            for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    assert len(bomb) == 342  # expands to 9**9 strings if aliases were followed
    started = time.perf_counter()
    problem = one_problem(tmp_path, bomb)
    assert time.perf_counter() - started < 0.5
    assert "orchestrator.yml:1: anchor &a is not allowed" in problem
    assert "alias-bomb" in problem


def test_oversize_file_is_refused_before_parsing(tmp_path: Path) -> None:
    # Not even valid YAML: the size check must come first.
    problem = one_problem(tmp_path, "[" * (MAX_MANIFEST_BYTES + 1))
    assert problem == (f"{tmp_path}/orchestrator.yml:1: file is {MAX_MANIFEST_BYTES + 1} "
                       f"bytes; the limit is {MAX_MANIFEST_BYTES} bytes")
    with pytest.raises(ManifestError, match="the limit is"):
        load_yaml("#" * (MAX_MANIFEST_BYTES + 1), "m.yml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\n---\nb: 2\n", "m.yml:2: a second YAML document"),
        ("a: [1, 2\nb: 3\n", "m.yml:2: YAML syntax error"),
        ("a:\n  1: x\n", "m.yml:2: a: mapping key '1' is not a string"),
        ("a:\n  true: x\n", "m.yml:2: a: mapping key 'true' is not a string (YAML reads it "
         "as bool)"),
        ("a: !!python/object:os.system x\n", "m.yml:1: tag tag:yaml.org,2002:python/object"),
        ("a: .inf\n", "m.yml:1: '.inf' is not a finite number"),
        ("<<: {a: 1}\n", "m.yml:1: merge keys"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "m.yml:1: nesting deeper than"),
    ],
)
def test_unsafe_or_broken_yaml(text: str, expected: str) -> None:
    with pytest.raises(ManifestError) as caught:
        load_yaml(text, "m.yml")
    assert caught.value.problems[0].startswith(expected), caught.value.problems


def test_on_off_yes_no_keys_stay_strings() -> None:
    # YAML 1.1 reads a bare `on` as True (the GitHub Actions trap); as a key it is a word.
    data, lines = load_yaml("on: 1\nOff: 2\nyes:\n  NO: on\n", "m.yml")
    assert data == {"on": 1, "Off": 2, "yes": {"NO": True}}  # values are still booleans
    assert lines.line(("yes", "NO")) == 4


def test_line_map_falls_back_to_the_nearest_parent() -> None:
    data, lines = load_yaml("a:\n  b:\n    - x\n    - y: 1\n  d: 2020-01-02\n", "m.yml")
    assert data == {"a": {"b": ["x", {"y": 1}], "d": "2020-01-02"}}
    assert lines.line(("a", "b", 1, "y")) == 4
    assert lines.line(("a", "b", 1, "missing", "deeper")) == 4
    assert lines.line(("a", "d")) == 5
    assert lines.where(("nothing",)) == "m.yml:1"


# --- workflow files stay inside the manifest's folder ---------------------------------------


def test_workflow_path_escaping_with_dotdot(tmp_path: Path) -> None:
    write(tmp_path, "steps: { a: { backend: api, route: /a } }\n", "outside.yml")
    problem = one_problem(tmp_path / "project", BACKENDS + "workflows:\n  w: ../outside.yml\n")
    assert_problem(problem, 7, "workflows.w", "'../outside.yml' is outside the manifest's folder")


def test_workflow_absolute_path_elsewhere(tmp_path: Path) -> None:
    elsewhere = write(tmp_path, "steps: { a: { backend: api, route: /a } }\n", "other.yml")
    problem = one_problem(tmp_path / "project", BACKENDS + f"workflows:\n  w: {elsewhere}\n")
    assert_problem(problem, 7, "workflows.w", "is outside the manifest's folder")


def test_workflow_symlink_escaping(tmp_path: Path) -> None:
    target = write(tmp_path, "steps: { a: { backend: api, route: /a } }\n", "secret.yml")
    project = tmp_path / "project"
    project.mkdir()
    (project / "w.yml").symlink_to(target)
    problem = one_problem(project, BACKENDS + "workflows:\n  w: ./w.yml\n")
    assert_problem(problem, 7, "workflows.w", "symlinks may not leave it")


def test_workflow_symlink_inside_and_absolute_path_inside_are_fine(tmp_path: Path) -> None:
    real = write(tmp_path, "steps: { a: { backend: api, route: /a } }\n", "flows/real.yml")
    (tmp_path / "link.yml").symlink_to(real)
    path = write(tmp_path, BACKENDS + f"workflows:\n  w: link.yml\n  v: {real}\n")
    assert list(load_manifest(path, {}).workflows) == ["w", "v"]


def test_missing_workflow_file(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, BACKENDS + "workflows:\n  w: ./flows/nope.yml\n")
    assert_problem(problem, 7, "workflows.w", "'./flows/nope.yml' not found")


# --- ${VAR} substitution in backends ---------------------------------------------------------


def test_env_substitution_with_defaults_and_escape(tmp_path: Path) -> None:
    path = write(tmp_path, """\
backends:
  api:
    url: "http://${API_HOST}:${API_PORT:-8001}/"
    secret: "${API_SECRET:-dev-secret}"
    timeout: "${API_TIMEOUT:-30s}"
    openapi: "$${NOT_A_VAR}.json"
workflows:
  w: { steps: { a: { backend: api, route: /a, payload: { x: "${KEPT}" } } } }
""")
    manifest = load_manifest(path, {"API_HOST": "fn.internal", "API_SECRET": "s3"},
                             check_openapi=False)
    api = manifest.backends["api"]
    assert api.url == "http://fn.internal:8001"
    assert api.secret == "s3"
    assert api.timeout == 30.0
    assert api.openapi == "${NOT_A_VAR}.json"
    assert "s3" not in repr(api)
    # Only backends: is substituted; payloads travel as written.
    assert manifest.workflows["w"].steps["a"].payload == {"x": "${KEPT}"}


def test_undefined_env_var(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, """\
backends:
  api:
    url: http://127.0.0.1:8001
    secret: ${API_SECRET}
workflows:
  w: { steps: { a: { backend: api, route: /a } } }
""")
    assert_problem(problem, 4, "backends.api.secret",
                   "environment variable API_SECRET is not set")


def test_malformed_variable_reference(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, """\
backends:
  api: { url: "http://${HOST" }
workflows:
  w: { steps: { a: { backend: api, route: /a } } }
""", {"HOST": "x"})
    assert_problem(problem, 2, "backends.api.url", "malformed variable reference")


# --- OpenAPI route checks -------------------------------------------------------------------


OPENAPI_MANIFEST = """\
backends:
  api:
    url: http://127.0.0.1:8001
    openapi: {spec}
workflows:
  ingest:
    steps:
      fetch: {{ backend: api, route: /fetchUpstream }}
      load: {{ backend: api, route: /loadd, dependsOn: [fetch] }}
"""


def test_openapi_routes_ok() -> None:
    manifest = load_manifest(FIXTURES / "openapi" / "orchestrator.yml", {})
    # /tenants/acme/report matches the templated /tenants/{tenant}/report.
    assert list(manifest.workflows["ingest"].steps) == ["fetch", "load", "report"]


def test_openapi_route_missing(tmp_path: Path) -> None:
    spec = FIXTURES / "openapi" / "api.json"
    problem = one_problem(tmp_path, OPENAPI_MANIFEST.format(spec=spec))
    assert_problem(problem, 9, "workflows.ingest.steps.load.route",
                   "step ingest.load calls POST /loadd", "did you mean '/load'?")


def test_openapi_get_only_route_is_missing(tmp_path: Path) -> None:
    spec = FIXTURES / "openapi" / "api.json"
    text = OPENAPI_MANIFEST.format(spec=spec).replace("/loadd", "/health")
    problem = one_problem(tmp_path, text)
    assert_problem(problem, 9, "workflows.ingest.steps.load.route", "POST /health")


def test_openapi_unreadable_spec_names_the_steps(tmp_path: Path) -> None:
    problem = one_problem(tmp_path, OPENAPI_MANIFEST.format(spec="missing.json"))
    assert_problem(problem, 4, "backends.api.openapi", "cannot read OpenAPI spec 'missing.json'",
                   "ingest.fetch", "ingest.load")
    path = write(tmp_path, OPENAPI_MANIFEST.format(spec="missing.json"))
    assert load_manifest(path, {}, check_openapi=False).backends["api"].openapi == "missing.json"


def test_openapi_spec_without_paths(tmp_path: Path) -> None:
    write(tmp_path, "openapi: 3.1.0\ninfo: { title: x }\n", "spec.yaml")
    problem = one_problem(tmp_path, OPENAPI_MANIFEST.format(spec="spec.yaml"))
    assert_problem(problem, 4, "backends.api.openapi", "no 'paths' mapping")


@pytest.fixture
def spec_server() -> Iterator[str]:
    body = (FIXTURES / "openapi" / "api.json").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/openapi.json"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if found else b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_openapi_over_http(tmp_path: Path, spec_server: str) -> None:
    problem = one_problem(tmp_path, OPENAPI_MANIFEST.format(spec=f"{spec_server}/openapi.json"))
    assert_problem(problem, 9, "workflows.ingest.steps.load.route", "POST /loadd")
    problem = one_problem(tmp_path, OPENAPI_MANIFEST.format(spec=f"{spec_server}/nope.json"))
    assert_problem(problem, 4, "backends.api.openapi", "404", "ingest.fetch")


# --- models -------------------------------------------------------------------------------


def make_workflow(steps: dict[str, list[str]]) -> Workflow:
    return Workflow.model_validate(
        {"steps": {n: {"backend": "api", "route": f"/{n}", "dependsOn": d}
                   for n, d in steps.items()}}
    )


def test_topological_order_keeps_declaration_order_for_ties() -> None:
    wf = make_workflow({"report": ["b", "a"], "b": ["root"], "a": ["root"], "root": []})
    assert wf.roots() == ["root"]
    assert wf.topological_order() == ["root", "b", "a", "report"]
    assert wf.dependants() == {"report": [], "b": ["report"], "a": ["report"], "root": ["b", "a"]}


def test_workflow_json_round_trip() -> None:
    manifest = load_manifest(FIXTURES / "reference" / "ingest-nightly.yml", {})
    wf = manifest.workflows["ingest-nightly"]
    text = wf.to_json()
    stored = json.loads(text)
    assert stored["steps"]["load"]["dependsOn"] == ["fetch"]
    assert stored["steps"]["fetch"]["retry"]["maxDelay"] == 300.0
    assert stored["onFailure"] == "halt"
    assert Workflow.from_json(text) == wf
    tenant = load_manifest(FIXTURES / "reference" / "tenant-report.yml", {})
    wf = tenant.workflows["tenant-report"]
    assert Workflow.from_json(wf.to_json()) == wf


def test_from_json_checks_the_graph() -> None:
    cyclic = {"steps": {"a": {"backend": "x", "route": "/a", "dependsOn": ["b"]},
                        "b": {"backend": "x", "route": "/b", "dependsOn": ["a"]}}}
    with pytest.raises(ValueError, match=r"dependency cycle: a -> b -> a"):
        Workflow.from_json(json.dumps(cyclic))


def test_models_are_frozen() -> None:
    wf = make_workflow({"a": []})
    with pytest.raises(ValueError, match="frozen"):
        wf.on_failure = "continue-independent"  # type: ignore[misc]


def test_retry_delays() -> None:
    linear = RetryPolicy(delay=2.0, max_delay=5.0)
    assert [linear.delay_before(n) for n in (1, 2, 3)] == [2.0, 4.0, 5.0]
    exponential = RetryPolicy(strategy="exponential", delay=1.0)
    assert [exponential.delay_before(n) for n in (1, 2, 3, 20)] == [1.0, 2.0, 4.0, 300.0]


def test_manifest_from_text_resolves_against_base_dir(tmp_path: Path) -> None:
    write(tmp_path, "steps: { a: { backend: api, route: /a } }\n", "flows/w.yml")
    manifest = manifest_from_text(BACKENDS + "workflows:\n  w: flows/w.yml\n", "m.yml",
                                  tmp_path, {})
    assert manifest.source == tmp_path / "m.yml"
    assert manifest.workflows["w"].roots() == ["a"]
    with pytest.raises(ManifestError, match=r"^m\.yml:7: workflows\.w: workflow file"):
        manifest_from_text(BACKENDS + "workflows:\n  w: nope.yml\n", "m.yml", tmp_path, {})


def test_top_level_shape(tmp_path: Path) -> None:
    found = problems(tmp_path, "backend:\n  api: { url: http://x }\nworkflows: {}\n")
    assert_problem(found[0], 1, "backend", "unknown top-level key", "did you mean 'backends'?")
    assert "backends: is required" in found[1]
    assert one_problem(tmp_path, "").endswith("a manifest is a mapping with backends: and "
                                               "workflows:")


# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("500ms", 0.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1d", 86400.0),
     ("1h30m", 5400.0), ("2m30.5s", 150.5), ("1s500ms", 1.5), ("45", 45.0), (45, 45.0),
     (0.25, 0.25)],
)
def test_parse_duration(value: str | float, seconds: float) -> None:
    assert parse_duration(value, "timeout") == seconds


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("-5s", "'-5s' is negative"), (-1, "-1 is negative"), ("0s", "'0s' must be greater"),
     ("abc", "'abc' is not a duration"), ("30m1h", "'30m1h' is not a duration"),
     ("5 m", "'5 m' is not a duration"), ("", "'' is not a duration"),
     (True, "True is not a duration"), (float("nan"), "nan is not a finite duration")],
)
def test_parse_duration_rejects(value: str | float, fragment: str) -> None:
    with pytest.raises(ValueError, match=r"^timeout: ") as caught:
        parse_duration(value, "timeout")
    assert fragment in str(caught.value)


def test_zero_duration_when_allowed_and_formatting() -> None:
    assert parse_duration("0s", "delay", allow_zero=True) == 0.0
    cases = {0: "0s", 0.25: "250ms", 1.5: "1.5s", 90: "1m30s", 5400: "1h30m", 86400: "1d",
             90061.25: "1d1h1m1.25s"}
    for seconds, text in cases.items():
        assert format_duration(seconds) == text
        assert parse_duration(text, "x", allow_zero=True) == seconds


# --- durable workflows ------------------------------------------------------------------


def durable_spec(folder: Path) -> Path:
    from functions.examples.noop import create_app

    spec = folder / "served.json"
    spec.write_text(json.dumps(create_app().openapi()))  # what the SDK publishes
    return spec


def test_a_durable_workflow_its_backend_serves_loads(tmp_path: Path) -> None:
    spec = durable_spec(tmp_path)
    path = write(tmp_path, f"""\
backends:
  app: {{ url: "http://127.0.0.1:8001", openapi: {spec} }}
workflows:
  noop-chain: {{ backend: app }}
  renamed: {{ backend: app, workflow: noop-parallel, timeout: 30s }}
""")
    wfs = load_manifest(path, {}).workflows
    assert wfs["noop-chain"].durable and wfs["renamed"].timeout == 30.0


def test_a_durable_workflow_the_backend_does_not_serve_is_named(tmp_path: Path) -> None:
    spec = durable_spec(tmp_path)
    problem = one_problem(tmp_path, f"""\
backends:
  app: {{ url: "http://127.0.0.1:8001", openapi: {spec} }}
workflows:
  welcome: {{ backend: app, workflow: send-welcome }}
""")
    assert_problem(problem, 4, "workflows.welcome.workflow",
                   "durable workflow 'send-welcome' is not served by backend 'app'",
                   "noop-chain, noop-parallel")


@pytest.mark.parametrize(("body", "fragment"), [
    ("{ backend: app, steps: { a: { backend: app, route: /a } } }", "exclude each other"),
    ("{ description: nothing }", "needs steps (a DAG) or backend"),
    ("{ steps: { a: { backend: app, route: /a } }, timeout: 5s }", "belong to a durable"),
    ("{ backend: nope }", "unknown backend 'nope'"),
])
def test_a_durable_workflow_declared_wrongly_is_refused(tmp_path: Path, body: str,
                                                        fragment: str) -> None:
    found = problems(tmp_path, f"""\
backends:
  app: {{ url: "http://127.0.0.1:8001" }}
workflows:
  w: {body}
""")
    assert any(fragment in p and "orchestrator.yml:4" in p for p in found), found
