"""Flow control: concurrency groups (queue, skip, cancel-running) and throttles (queue,
drop), enforced through conditional writes, including across worker processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.admission import throttle_slot
from tests.support.harness import Harness, steps_of
from tests.support.polling import until
from tests.support.testfns import Recorder

ROOT = Path(__file__).resolve().parents[2]

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  deploy:
    concurrency: { group: "deploy-${{ input.tenant }}" }
    steps:
      hold: { backend: fn, route: /hold, payload: { latch: true } }
  keyed:
    concurrency: { group: keyed, key: "${{ input.tenant }}" }
    steps:
      hold: { backend: fn, route: /hold, payload: { seconds: 0.4 } }
  single:
    concurrency: { group: single, key: "${{ input.tenant }}", policy: skip }
    steps:
      hold: { backend: fn, route: /hold, payload: { latch: true } }
  newest:
    concurrency: { group: newest, key: "${{ input.tenant }}", policy: cancel-running }
    steps:
      hold:  { backend: fn, route: /hold, payload: { latch: true } }
      after: { backend: fn, route: /echo, dependsOn: [hold] }
  latest:
    # One at a time, the newest wins, whichever tenant it is (the keyless limit takes
    # turns by the tenant's).
    concurrency:
      - { limit: 1, policy: cancel-running }
      - { limit: 5, key: "${{ input.tenant }}" }
    steps:
      hold:  { backend: fn, route: /hold, payload: { latch: true } }
      after: { backend: fn, route: /echo, dependsOn: [hold] }
  enrich:
    throttle: { limit: 4, period: 2s, key: "crm-${{ input.tenant }}" }
    steps:
      call: { backend: fn, route: /echo }
  bursty:
    throttle: { limit: 2, period: 2s, burst: 3 }
    steps:
      call: { backend: fn, route: /echo }
  strict:
    throttle: { limit: 1, period: 1m, policy: drop }
    steps:
      call: { backend: fn, route: /echo }
"""


def start_all(h: Harness, workflow: str, inputs: list[Any]) -> list[str]:
    """Start runs one after the other (arrival order is the list order)."""
    return [h.rt.runs.start(workflow, i)[0].run_id for i in inputs]


def no_overlap(intervals: list[tuple[float, float, str]]) -> bool:
    spans = sorted(intervals)
    return all(a[1] <= b[0] + 0.01 for a, b in itertools.pairwise(spans))


def test_group_admits_one_run_per_key_in_arrival_order(
    harness_factory: Any, recorder: Recorder
) -> None:
    # Each run holds its call until the test opens it: a sleep could end before a loaded
    # machine has looked at the queue.
    h = harness_factory(MANIFEST.replace("{ seconds: 0.4 } }\n  single:",
                                         "{ latch: true } }\n  single:"))
    h.start_workers(threads=8)
    h.start_sweeper()
    tenant = f"acme-{time.time_ns()}"
    other = f"globex-{time.time_ns()}"
    ids = start_all(h, "keyed", [{"tenant": tenant}] * 4)
    rival = h.rt.runs.start("keyed", {"tenant": other})[0].run_id
    assert [h.rt.runs.get(r).status.value for r in ids[1:]] == ["queued"] * 3
    # The other tenant's run does not wait behind the first one's queue.
    until("the other tenant's call", lambda: recorder.for_step(rival, "hold"))
    for r in [*ids, rival]:
        recorder.latch(r).set()
    views = [h.wait(r, timeout=60) for r in [*ids, rival]]
    assert all(v["status"] == "success" for v in views)
    held = recorder.held[tenant]
    assert len(held) == 4 and no_overlap(held)
    assert [run for _, _, run in sorted(held)] == ids  # arrival order
    # The other tenant did not wait behind the first one's queue.
    assert recorder.held[other][0][0] < sorted(held)[-1][0]
    first = views[1]
    assert first["admission"]["group"] == "keyed" and first["admission"]["key"] == tenant
    events = [e["type"] for e in h.rt.runs.history(ids[1])]
    assert events[:2] == ["run.queued", "run.started"]


def test_group_name_from_input_and_skip_policy(harness_factory: Any, recorder: Recorder) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    tenant = f"t{time.time_ns()}"
    ids = start_all(h, "single", [{"tenant": tenant}] * 3)
    views = [h.wait(r, timeout=30) for r in ids[1:]]  # skipped while the first holds
    recorder.latch(ids[0]).set()
    views.insert(0, h.wait(ids[0], timeout=30))
    assert [v["status"] for v in views] == ["success", "skipped", "skipped"]
    assert views[1]["error"]["code"] == "concurrency_busy"
    assert ids[0] in views[1]["error"]["message"]
    assert steps_of(views[1])["hold"]["attempts"] == 0
    assert len(recorder.held[tenant]) == 1
    later = h.rt.runs.start("single", {"tenant": tenant})[0].run_id
    recorder.latch(later).set()
    assert h.wait(later)["status"] == "success"  # the group is free again
    # deploy's group is computed from the input: two tenants run side by side.
    a, b = f"a{time.time_ns()}", f"b{time.time_ns()}"
    both = start_all(h, "deploy", [{"tenant": a}, {"tenant": b}])
    assert [h.rt.runs.get(r).status.value for r in both] == ["running", "running"]
    for r in both:
        recorder.latch(r).set()
        assert h.wait(r)["status"] == "success"


def test_cancel_running_replaces_the_holder(harness_factory: Any, recorder: Recorder) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    tenant = f"t{time.time_ns()}"
    old = h.rt.runs.start("newest", {"tenant": tenant})[0].run_id
    deadline = time.monotonic() + 10
    while not recorder.for_step(old, "hold"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    queued = h.rt.runs.start("newest", {"tenant": tenant})[0].run_id
    newest = h.rt.runs.start("newest", {"tenant": tenant})[0].run_id
    for r in (old, queued, newest):  # the old one's call held until both had arrived
        recorder.latch(r).set()
    views = {r: h.wait(r, timeout=30) for r in (old, queued, newest)}
    assert views[old]["status"] == "killed"
    assert views[old]["kill_reason"] == f"replaced by run {queued}"
    assert steps_of(views[old])["hold"]["status"] == "success"  # in flight: it landed
    assert steps_of(views[old])["after"]["status"] == "skipped"
    assert views[queued]["status"] == "killed"  # replaced while it waited
    assert views[newest]["status"] == "success"
    holds = sorted(recorder.held[tenant])
    assert [run for _, _, run in holds] == [old, newest] and no_overlap(holds)


def test_cancel_running_replaces_the_runs_waiting_under_other_turns_keys(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    stamp = time.time_ns()
    old = h.rt.runs.start("latest", {"tenant": f"x{stamp}"})[0].run_id
    deadline = time.monotonic() + 10
    while not recorder.for_step(old, "hold"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # Each replaces the holder, still in its call; the second waits under its tenant's
    # key, the third under another's: the third replaces it too.
    queued = h.rt.runs.start("latest", {"tenant": f"y{stamp}"})[0].run_id
    newest = h.rt.runs.start("latest", {"tenant": f"z{stamp}"})[0].run_id
    for r in (old, queued, newest):  # the old one's call held until both had arrived
        recorder.latch(r).set()
    views = {r: h.wait(r, timeout=30) for r in (old, queued, newest)}
    assert views[old]["status"] == "killed"
    assert views[queued]["status"] == "killed", views[queued]
    assert views[queued]["kill_reason"] == f"replaced by run {newest}"
    assert views[queued]["started_at"] is None
    assert views[newest]["status"] == "success"


def test_cancelling_a_queued_run_keeps_its_reason(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)  # no workers: the first run holds the group
    tenant = f"t{time.time_ns()}"
    holder, waiting = start_all(h, "keyed", [{"tenant": tenant}] * 2)
    assert h.rt.runs.get(waiting).status.value == "queued"
    view = h.rt.runs.kill(waiting, "not needed any more")
    assert view["status"] == "killed"
    assert view["kill_reason"] == "not needed any more"
    assert view["error"] == {"code": "killed", "reason": "not needed any more",
                             "message": "cancelled: not needed any more"}
    (entry,) = [e for e in h.rt.runs.history(waiting) if e["type"] == "run.killed"]
    assert entry["reason"] == "not needed any more"
    assert h.rt.runs.get(holder).status.value == "running"


def test_throttle_spaces_runs_evenly_per_key(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    h.start_sweeper()
    ids = start_all(h, "enrich", [{"tenant": "acme"}] * 5)
    other = h.rt.runs.start("enrich", {"tenant": "globex"})[0].run_id
    views = [h.wait(r, timeout=30) for r in ids]
    assert all(v["status"] == "success" for v in views)
    # The slots are exactly period / limit = 0.5 s apart; no run starts before its slot
    # (the first one has none: it started on arrival), nor long after it.
    slots = [v["admission"]["admit_at"] for v in views]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(slots)]
    # A run that arrived before the slot after the last one waits for exactly that slot;
    # one that arrived later (a loaded machine, slow to start five runs) takes a slot
    # at its arrival: never closer than 0.5 s either way.
    created = [v["created_at"] for v in views]
    queued = [created[i + 1] < slots[i] + 0.5 - 0.05 for i in range(4)]
    assert all(g >= 0.5 for g in gaps), gaps
    assert all(g == 0.5 for g, q in zip(gaps, queued, strict=True) if q), (gaps, queued)
    assert any(queued), "no run queued behind the throttle: nothing was tested"
    # Each run starts at its slot or later, within a tolerance for a loaded machine;
    # runs whose slots are closer than that tolerance may start in either order, so
    # their start order is not asserted (their slots' order is, above).
    lateness = [v["started_at"] - slot for v, slot in zip(views, slots, strict=True)]
    assert all(-0.06 <= late < 1.5 for late in lateness), lateness
    assert views[0]["admission"]["throttle_key"] == "crm-acme"
    # globex has its own budget: it started at once, not after acme's queue.
    assert h.wait(other)["started_at"] - h.rt.runs.get(other).created_at < 0.4


def test_throttle_burst_and_drop(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    ids = start_all(h, "bursty", [None] * 4)
    views = [h.wait(r, timeout=30) for r in ids]
    delays = [v["started_at"] - h.rt.runs.get(v["run_id"]).created_at for v in views]
    # The 4th waits for the budget: one every period / limit = 1 s after the first.
    first = h.rt.runs.get(ids[0]).created_at
    slot = views[3]["admission"]["admit_at"]
    assert slot is not None and 0.9 <= slot - first <= 1.05, slot - first
    # A burst of 3 starts together: none waits for a slot (the 4th's is the first to
    # wait for). Not a fixed bound on their delays: a loaded machine took 0.42 s.
    assert all(v["started_at"] < slot for v in views[:3]), (delays, slot - first)
    assert views[3]["started_at"] >= slot - 0.06
    dropped = start_all(h, "strict", [None] * 3)
    statuses = [h.wait(r)["status"] for r in dropped]
    assert statuses == ["success", "skipped", "skipped"]
    assert h.rt.runs.get(dropped[1]).error["code"] == "throttled"


def test_throttle_slot_math() -> None:
    # limit 6 per minute: one every 10 s; burst 1 means no two at once.
    assert throttle_slot(0.0, 100.0, limit=6, period=60, burst=1) == (100.0, 110.0)
    assert throttle_slot(110.0, 100.0, limit=6, period=60, burst=1) == (110.0, 120.0)
    # burst 3: up to three start at the same moment after a quiet spell.
    tat, starts = 0.0, []
    for _ in range(4):
        start, tat = throttle_slot(tat, 100.0, limit=6, period=60, burst=3)
        starts.append(start)
    assert starts == [100.0, 100.0, 100.0, 110.0]


@pytest.mark.slow
def test_group_under_three_worker_processes_never_admits_two_runs_of_a_key(
    harness_factory: Any, recorder: Recorder, emulator: Any, testfns: str, tmp_path: Path
) -> None:
    h = harness_factory(MANIFEST)
    manifest = tmp_path / "flow.yml"
    manifest.write_text(MANIFEST)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": emulator.url,
        "ORCH_PREFIX": h.rt.settings.prefix,
        "ORCH_SWEEP_INTERVAL": "0.5",
        "FN": testfns,
        "PYTHONPATH": str(ROOT),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "orchestrator", cmd, "--manifest", str(manifest)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        for cmd in ("worker", "worker", "worker", "sweeper")
    ]
    try:
        tenants = [f"p{i}-{time.time_ns()}" for i in range(2)]
        inputs = [{"tenant": t} for t in tenants for _ in range(4)]
        # Arrivals race from 8 threads (as from several API processes).
        with ThreadPoolExecutor(max_workers=8) as pool:
            ids = list(pool.map(lambda i: h.rt.runs.start("keyed", i)[0].run_id, inputs))
        views = [h.wait(r, timeout=90) for r in ids]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)
    assert all(v["status"] == "success" for v in views), [v["status"] for v in views]
    for t in tenants:
        assert len(recorder.held[t]) == 4
        assert no_overlap(recorder.held[t]), recorder.held[t]


def test_a_sweep_racing_a_queued_runs_arrival_takes_no_second_slot(
    harness_factory: Any,
) -> None:
    # A sweep (here the full one, which sees every running and queued run) comes while
    # a throttled run's start is between taking its slot and recording it: the sweep
    # leaves a run that young to its start, so no slot is taken twice and wasted.
    from orchestrator.adapters.aws import make_clients
    from orchestrator.runtime import Runtime

    h = harness_factory(MANIFEST)
    other = Runtime.build(h.rt.settings, h.rt.manifest, clients=make_clients(h.rt.settings))
    first = h.rt.runs.start("enrich", {"tenant": "race"})[0].run_id  # starts on arrival
    swept: list[Any] = []

    def sweep_once(params: dict[str, Any], **_: Any) -> None:
        # right before the start records its slot (it has taken it already)
        if not swept and "admit_at = :at" in params.get("UpdateExpression", ""):
            swept.append(other.sweeper().sweep())

    h.rt.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.UpdateItem",
                                               sweep_once)
    second = h.rt.runs.start("enrich", {"tenant": "race"})[0].run_id
    third = h.rt.runs.start("enrich", {"tenant": "race"})[0].run_id
    assert swept and swept[0].queued >= 1  # the sweep saw the queued run
    runs = [h.rt.runs.get(r) for r in (first, second, third)]
    slots = [r.admit_at for r in runs]
    assert None not in slots
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(slots)]  # type: ignore[operator]
    # Each run that arrived before the slot after the one before waits for exactly that
    # slot: none taken twice and wasted (a loaded machine may start one so late that its
    # slot is its arrival: never closer than 0.5 s either way).
    queued = [runs[i + 1].created_at < slots[i] + 0.5 - 0.05  # type: ignore[operator]
              for i in range(2)]
    assert all(g >= 0.5 for g in gaps), (gaps, queued)
    assert all(g == 0.5 for g, q in zip(gaps, queued, strict=True) if q), (gaps, queued)


def sweep_with_queues(h: Harness, per_group: int) -> tuple[Any, Counter[str]]:
    """Three groups busy, `per_group` runs in each (the first holds it, no worker runs),
    then one sweep pass over every wake and every active run, once all have settled:
    (its report, its DynamoDB requests); admission examined each group once."""
    tenants = [f"t{i}-{time.time_ns()}" for i in range(3)]
    ids = start_all(h, "keyed", [{"tenant": t} for t in tenants for _ in range(per_group)])
    queued = [r for r in ids if h.rt.runs.get(r).status.value == "queued"]
    assert len(queued) == 3 * (per_group - 1)
    sweeper = h.rt.sweeper(clock=lambda: time.time() + 60)
    examined: list[str] = []
    arrive = sweeper.on_queued
    assert arrive is not None

    def counted(run: Any) -> object:
        examined.append(run.gate.key)
        return arrive(run)

    sweeper.on_queued = counted
    requests: Counter[str] = Counter()
    h.rt.clients.dynamodb.meta.events.register(
        "before-call.dynamodb", lambda model, **_: requests.update([model.name]))
    # Every wake from the start, and the full sweep (its turn comes on a fresh prefix):
    # each waiting run is seen twice, in one of four shards and in the full sweep.
    report = sweeper.sweep(since=0)
    asked = Counter(requests)  # what the pass asked, before the checks below ask more
    # Nothing moved: every holder is still running, every other run still waits.
    assert [h.rt.runs.get(r).status.value for r in queued] == ["queued"] * len(queued)
    assert sorted(examined) == sorted(tenants)  # one per group, not one per waiting run
    return report, asked


def test_a_sweep_examines_each_busy_group_once_however_many_runs_wait_in_it(
    harness_factory: Any,
) -> None:
    _, few = sweep_with_queues(harness_factory(MANIFEST), 2)
    long, many = sweep_with_queues(harness_factory(MANIFEST), 9)
    assert long.queued == 2 * 3 * 8
    assert long.queued_same_group == long.queued - 3
    # The pass's requests grow with the groups, not with the runs waiting in them: the
    # same for 2 runs a group as for 9, but for the runs' reads (a request for each
    # wake shard that has any, and one for the full sweep: 100 runs a request; and a
    # group's two: its holders, and the first runs waiting).
    assert many.pop("BatchGetItem") <= 4 + 1 + 2 * 3
    few.pop("BatchGetItem")
    # Every other waiting run the pass sees costs a write and a read: its place in line
    # written again and its key's turn read (a start that died before writing them).
    extra = 3 * (9 - 2)
    assert many - few == Counter({"PutItem": extra, "GetItem": extra}), (many, few)
    assert few - many == Counter()
