"""A wide fan-out is promoted in slices: the worker that ran the step sends a Promote
message for every slice of its dependants but the first, which it promotes itself, and
whichever workers take those messages promote the rest. Copies promote nothing twice;
a slice whose message is lost is the sweeper's to promote."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from orchestrator.adapters.messages import Dispatch, Promote
from tests.support.harness import steps_of
from tests.support.testfns import Recorder

SLICE = 10  # settings.fanout_slice here: more than 2 x SLICE dependants are spread
WIDTH = 4 * SLICE + 5
LEAVES = [f"l{i:03d}" for i in range(WIDTH)]
MANIFEST = (
    'backends:\n  fn: { url: "${FN}" }\nworkflows:\n  wide:\n    steps:\n'
    "      root: { backend: fn, route: /echo }\n"
    + "".join(f"      {leaf}: {{ backend: fn, route: /echo, dependsOn: [root] }}\n"
              for leaf in LEAVES)
    + f"      join: {{ backend: fn, route: /echo, dependsOn: [{', '.join(LEAVES)}] }}\n"
)


def called_once_each(recorder: Recorder, run_id: str) -> Counter[str]:
    return Counter({s: len(recorder.for_step(run_id, s)) for s in ["root", *LEAVES, "join"]})


def test_the_slices_beyond_the_first_go_out_as_promote_messages_and_each_leaf_runs_once(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(MANIFEST, fanout_slice=SLICE)
    promotes: list[Promote] = []

    def twice(msgs: list[Any]) -> list[Any]:
        # Every Promote message is delivered twice.
        promotes.extend(m for m in msgs if isinstance(m, Promote))
        return [c for m in msgs for c in ([m, m] if isinstance(m, Promote) else [m])]

    h.rt.queues.tamper = twice
    h.start_workers(n=2, threads=4)
    run_id = h.start("wide")
    view = h.wait(run_id, timeout=60)
    assert view["status"] == "success"
    assert sorted((p.lo, p.hi) for p in promotes) == [
        (lo, min(lo + SLICE, WIDTH)) for lo in range(SLICE, WIDTH, SLICE)]
    assert {p.step for p in promotes} == {"root"}
    assert set(called_once_each(recorder, run_id).values()) == {1}


def test_a_lost_slice_is_promoted_by_the_sweep(harness_factory: Any, recorder: Recorder) -> None:
    h = harness_factory(MANIFEST, sweep_interval=0.5, redispatch_after=30.0,
                        fanout_slice=SLICE)
    lost: list[Promote] = []

    def drop_promotes(msgs: list[Any]) -> list[Any]:
        lost.extend(m for m in msgs if isinstance(m, Promote))
        return [m for m in msgs if not isinstance(m, Promote)]

    h.rt.queues.tamper = drop_promotes
    h.start_workers(threads=4)
    run_id = h.start("wide")
    for leaf in LEAVES[:SLICE]:  # the first slice, promoted by root's own worker
        h.wait_for_step(run_id, leaf, ("success",), timeout=60)
    assert lost
    rows = steps_of(h.rt.runs.view(run_id))
    assert {rows[leaf]["status"] for leaf in LEAVES[SLICE:]} == {"blocked"}
    # Once a lost message's grace has passed, the sweep promotes what the slices held.
    report = h.rt.sweeper(clock=lambda: time.time() + 31).sweep()
    assert report.promoted == WIDTH - SLICE
    view = h.wait(run_id, timeout=60)
    assert view["status"] == "success"
    assert set(called_once_each(recorder, run_id).values()) == {1}


def test_a_promote_message_for_a_step_that_has_not_succeeded_promotes_nothing(
    harness_factory: Any,
) -> None:
    h = harness_factory(MANIFEST, fanout_slice=SLICE)
    sent: list[Any] = []
    h.rt.queues.tamper = lambda msgs: sent.extend(msgs) or []
    run_id = h.start("wide")
    sent.clear()
    h.rt.worker().handle(Promote(run_id=run_id, step="root", lo=SLICE, hi=2 * SLICE))
    assert sent == []
    assert {steps_of(h.rt.runs.view(run_id))[leaf]["status"] for leaf in LEAVES} == {"blocked"}
    # Once root has succeeded, the same message sends its slice's dispatches.
    h.rt.worker().handle(Dispatch(run_id=run_id, step="root", attempt=1))
    first = [m for m in sent if isinstance(m, Dispatch)]
    # The slice's last leaf ran inline on the worker's thread; the others were sent.
    assert sorted(m.step for m in first) == LEAVES[:SLICE - 1]
    assert steps_of(h.rt.runs.view(run_id))[LEAVES[SLICE - 1]]["status"] == "success"
    sent.clear()
    h.rt.worker().handle(Promote(run_id=run_id, step="root", lo=SLICE, hi=2 * SLICE))
    assert sorted(m.step for m in sent) == LEAVES[SLICE:2 * SLICE]
    assert all(isinstance(m, Dispatch) and m.after == "root" for m in sent)
