"""Issue 37 §4, admission against a model: hypothesis drives random sequences of
triggers (POST /runs with or without an Idempotency-Key, events, signed webhook
deliveries, each id drawn from a small set so that redeliveries happen), cancels of
known runs, clock jumps and `run_until_idle` into a WorkflowEnv over real HTTP, and a
reference model written here predicts every answer and every run's status; they are
compared after each step.

The three workflows, one admission rule each:

- `m-plain` (POST /runs): no rule; an Idempotency-Key seen before answers its run;
- `m-debounced` (event `m.go`): one run per burst, period 10.5 s, maxWait 60.25 s;
  an event id seen before answers the run it was taken into;
- `m-throttled` (webhook `m-throttled-hook`): one start per 20 s, queued, never
  refunded; a delivery id seen before answers its run.

Times are integers of seconds from a round start and the periods are not, so no
wake-up ever falls on the edge of a jump (the model need not guess the store's
millisecond rounding). The invariants the issue names are checked each step: a repeated
id never makes a second run; a burst makes one run; a cancelled run never calls its
step; throttled starts are at least 20 s apart."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from infra.emulator import Emulator
from tests.support.matrix import (
    Answer,
    Calls,
    ManifestEnv,
    http_api,
    make_app,
    post_event,
    post_run,
    post_webhook,
    webhook_section,
)

PERIOD = 10.5  # the debounce's quiet period
MAX_WAIT = 60.25
INTERVAL = 20.0  # the throttle's: limit 1 per 20 s
# A wake-up this close to the clock has come (WorkflowEnv's own slack).
SLACK = 0.001

WORK = {"steps": {"a": {"backend": "app", "route": "/work"}}}
WORKFLOWS = {
    "m-plain": copy.deepcopy(WORK),
    "m-debounced": {"on": {"event": "m.go"},
                    "debounce": {"period": f"{int(PERIOD * 1000)}ms",
                                 "maxWait": f"{int(MAX_WAIT * 1000)}ms"}, **copy.deepcopy(WORK)},
    "m-throttled": {"throttle": {"limit": 1, "period": "20s"}, **copy.deepcopy(WORK)},
}  # copies: a value shared between workflows would be dumped as a YAML anchor (refused)


@dataclass
class Run:
    """The model's view of one run."""

    workflow: str
    status: str  # running (created, not yet pumped) | queued | success | killed
    admit_at: float | None = None


class Model:
    """Admission as the README states it, for the three workflows above."""

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.keys: dict[str, str] = {}  # Idempotency-Key -> run id
        self.events: dict[str, str] = {}  # event id -> run id
        self.deliveries: dict[str, str] = {}  # delivery id -> run id
        self.burst: str | None = None  # the debounced run still queued
        self.burst_first = 0.0
        self.tat = float("-inf")  # the throttle's next free slot

    def api(self, key: str | None) -> tuple[str | None, str]:
        if key is not None and key in self.keys:
            return self.keys[key], "duplicate"
        return None, "created"

    def event(self, eid: str, now: float) -> tuple[str | None, str]:
        if eid in self.events:
            return self.events[eid], "duplicate"
        if self.burst is not None:
            run = self.runs[self.burst]
            run.admit_at = min(now + PERIOD, self.burst_first + MAX_WAIT)
            return self.burst, "debounced"
        return None, "queued"

    def new_burst(self, run_id: str, now: float) -> None:
        self.burst, self.burst_first = run_id, now
        self.runs[run_id] = Run("m-debounced", "queued", now + PERIOD)

    def webhook(self, did: str, now: float) -> tuple[str | None, str, float]:
        if did in self.deliveries:
            return self.deliveries[did], "duplicate", 0.0
        slot = max(now, self.tat)
        self.tat = slot + INTERVAL
        return None, ("created" if slot <= now + 0.05 else "queued"), slot

    def cancel(self, run_id: str) -> bool:
        run = self.runs[run_id]
        if run.status in ("success", "killed"):
            return False
        run.status = "killed"
        if self.burst == run_id:
            self.burst = None
        return True

    def pumped(self, now: float) -> None:
        """What a pump (advance, run_until_idle) that left the clock at `now` did."""
        for run_id, run in self.runs.items():
            if run.status == "running" or (
                    run.status == "queued" and run.admit_at is not None
                    and run.admit_at <= now + SLACK):
                run.status = "success"
                if self.burst == run_id:
                    self.burst = None


SALTS = itertools.count()


class Admission(RuleBasedStateMachine):
    env: ClassVar[ManifestEnv]
    c: ClassVar[httpx.Client]
    calls: ClassVar[Calls]

    def __init__(self) -> None:
        super().__init__()
        # Every example starts on a quiet system: what the one before left has ended,
        # and the clock is a day on (on a whole second), past every burst and slot.
        self.env.run_until_idle()
        self.env.advance(86400 - self.env.now % 1)
        self.salt = f"x{next(SALTS)}"
        self.model = Model()
        self.throttled_starts: list[float] = []

    # ---- rules ---------------------------------------------------------------------

    @rule(key=st.sampled_from([None, "k1", "k2", "k3"]))
    def trigger_api(self, key: str | None) -> None:
        full = None if key is None else f"{self.salt}-{key}"
        expect_id, outcome = self.model.api(full)
        got = post_run(self.c, "m-plain", {"key": key}, key=full)
        self._check(got, expect_id, outcome)
        if outcome == "created":
            self.model.runs[got.run_id] = Run("m-plain", "running")
            if full is not None:
                self.model.keys[full] = got.run_id

    @rule(eid=st.sampled_from(["e1", "e2", "e3", "e4"]))
    def emit_event(self, eid: str) -> None:
        full = f"{self.salt}-{eid}"
        now = self.env.now
        expect_id, outcome = self.model.event(full, now)
        got = post_event(self.c, "m.go", {"eid": eid}, full)
        self._check(got, expect_id, outcome)
        if outcome == "queued":
            self.model.new_burst(got.run_id, now)
        self.model.events.setdefault(full, got.run_id)

    @rule(did=st.sampled_from(["d1", "d2", "d3"]))
    def deliver_webhook(self, did: str) -> None:
        full = f"msg_{self.salt}_{did}"
        now = self.env.now
        expect_id, outcome, slot = self.model.webhook(full, now)
        got = post_webhook(self.c, self.env, "m-throttled-hook", {"n": 1}, full)
        self._check(got, expect_id, outcome)
        if outcome != "duplicate":
            self.model.runs[got.run_id] = Run(
                "m-throttled", "running" if outcome == "created" else "queued", slot)
            self.model.deliveries[full] = got.run_id

    @precondition(lambda self: bool(self.model.runs))
    @rule(pick=st.integers(min_value=0, max_value=1000))
    def cancel(self, pick: int) -> None:
        ids = sorted(self.model.runs)
        run_id = ids[pick % len(ids)]
        expected = self.model.cancel(run_id)
        assert self.env.rt.runs.cancel(run_id, "model") is expected, run_id

    @rule(seconds=st.sampled_from([1, 3, 7, 15, 40]))
    def advance(self, seconds: int) -> None:
        self.env.advance(seconds)
        self.model.pumped(self.env.now)

    @rule()
    def run_until_idle(self) -> None:
        self.env.run_until_idle()
        self.model.pumped(self.env.now)
        assert not [r for r in self.model.runs.values() if r.status in ("queued", "running")]

    # ---- comparing -----------------------------------------------------------------

    def _check(self, got: Answer, expect_id: str | None, outcome: str) -> None:
        assert got.outcome == outcome, (got, outcome)
        if expect_id is not None:
            assert got.run_id == expect_id, (got, expect_id)
        else:  # a new run: never one the model knows
            assert got.run_id not in self.model.runs, got

    @invariant()
    def statuses_match(self) -> None:
        for run_id, run in self.model.runs.items():
            record = self.env.rt.runs.get(run_id)
            assert record.status.value == run.status, (run_id, record.status, run)
            calls = self.calls.of(run_id)
            if run.status == "killed":
                assert calls == [], f"{run_id} was cancelled yet called its step"
            elif run.status == "success":
                assert calls == ["a"], (run_id, calls)  # one run, one call, per trigger
            if run.workflow == "m-throttled" and record.started_at is not None \
                    and record.started_at not in self.throttled_starts:
                self.throttled_starts.append(record.started_at)
        starts = sorted(self.throttled_starts)
        assert all(b - a >= INTERVAL - SLACK for a, b in itertools.pairwise(starts)), starts


@pytest.fixture(scope="module")
def machine(emulator: Emulator) -> Iterator[type[Admission]]:
    calls = Calls()
    env = ManifestEnv(make_app(calls), emulator=emulator, dags=WORKFLOWS,
                      extra=webhook_section(["m-throttled"]), start=1_800_000_000.0)
    with env, http_api(env) as c:
        Admission.env, Admission.c, Admission.calls = env, c, calls
        yield Admission


@pytest.mark.timeout(600)  # passing takes seconds; shrinking a failure takes minutes
def test_admission_matches_the_model(machine: type[Admission]) -> None:
    run_state_machine_as_test(machine, settings=settings(
        max_examples=15, stateful_step_count=15, deadline=None, derandomize=True))


@pytest.mark.slow
@pytest.mark.timeout(900)  # some five minutes to pass; shrinking a failure takes longer
def test_admission_matches_the_model_at_length(machine: type[Admission]) -> None:
    run_state_machine_as_test(machine, settings=settings(
        max_examples=100, stateful_step_count=40, deadline=None, derandomize=True))
