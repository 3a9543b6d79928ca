"""The old import path of `functions.sdk.durable`, and the one the README shows: the same
names, the very same objects.

    from functions.durable import Context, step, workflow

Each old submodule (`functions.durable.call`, `.context`, `.steps`, ...) is likewise the
module of the same name in `functions.sdk.durable` (see their shims)."""

# The old package had these submodules loaded, so bound as its attributes; load them first,
# as it did, so that `workflow` ends up the decorator below and not the module of that name.
import functions.durable.call
import functions.durable.context
import functions.durable.durations
import functions.durable.errors
import functions.durable.parallel
import functions.durable.steps
import functions.durable.stubs
import functions.durable.workflow
from functions.sdk.durable import (
    Context,
    Hook,
    ReplayMismatch,
    RetryableError,
    StepCall,
    StepFailed,
    StepFunction,
    StepInfo,
    Suspend,
    TerminalError,
    Workflow,
    WorkflowError,
    advance,
    current_step,
    registered,
    seconds,
    step,
    workflow,
)

del functions  # bound by the imports above, not a name of this package

__all__ = [
    "Context",
    "Hook",
    "ReplayMismatch",
    "RetryableError",
    "StepCall",
    "StepFailed",
    "StepFunction",
    "StepInfo",
    "Suspend",
    "TerminalError",
    "Workflow",
    "WorkflowError",
    "advance",
    "current_step",
    "registered",
    "seconds",
    "step",
    "workflow",
]
