"""The documented import path of durable workflows: the names of `functions.sdk.durable`,
the very same objects.

    from functions.durable import Context, step, workflow

Only these names live here. The SDK's modules are imported by their one path,
`functions.sdk.durable.<module>` (tests/unit/test_sdk_paths.py keeps it so)."""

from functions.sdk.durable.context import Context, Hook
from functions.sdk.durable.durations import seconds
from functions.sdk.durable.errors import ReplayMismatch, StepFailed, Suspend, WorkflowError
from functions.sdk.durable.steps import StepCall, StepFunction, StepInfo, current_step, step
from functions.sdk.durable.workflow import Workflow, advance, registered, workflow
from functions.sdk.failures import RetryableError, TerminalError

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
