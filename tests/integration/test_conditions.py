"""Step conditions (`if:`): evaluated once a step's dependencies are done, over `input`
and any ancestor's `steps.<name>.output`; false ends the step `skipped`
(`condition_false`) without calling it, and its dependants go on as after a success,
unlike a skip below a failure."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import manifest_from_text
from tests.support.harness import Harness, steps_of
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  refund:
    steps:
      ask: { backend: fn, route: /echo, payload: { timed_out: true } }
      escalate:
        backend: fn
        route: /echo
        dependsOn: [ask]
        if: "${{ steps.ask.output.payload.timed_out }}"
      ask-lead:
        backend: fn
        route: /echo
        dependsOn: [escalate]
        if: "${{ !steps.ask.output.payload.timed_out }}"
      refund:
        backend: fn
        route: /echo
        dependsOn: [ask-lead]
        if: "${{ input.go && steps.ask_lead.output == null }}"
      join: { backend: fn, route: /echo, dependsOn: [escalate, ask-lead] }
  halted:
    steps:
      boom: { backend: fn, route: /status, payload: { code: 400 } }
      after: { backend: fn, route: /echo, dependsOn: [boom], if: "true" }
"""


def called(recorder: Recorder, run_id: str) -> set[str]:
    return {s for s in ("ask", "escalate", "ask-lead", "refund", "join")
            if recorder.for_step(run_id, s)}


def test_a_false_condition_skips_the_step_and_its_dependants_go_on(
        harness_factory: Any, recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers()
    run_id = h.start("refund", {"go": True})
    view = h.wait(run_id)
    assert view["status"] == "success", view
    steps = steps_of(view)
    assert {n: s["status"] for n, s in steps.items()} == {
        "ask": "success", "escalate": "success", "ask-lead": "skipped",
        "refund": "success", "join": "success"}
    # Skipped by its condition, never called; its reason in place of an error.
    assert called(recorder, run_id) == {"ask", "escalate", "refund", "join"}
    assert steps["ask-lead"]["error"] == {"code": "condition_false", "message": "condition false"}
    assert steps["ask-lead"]["output"] is None
    # The join below it ran, and saw null for it; `refund` read a non-direct ancestor
    # (`ask`) and the skipped step by its underscore name.
    [join] = recorder.for_step(run_id, "join")
    assert join.body["steps"] == {"escalate": steps["escalate"]["output"], "ask-lead": None}
    history = h.rt.store.steps.get_step(run_id, "ask-lead")
    assert history is not None
    assert next(e for e in history.history if e["type"] == "step.skipped")["reason"] \
        == "condition false"


def test_a_condition_reads_the_input(harness_factory: Any, recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers()
    run_id = h.start("refund", {"go": False})
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert steps_of(view)["refund"]["status"] == "skipped"
    assert called(recorder, run_id) == {"ask", "escalate", "join"}


def test_a_failure_still_skips_a_conditional_step_below_it(harness_factory: Any) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers()
    view = h.wait(h.start("halted", {}))
    assert view["status"] == "failed"
    after = steps_of(view)["after"]
    assert after["status"] == "skipped" and after["error"]["code"] == "skipped"


@pytest.mark.parametrize(("condition", "message"), [
    ("steps.join.output", "steps.join reads step 'join', which is not an ancestor of 'b'"),
    ("steps.nope.output", "steps.nope: no such step"),
    ("steps.a.output +", "syntax error"),
    ("event.data", "unknown name 'event'"),
    ("len(steps) > 0", "read a step's output as steps.<name>.output"),
])
def test_lint_refuses_a_condition_that_reads_what_it_cannot(condition: str, message: str) -> None:
    text = f"""
backends:
  fn: {{ url: "http://127.0.0.1:1" }}
workflows:
  w:
    steps:
      a: {{ backend: fn, route: /a }}
      b:
        backend: fn
        route: /b
        dependsOn: [a]
        if: "{condition}"
      join: {{ backend: fn, route: /c, dependsOn: [b] }}
"""
    with pytest.raises(ManifestError) as err:
        manifest_from_text(text, "orchestrator.yml", environ={})
    assert "orchestrator.yml:12: workflows.w.steps.b.if:" in str(err.value)
    assert message in str(err.value)


def test_a_step_named_with_underscores_and_dashes_is_ambiguous() -> None:
    text = """
backends:
  fn: { url: "http://127.0.0.1:1" }
workflows:
  w:
    steps:
      ask-lead: { backend: fn, route: /a }
      ask_lead: { backend: fn, route: /a }
      b: { backend: fn, route: /b, dependsOn: [ask-lead, ask_lead], if: "steps.ask_lead.output" }
"""
    with pytest.raises(ManifestError, match="could be step 'ask_lead' or 'ask-lead'"):
        manifest_from_text(text, "orchestrator.yml", environ={})
