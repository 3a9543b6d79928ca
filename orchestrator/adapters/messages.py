"""The queue messages: a discriminated union on `op`, validated at the edge (pydantic).

Messages are hints ("look at this"); the rows decide what happens. Each kind carries
only what it names, so a new kind (a durable workflow's wake-up) is one more class here
and one more branch in the worker."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, TypeAdapter

__all__ = ["AdmitRun", "AnyMessage", "BulkPage", "Dispatch", "Message", "Promote", "decode",
           "encode"]


class Dispatch(BaseModel):
    """Look at this step's attempt (not before `due_at`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    op: Literal["step"] = "step"
    run_id: str
    step: str
    attempt: int
    due_at: float | None = None
    # The step's only dependency, which succeeded at `ready_at`: the step is still
    # `blocked` on its row, and the worker that takes this message promotes and claims
    # it in one write (a wide fan-out costs no promotion write per step).
    after: str | None = None
    ready_at: float | None = None
    # A root its run's start left out (engine.plan), ready since `ready_at`: the worker
    # that takes this message creates its row in its claim.
    planned: bool = False
    # No longer read: every claim makes its own start check (Worker.execute). Kept so
    # that a message sent before an upgrade is still understood.
    launched: bool = False


class AdmitRun(BaseModel):
    """A queued run's throttle slot came due: look at whether it may start."""

    # Ignores the placeholder `step` and `attempt` that admit messages used to carry, so
    # one sent before an upgrade is still understood.
    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal["admit"] = "admit"
    run_id: str
    due_at: float | None = None


class Promote(BaseModel):
    """Step `step` succeeded: promote its dependants `lo` to `hi` (their order on its
    row). A wide fan-out is promoted in slices by whichever workers take these, so its
    last dependant is dispatched sooner the more workers there are."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    op: Literal["promote"] = "promote"
    run_id: str
    step: str
    lo: int
    hi: int
    due_at: float | None = None


class BulkPage(BaseModel):
    """Do page `page` of bulk job `job` (services/bulk.py), if the job is there."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    op: Literal["bulk"] = "bulk"
    job: str
    page: int
    due_at: float | None = None

    @property
    def run_id(self) -> str:
        """The name its requests are counted under (adapters/metering.py): no run's."""
        return f"bulk:{self.job}"


AnyMessage = Dispatch | AdmitRun | Promote | BulkPage


def _op(value: Any) -> str:
    # A step dispatch leaves `op` out on the wire (the hot path's messages stay small).
    if isinstance(value, dict):
        return str(value.get("op", "step"))
    return str(getattr(value, "op", "step"))


Message = Annotated[
    Annotated[Dispatch, Tag("step")] | Annotated[AdmitRun, Tag("admit")]
    | Annotated[Promote, Tag("promote")] | Annotated[BulkPage, Tag("bulk")],
    Discriminator(_op),
]
_ADAPTER: TypeAdapter[AnyMessage] = TypeAdapter(Message)


def encode(message: AnyMessage) -> str:
    if isinstance(message, Dispatch):
        return message.model_dump_json(exclude_none=True, exclude_defaults=True)
    return message.model_dump_json(exclude_none=True)


def decode(body: str) -> AnyMessage:
    """Raises pydantic.ValidationError for a body that is not one of ours."""
    return _ADAPTER.validate_json(body)
