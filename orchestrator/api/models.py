"""Request bodies of the HTTP API, as pydantic models (the OpenAPI document is built
from them too). Unknown fields are refused, so a misspelt field is a 422 naming it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AnswerApproval",
    "BulkAction",
    "CancelRun",
    "CheckRuns",
    "CreateHook",
    "EmitEvent",
    "MigrateRuns",
    "PromoteVersion",
    "PutScript",
    "PutStateCell",
    "RegisterVersion",
    "RerunRun",
    "ResetRun",
    "ResumeRun",
    "RetireVersion",
    "RunEvent",
    "RunExport",
    "StartRun",
    "SubmitScript",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartRun(_Body):
    workflow: str = Field(min_length=1, max_length=128)
    input: Any = None
    run_id: str | None = Field(default=None, min_length=1, max_length=200)
    parent_run_id: str | None = Field(default=None, min_length=1, max_length=200,
                                      description="Link the run to a parent run (listed in"
                                      " its children; cancelling the parent cancels it).")
    priority: int | None = Field(default=None, ge=0, le=100, strict=True,
                                 description="Its place among the runs waiting for the"
                                 " same concurrency limit: higher goes first, and waiting"
                                 " ages a run (README, Flow control). Default: the"
                                 " workflow's `priority`.")


class CancelRun(_Body):
    reason: str = Field(default="cancelled by request", max_length=1000)


class AnswerApproval(_Body):
    approved: bool = Field(strict=True,
                           description="true approves; false rejects (the run is cancelled).")
    comment: str | None = Field(default=None, max_length=2000,
                                description="Kept with the answer (and in a rejection's"
                                " kill reason).")


class PutStateCell(_Body):
    value: Any = Field(description="The cell's new value (any JSON, at most 256 KiB).")
    ttl: float | None = Field(default=None, gt=0, le=100 * 365 * 86400,
                              description="Seconds until the cell expires (none: it never"
                              " does; at most 100 years).")


class ResumeRun(_Body):
    """No fields: `{}` or an empty body."""


class ResetRun(_Body):
    to: int = Field(ge=0, description="The position in the workflow's top scope from which"
                    " the journal is forgotten: operations there and after run again.")


class BulkAction(_Body):
    """Cancel, rerun or resume many runs (services/bulk.py): name them by `run_ids`, or
    by a search (`q`, as GET /runs takes it) and/or `workflow` and `status`."""

    action: Literal["cancel", "rerun", "resume"]
    run_ids: list[str] | None = Field(default=None, min_length=1, max_length=10_000)
    q: str | None = Field(default=None, max_length=2000)
    workflow: str | None = Field(default=None, min_length=1, max_length=128)
    status: str | None = Field(default=None, min_length=1, max_length=32)
    reason: str | None = Field(default=None, max_length=1000)
    input: Any = None
    dry_run: bool = False
    expected: int | None = Field(default=None, ge=0, description="How many runs a dry run"
                                 " counted: shown as the job's progress's end.")
    job_id: str | None = Field(default=None, min_length=1, max_length=100,
                               pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


class RerunRun(_Body):
    """Leave out `input` to keep the old run's input; give it (even null) to replace it."""

    input: Any = None
    run_id: str | None = Field(default=None, min_length=1, max_length=200)


# A name's rule (services/values.py) holds for its NFC form, at most 128 characters; the
# model only bounds what is read (a decomposed name is longer).
NAME_CHARS = 512


class EmitEvent(_Body):
    name: str = Field(min_length=1, max_length=NAME_CHARS)
    key: str | None = Field(default=None, max_length=512)
    id: str | None = Field(default=None, min_length=1, max_length=200)
    data: Any = None


class CreateHook(_Body):
    """A hook for a durable run, created from outside its workflow."""

    run_id: str = Field(min_length=1, max_length=200)
    signal: str = Field(min_length=1, max_length=NAME_CHARS,
                        description="The signal the hook delivers to the run.")
    metadata: Any = Field(default=None, description="Merged over the payload it is executed"
                          " with (a JSON object).")
    ttl: float | None = Field(default=None, gt=0, le=365 * 24 * 3600,
                              description="Seconds until it expires (default 7 days).")
    token: str | None = Field(default=None, min_length=32, max_length=200,
                              description="A token of your own (at least 32 characters);"
                              " by default one of 256 random bits is made.")


class RunEvent(_Body):
    """A custom event of a run, kept beside its transitions."""

    event_type: str = Field(min_length=1, max_length=128)
    payload: Any = None


class ScriptThrottle(_Body):
    limit: int = Field(ge=1, le=1_000_000, description="Runs per period.")
    period: str = Field(min_length=1, max_length=32, description="A duration: 1m, 30s, 1h.")
    key: str = Field(default="", max_length=512, description="The budget's key (one each).")


class SubmitScript(_Body):
    # A workflow's name, not only dots.
    name: str = Field(min_length=1, max_length=128,
                      pattern=r"^[A-Za-z0-9._~\-]*[A-Za-z0-9_~\-][A-Za-z0-9._~\-]*$",
                      description="The script's name (its file's, less `.sh`).")
    text: str = Field(min_length=1, max_length=256 * 1024, description="The bash text.")
    input: Any = Field(default=None, description="The run's input (the script reads it as"
                       " `{\"payload\": input}` at $ORCHESTRATOR_INPUT_FILE).")
    throttle: ScriptThrottle | None = Field(default=None, description="Start no faster.")


class PutScript(_Body):
    text: str = Field(min_length=1, max_length=256 * 1024, description="The bash text.")
    on: list[str] = Field(default_factory=list, max_length=20,
                          description="Event names whose events each start a run.")
    schedule: dict[str, Any] | None = Field(
        default=None, description="`{every: D}` or `{cron: C, timezone?: TZ}`: fire by"
        " itself; a tick that finds the previous run still going is skipped.")


class RegisterVersion(_Body):
    url: str = Field(min_length=1, max_length=2048,
                     description="Where this version of the backend's code is served.")
    version: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Its label (default: a hash of the OpenAPI document it serves).")


class PromoteVersion(_Body):
    pin_incompatible: bool = Field(
        default=False, description="Make it current even if some open runs diverge: the"
        " compatible ones move to it, the others stay pinned to their version.")


class RetireVersion(_Body):
    migrate: bool = Field(default=False, description="Move the compatible runs pinned to"
                          " it to the current version first.")
    cancel: bool = Field(default=False, description="Cancel the runs pinned to it first.")


class CheckRuns(_Body):
    version: str | None = Field(default=None, min_length=1, max_length=64,
                                description="A live version of the backend to check against.")
    functions_url: str | None = Field(
        default=None, min_length=1, max_length=2048,
        description="Or code not deployed yet: a functions app's base URL.")
    backend: str | None = Field(default=None, min_length=1, max_length=128,
                                description="The backend (default: the one with versions).")
    workflow: str | None = Field(default=None, min_length=1, max_length=128,
                                 description="Only the runs of this workflow.")
    script: str | None = Field(
        default=None, min_length=1, max_length=256 * 1024,
        description="Or a script workflow's new text: its open runs (workflow, required)"
        " checked against it (each stays on the text it started on).")


class MigrateRuns(_Body):
    to: str = Field(min_length=1, max_length=64, description="The live version to move to.")
    backend: str | None = Field(default=None, min_length=1, max_length=128)
    workflow: str | None = Field(default=None, min_length=1, max_length=128)


# The `format` of a run's export (GET /runs/{id}/export, POST /runs/import): a new
# version is a new string, and an import refuses any it does not know.
EXPORT_FORMAT = "orchestrator.run-export/1"


class RunExport(_Body):
    """A run as its stack stores it, to import into another (`orchestrator runs pull`):
    its rows as DynamoDB JSON (binary values base64), the blobs they reference inlined."""

    format: Literal["orchestrator.run-export/1"] = Field(
        description="The document's kind and version.")
    run_id: str = Field(min_length=1, max_length=200)
    exported_at: float = Field(description="When it was read (Unix seconds).")
    run: dict[str, Any] = Field(description="The run row (DynamoDB JSON).")
    rows: list[dict[str, Any]] = Field(
        description="Every item of the run's partition of the steps table: step rows, a"
        " durable run's driver, journal entries, signals, run events (DynamoDB JSON).")
    blobs: dict[str, str] = Field(default_factory=dict,
                                  description="The values kept in the blob store that the"
                                  " rows reference, by key.")
    source: str | None = Field(default=None, max_length=2000,
                               description="Where it was exported from (an import marks"
                               " the run `imported` from it).")
