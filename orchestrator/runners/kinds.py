"""Which runner an attempt goes to: its step's kind."""

from __future__ import annotations

from enum import StrEnum

from orchestrator.engine.durable_scopes import is_driver
from orchestrator.runners.base import Attempt

__all__ = ["StepKind", "kind_of"]


class StepKind(StrEnum):
    # A YAML step that calls its route once per attempt (with its `if:` and `lock:`).
    CALL = "call"
    # A YAML step that is a gate (`approval:`).
    APPROVAL = "approval"
    # A YAML step that calls its route once per item (`fanOut:`).
    FAN_OUT = "fan_out"
    # A durable run's driver row (its top scope, or a parallel branch's).
    DURABLE = "durable"


def kind_of(attempt: Attempt) -> StepKind:
    """The kind of the attempt's step. An attempt that cannot be called as its kind
    says (its run is gone, its backend is unknown) goes to the call runner, which
    records why."""
    row, ctx, backend = attempt.row, attempt.ctx, attempt.backend
    if ctx is None:
        return StepKind.CALL
    if is_driver(row.step):
        return StepKind.DURABLE if backend is not None else StepKind.CALL
    spec = attempt.spec
    if spec is not None and spec.approval is not None:
        return StepKind.APPROVAL
    if spec is not None and spec.fan_out is not None and backend is not None:
        return StepKind.FAN_OUT
    return StepKind.CALL
