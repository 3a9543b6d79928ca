"""Each stage of admission (orchestrator/services/admission/) on its own, against moto:
dedupe, debounce, throttle, concurrency, create-and-launch, and the pipeline that runs
them in order. No worker runs here: what each stage writes and answers is the point."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.engine.definition import Gate, Throttle
from orchestrator.engine.policies import GroupPolicy, ThrottlePolicy
from orchestrator.errors import Unprocessable, UsageError
from orchestrator.services.admission import Outcome, StartRequest
from orchestrator.services.admission.dedupe import resolve
from orchestrator.services.admission.launch import new_run_id
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  plain:
    steps:
      one: { backend: fn, route: /echo }
  quiet:
    debounce: { key: "${{ input.k }}", period: 10s, maxWait: 30s }
    steps:
      one: { backend: fn, route: /echo }
  single:
    concurrency: { group: single, policy: skip }
    steps:
      one: { backend: fn, route: /echo }
  line:
    concurrency: { group: line }
    steps:
      one: { backend: fn, route: /echo }
"""


@pytest.fixture
def h(harness_factory: Any) -> Harness:
    harness: Harness = harness_factory(MANIFEST)
    return harness


# ---- dedupe ---------------------------------------------------------------------------

def test_dedupe_names_the_run_by_the_key_and_refuses_another_body(h: Harness) -> None:
    keys = h.rt.runs.pipeline.keys
    assert keys is not None
    now = h.rt.clock()
    req = StartRequest("plain", {"a": 1}, idempotency_key="K", document={"a": 1})
    first = resolve(req, keys, now, new_run_id)
    again = resolve(req, keys, now + 1, new_run_id)
    assert first.run_id is not None and again.run_id == first.run_id
    assert dict(first.trigger or {}) == {"source": "api", "idempotency_key": "K"}
    with pytest.raises(Unprocessable, match="different request body"):
        resolve(StartRequest("plain", idempotency_key="K", document={"a": 2}), keys, now,
                new_run_id)
    with pytest.raises(UsageError, match="Idempotency-Key"):
        resolve(StartRequest("plain", idempotency_key="has space", document={}), keys, now,
                new_run_id)
    plain = StartRequest("plain", run_id="mine")
    assert resolve(plain, keys, now, new_run_id) is plain  # no key: as it is


# ---- debounce -------------------------------------------------------------------------

def test_debounce_begins_joins_and_knows_a_repeat(h: Harness) -> None:
    admit = h.rt.runs.admit
    first = admit(StartRequest("quiet", {"k": "a", "n": 1}, "t1"))
    assert first.outcome is Outcome.QUEUED and first.run.status.value == "queued"
    joined = admit(StartRequest("quiet", {"k": "a", "n": 2}, "t2"))
    assert joined.outcome is Outcome.DEBOUNCED and joined.run.run_id == first.run.run_id
    assert joined.run.input == {"k": "a", "n": 2}
    repeat = admit(StartRequest("quiet", {"k": "a", "n": 9}, "t1"))
    assert repeat.outcome is Outcome.DUPLICATE and repeat.run.input == {"k": "a", "n": 2}
    assert repeat.run.admit_at == joined.run.admit_at
    other = admit(StartRequest("quiet", {"k": "b"}, "t3"))  # another key: its own burst
    assert other.outcome is Outcome.QUEUED and other.run.run_id != first.run.run_id


# ---- throttle -------------------------------------------------------------------------

def test_throttle_spaces_slots_and_drop_refuses_a_wait(h: Harness) -> None:
    throttles = h.rt.admission.throttles
    now = h.rt.clock()
    spec = Throttle(key="k", limit=2, period=10.0, burst=1, policy=ThrottlePolicy.QUEUE)
    slots = [throttles.reserve("wf", spec, now) for _ in range(3)]
    assert slots[0] == pytest.approx(now) and slots[1] == pytest.approx(now + 5.0)
    assert slots[2] == pytest.approx(now + 10.0)
    drop = Throttle(key="d", limit=1, period=60.0, burst=1, policy=ThrottlePolicy.DROP)
    assert throttles.reserve("wf", drop, now) == pytest.approx(now)
    assert throttles.reserve("wf", drop, now) is None


# ---- concurrency ----------------------------------------------------------------------

def test_concurrency_lets_one_in_and_skips_or_queues_the_next(h: Harness) -> None:
    admit = h.rt.runs.admit
    # No worker runs: an admitted run stays running, holding its group.
    first = admit(StartRequest("single", {}))
    assert first.run.status.value == "running"
    second = admit(StartRequest("single", {}))
    assert second.outcome is Outcome.SKIPPED
    assert second.run.error is not None and second.run.error["code"] == "concurrency_busy"
    held = admit(StartRequest("line", {}))
    waits = admit(StartRequest("line", {}))
    assert held.run.status.value == "running" and waits.outcome is Outcome.QUEUED
    assert waits.run.gate == Gate(group="line", key="", policy=GroupPolicy.QUEUE)
    # The holder's end lets the next in.
    h.rt.runs.cancel(held.run.run_id, "done with it")
    assert h.rt.runs.get(waits.run.run_id).status.value == "running"


# ---- create and launch ----------------------------------------------------------------

def test_create_answers_an_existing_run_id_and_refuses_a_bad_one(h: Harness) -> None:
    admit = h.rt.runs.admit
    made = admit(StartRequest("plain", {"x": 1}, "chosen-1"))
    again = admit(StartRequest("plain", {"x": 2}, "chosen-1"))
    assert made.outcome is Outcome.CREATED
    assert again.outcome is Outcome.DUPLICATE and again.run.input == {"x": 1}
    with pytest.raises(UsageError, match="run_id"):
        admit(StartRequest("plain", {}, "bad id"))
    rows = h.rt.store.steps.query_steps("chosen-1")
    # The root is left out of the start's writes: its dispatch creates it (engine/plan).
    assert [r.step for r in rows] in ([], ["one"])
