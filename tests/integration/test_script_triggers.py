"""A script workflow meets every trigger path a workflow has: the API (a stored script
started by name), a signed webhook, and a debounced burst of events; each run reads
what its trigger carried as its payload."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.webhook_signing import sign
from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, log_of, script_stack

SAY = """name="$(python3 -c 'import json, os
print(json.load(open(os.environ["ORCHESTRATOR_INPUT_FILE"]))["payload"]["name"])')"
orchestrator step say -- echo "hello $name"
"""

MANIFEST = """
backends:
  scripts:
    url: "${SCRIPTS}"
    secret: "${SCRIPTS_SECRET}"
    capabilities: [shell]
workflows:
  hooked: { script: say.sh }
  burst:
    script: say.sh
    on: { event: name.changed }
    # Quiet for 5 s ends the burst: three CLI emits on a loaded machine can be over a
    # second apart (a 1 s period split the burst in two once, in CI).
    debounce: { period: 5s }
webhooks:
  greet:
    workflow: hooked
    verify: { scheme: github, secrets: ["hook-secret"] }
    input: { name: body.name }
"""


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    (tmp_path / "say.sh").write_text(SAY)
    with script_stack(build_harness, tmp_path, MANIFEST) as s:
        yield s


def test_a_stored_script_starts_by_name_through_the_api(stack: ScriptStack,
                                                         tmp_path: Path) -> None:
    res = stack.cli("handler", "set", "greeter", str(tmp_path / "say.sh"), "--on", "x.y")
    assert res.exit_code == 0, res.output
    res = stack.cli("trigger", "greeter", "--input", '{"name": "ada"}', "--wait", "--json")
    assert res.exit_code == 0, res.output
    view = stack.h.rt.runs.view(json.loads(res.stdout)["run_id"])
    assert log_of(view) == "hello ada\n"
    listed = httpx.get(f"{stack.api}/scripts").json()["scripts"]
    assert [s["name"] for s in listed] == ["greeter"]
    assert listed[0]["on"] == [{"event": "x.y"}]


def test_a_signed_webhook_starts_a_script_workflow(stack: ScriptStack) -> None:
    body = b'{"name": "grace"}'
    headers = {"content-type": "application/json",
               **sign("github", "hook-secret", body, now=time.time())}
    r = httpx.post(f"{stack.api}/webhooks/greet", content=body, headers=headers)
    assert r.status_code == 202, r.text
    view = stack.h.wait(r.json()["run_id"])
    assert view["status"] == "success" and log_of(view) == "hello grace\n"


def test_a_burst_of_events_starts_one_debounced_script_run(stack: ScriptStack) -> None:
    for name in ("a", "b", "c"):
        res = stack.cli("event", "emit", "name.changed", "--payload",
                        json.dumps({"name": name}))
        assert res.exit_code == 0, res.output
    (view,) = stack.runs_of("burst", 1)
    assert view["status"] == "success" and log_of(view) == "hello c\n"
