"""The pure parts of batches and cancel-on-event: where an event goes in an open batch
(engine/batches.py), a cancel condition's forms (manifest/event_flow.py), and the
manifest's refusals, each naming its field and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engine.batches import batch_input, member, place
from orchestrator.engine.states import RunStatus
from orchestrator.errors import ManifestError
from orchestrator.expressions import compile_expression
from orchestrator.manifest.event_flow import CANCEL_NAMES, cancel_condition
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.strict_json import dumps

E = {"id": "e", "name": "n", "key": None, "data": {"x": 1}, "received_at": 5.0}
Q = RunStatus.QUEUED


def test_an_event_as_a_batch_lists_it() -> None:
    assert member({**E, "extra": 1}) == E
    assert batch_input([E]) == {"events": [E]}


def test_an_event_joins_an_open_batch_and_the_last_place_fills_it() -> None:
    one = batch_input([E])
    got = place(one, Q, 1, 100.0, event={**E, "id": "f"}, size=3, cap=10_000, now=50.0)
    assert got.input == {"events": [E, {**E, "id": "f"}]} and not got.full
    last = place(got.input, Q, 2, 100.0, event={**E, "id": "g"}, size=3, cap=10_000, now=50.0)
    assert last.input is not None and len(last.input["events"]) == 3 and last.full


@pytest.mark.parametrize(("status", "count", "admit_at", "why"), [
    (Q, 3, 100.0, "full"),
    (RunStatus.RUNNING, 1, 100.0, "started"),
    (RunStatus.KILLED, 1, 100.0, "cancelled"),
    (Q, 1, 50.0, "its timeout passed"),
    (Q, 1, None, "no start time"),
])
def test_a_closed_batch_takes_no_event(status: RunStatus, count: int,
                                       admit_at: float | None, why: str) -> None:
    got = place(batch_input([E] * count), status, count, admit_at, event=E, size=3,
                cap=10_000, now=50.0)
    assert got.input is None, why


def test_a_batch_whose_input_would_pass_the_cap_is_closed() -> None:
    one = batch_input([E])
    cap = len(dumps(batch_input([E, E])).encode())
    assert place(one, Q, 1, 100.0, event=E, size=5, cap=cap, now=0.0).input is not None
    assert place(one, Q, 1, 100.0, event=E, size=5, cap=cap - 1, now=0.0).input is None


def test_not_a_batch_input_is_closed() -> None:
    assert place({"other": 1}, Q, 1, 100.0, event=E, size=5, cap=10_000, now=0.0).input is None


@pytest.mark.parametrize("source", ["input.order == event.data.order",
                                    "${{ input.order == event.data.order }}"])
def test_a_cancel_condition_is_bare_or_one_hole(source: str) -> None:
    cond = compile_expression(cancel_condition(source), names=CANCEL_NAMES)
    assert cond.test({"input": {"order": 1}, "event": {"data": {"order": 1}}})
    assert not cond.test({"input": {"order": 1}, "event": {"data": {"order": 2}}})


def problems(text: str, tmp_path: Path) -> str:
    head = 'backends:\n  fn: { url: "http://127.0.0.1:1" }\nworkflows:\n'
    with pytest.raises(ManifestError) as caught:
        manifest_from_text(head + text, "m.yml", tmp_path, {})
    return str(caught.value)


STEPS = "    steps: { a: { backend: fn, route: /a } }\n"


def test_a_batch_without_events_is_refused_at_its_line(tmp_path: Path) -> None:
    text = problems("  w:\n    batch: { size: 3, timeout: 1s }\n" + STEPS, tmp_path)
    assert "m.yml:5: workflows.w.batch: needs on:" in text


def test_a_batch_with_debounce_is_refused(tmp_path: Path) -> None:
    text = problems("  w:\n    on: { event: e }\n    debounce: { period: 1s }\n"
                    "    batch: { size: 3, timeout: 1s }\n" + STEPS, tmp_path)
    assert "workflows.w.batch: batch and debounce exclude each other" in text


@pytest.mark.parametrize(("batch", "field", "says"), [
    ("{ size: 0, timeout: 1s }", "batch.size", "greater than or equal to 1"),
    ("{ size: 1001, timeout: 1s }", "batch.size", "less than or equal to 1000"),
    ("{ size: 2, timeout: 0s }", "batch.timeout", "greater than zero"),
    ("{ size: 2, timeout: 2d }", "batch.timeout", "at most 86400s"),
    ("{ size: 2 }", "batch.timeout", ""),
    ("{ size: 2, timeout: 1s, key: '${{ input.x }}' }", "batch.key", "unknown name 'input'"),
    ("{ size: 2, timeout: 1s, every: 3 }", "batch.every", "unknown field"),
])
def test_bad_batch_fields_are_named_with_their_line(tmp_path: Path, batch: str, field: str,
                                                    says: str) -> None:
    text = problems(f"  w:\n    on: {{ event: e }}\n    batch: {batch}\n" + STEPS, tmp_path)
    assert f"m.yml:6: workflows.w.{field}:" in text and says in text, text


@pytest.mark.parametrize(("entry", "field", "says"), [
    ("{ event: 'a b' }", "cancelOn.event", "event name"),
    ("{ event: e, if: 'steps.a.output' }", "cancelOn.if", "unknown name 'steps'"),
    ("{ event: e, if: '${{ input.a == }}' }", "cancelOn.if", ""),
    ("{ if: 'true' }", "cancelOn.event", ""),
])
def test_bad_cancel_on_fields_are_named_with_their_line(tmp_path: Path, entry: str,
                                                        field: str, says: str) -> None:
    text = problems(f"  w:\n    cancelOn: {entry}\n" + STEPS, tmp_path)
    assert f"m.yml:5: workflows.w.{field}:" in text and says in text, text


def test_good_batch_and_cancel_on_load(tmp_path: Path) -> None:
    head = 'backends:\n  fn: { url: "http://127.0.0.1:1" }\nworkflows:\n'
    manifest = manifest_from_text(head + """\
  w:
    on: { event: e }
    batch: { size: 10, timeout: 5s, key: "${{ event.data.customer }}" }
    cancelOn:
      - { event: order.cancelled, if: "${{ input.events[0].data.order == event.data.order }}" }
      - { event: all.stop }
""" + STEPS, "m.yml", tmp_path, {})
    wf = manifest.workflows["w"]
    assert wf.batch is not None and (wf.batch.size, wf.batch.timeout) == (10, 5.0)
    assert [c.event for c in wf.cancel_on] == ["order.cancelled", "all.stop"]
    assert wf.cancel_on[1].if_ is None


def test_a_batch_with_throttle_is_refused(tmp_path: Path) -> None:
    text = problems("  w:\n    on: { event: e }\n    throttle: { limit: 1, period: 1s }\n"
                    "    batch: { size: 3, timeout: 1s }\n" + STEPS, tmp_path)
    assert "workflows.w.batch: batch and throttle exclude each other" in text
