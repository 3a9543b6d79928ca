"""Durable workflows written as Python: memoized steps, sleeps of any length, signals.

    from functions.durable import Context, step, workflow

    @step("fetch-user", retries=3, backoff="exponential")
    async def fetch_user(user_id: str) -> dict: ...

    @workflow("send-welcome-email", max_steps=100, execution_timeout="1h")
    async def send_welcome_email(ctx: Context, payload: dict) -> dict:
        user = await fetch_user(payload["userId"])
        await ctx.sleep("3d")
        return {"sent": True}

    app = FunctionApp(secret=...)
    app.workflow(send_welcome_email)     # POST /durable/send-welcome-email
"""

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
