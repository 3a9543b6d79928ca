"""The driver's moves between calls (engine/durable_moves.py): pure, no moto."""

from __future__ import annotations

from dataclasses import replace

from functions.sdk.protocol import JournalEntry, WaitKind
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable import Complete, Continue, Suspend
from orchestrator.engine.durable_moves import (
    HANDOFF_BEFORE,
    IDLE_CALLS,
    LOST_POKE_CHECK,
    TIMER_REACH,
    Look,
    Release,
    idle_calls,
    look_for,
    new_entries,
    over_cap,
    release_of,
    stands,
)
from orchestrator.engine.durable_scopes import JournalView, first_holder
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus

NOW = 1_000.0


def _entry(scope: str, pos: int) -> dict[str, object]:
    return {"scope": scope, "pos": pos, "id": f"i{pos}", "kind": "step", "name": f"s{pos}",
            "status": "ok", "value": None}


def test_a_wait_whose_place_is_in_the_journal_no_longer_stands() -> None:
    view = JournalView([_entry("", 0), _entry("", 1)])
    assert not stands(Waiting(WaitKind.SLEEP, "", 1), view)
    assert stands(Waiting(WaitKind.SLEEP, "", 2), view)
    assert stands(Waiting(WaitKind.SIGNAL, "b/1:0", 1), view)  # another scope
    # A mismatch stands until an operator resumes or resets the run.
    assert stands(Waiting(WaitKind.MISMATCH, "", 1), view)


def test_each_wait_looks_up_what_it_waits_for_and_a_fresh_one_registers_first() -> None:
    def looks(kind: WaitKind, fresh: bool) -> tuple[Look, ...]:
        return look_for(Waiting(kind), fresh)

    assert looks(WaitKind.SIGNAL, True) == looks(WaitKind.SIGNAL, False) == (Look.TAKE_SIGNAL,)
    assert looks(WaitKind.EVENT, True) == (Look.REGISTER_EVENT, Look.FIND_EVENT)
    assert looks(WaitKind.EVENT, False) == (Look.FIND_EVENT,)
    assert looks(WaitKind.HOOK, False) == (Look.CREATE_HOOK,)
    assert looks(WaitKind.CALL, True) == (Look.START_CHILD, Look.CHILD)
    assert looks(WaitKind.CALL, False) == (Look.CHILD,)
    # A spawn's child is started on every look (idempotent): that is its outcome.
    assert looks(WaitKind.SPAWN, False) == (Look.START_CHILD,)
    assert looks(WaitKind.PARALLEL, True) == (Look.OPEN_PARALLEL, Look.PARALLEL)
    assert looks(WaitKind.PARALLEL, False) == (Look.PARALLEL,)
    for kind in (WaitKind.SLEEP, WaitKind.RETRY, WaitKind.NEXT, WaitKind.MISMATCH):
        assert looks(kind, True) == (Look.NOTHING,), kind


def test_the_journal_cap_fails_the_run_past_it_with_advice() -> None:
    assert over_cap(25_000, 25_000) is None
    error = over_cap(25_001, 25_000)
    assert error is not None and error["code"] == "journal_too_large"
    assert "25001" in error["message"] and "ctx.call" in error["message"]


def test_calls_that_record_nothing_and_ask_to_go_on_become_a_retried_fault() -> None:
    idle = 0
    for n in range(1, IDLE_CALLS):
        idle, error = idle_calls(idle, 0, Continue(), "wf")
        assert (idle, error) == (n, None)
    idle, error = idle_calls(idle, 0, Continue(), "wf")
    assert error is not None and error["code"] == "bad_answer" and "wf" in error["message"]
    # Progress, a wait or an end resets the count.
    assert idle_calls(2, 1, Continue(), "wf") == (0, None)
    assert idle_calls(2, 0, Suspend(Waiting(WaitKind.SLEEP)), "wf") == (0, None)
    assert idle_calls(2, 0, Complete(1), "wf") == (0, None)


def test_a_released_run_comes_back_by_timer_by_the_sweeper_or_by_a_poke() -> None:
    near = Waiting(WaitKind.SLEEP, until=NOW + 60)
    assert release_of(near, NOW, redispatch_after=30) == Release(NOW + 60, NOW + 90, timer=True)
    edge = Waiting(WaitKind.SLEEP, until=NOW + TIMER_REACH)
    assert release_of(edge, NOW, redispatch_after=30).timer
    far = Waiting(WaitKind.SLEEP, until=NOW + 86_400)
    assert release_of(far, NOW, redispatch_after=30) == Release(
        NOW + 86_400, NOW + 86_400 - HANDOFF_BEFORE)
    poke = Waiting(WaitKind.SIGNAL)
    assert release_of(poke, NOW, redispatch_after=30) == Release(None, NOW + LOST_POKE_CHECK)
    # A worker out of time sends the next call to the queue at once.
    nxt = Waiting(WaitKind.NEXT, since=NOW)
    assert release_of(nxt, NOW, redispatch_after=30, send=True) == Release(
        NOW, NOW + 30, dispatch=True)


def test_a_checkpoint_sent_twice_is_committed_once_and_a_different_one_is_a_clash() -> None:
    # Checkpoints are the protocol's entries as parsed; the view holds committed docs.
    view = JournalView([JournalEntry(**_entry("", 0)).doc()])
    one, two = JournalEntry(**_entry("", 1)), JournalEntry(**_entry("", 2))
    again = JournalEntry(**_entry("", 0))
    assert new_entries(view, [again, one, one, two]) == ([one, two], None)
    other = JournalEntry(**{**_entry("", 1), "name": "renamed"})
    assert new_entries(view, [one, two, other]) == ([one, two], (other, one.doc()))
    held = JournalEntry(**{**_entry("", 0), "value": 5})
    assert new_entries(view, [held, one]) == ([], (held, again.doc()))
    # The view keeps one entry per place.
    view.add(_entry("", 0))
    assert len(view) == 1 and view.at("", 0) == again.doc()


def test_only_the_first_claim_of_a_root_driver_skips_reading_its_journal() -> None:
    ready = {"at": NOW, "type": "step.ready"}

    def row(step: str, *claims: float) -> StepRecord:
        history = (ready, *({"at": at, "type": "step.started", "attempt": 1} for at in claims))
        return StepRecord(run_id="r", step=step, status=StepStatus.DISPATCHED, backend="b",
                          route="/", started_at=claims[0] if claims else None,
                          attempt_started=claims[-1] if claims else None, history=history)

    assert first_holder(row(DRIVER, NOW))
    # Claimed before (a call that died, a retry, a wait, a resume): entries may be there,
    # even when both claims carry one time (a clock that stands still).
    assert not first_holder(row(DRIVER, NOW, NOW + 1))
    assert not first_holder(row(DRIVER, NOW, NOW))
    assert not first_holder(row(DRIVER))  # not claimed at all
    # A wait rewrites the history (its last wait alone), and the next claim adds to it.
    waited = replace(row(DRIVER, NOW), history=(
        {"at": NOW, "type": "run.waiting", "waits": "signal"},
        {"at": NOW, "type": "step.started", "attempt": 1}))
    assert not first_holder(waited)
    # A branch's driver sees its parent's entries: always read.
    assert not first_holder(row(f"{DRIVER}/0:1", NOW))
