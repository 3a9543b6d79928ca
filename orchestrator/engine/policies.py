"""Policies as enums: what a failed step does to its run, what a concurrency group
does with a run that finds it busy, what a throttle does with a run over its rate, and
what a schedule fire does while the previous run is still going. Their values are the
manifest's words, so they read and write as the manifest and the API spell them."""

from __future__ import annotations

from enum import StrEnum

from orchestrator.manifest.triggers import Overlap

__all__ = ["GroupPolicy", "OnFailure", "Overlap", "ThrottlePolicy"]


class OnFailure(StrEnum):
    HALT = "halt"  # skip every step that has not started; in-flight ones land
    CONTINUE_INDEPENDENT = "continue-independent"  # skip only the failed branch


class GroupPolicy(StrEnum):
    QUEUE = "queue"  # wait in arrival order
    SKIP = "skip"  # refuse the run (status skipped)
    CANCEL_RUNNING = "cancel-running"  # cancel the holder and older waiters; go next


class ThrottlePolicy(StrEnum):
    QUEUE = "queue"  # wait for the next slot
    DROP = "drop"  # refuse a run that would have to wait
