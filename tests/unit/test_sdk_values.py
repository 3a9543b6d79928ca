"""The SDK holds a workflow to the orchestrator's rule of names and cap on values where
the workflow declares the operation (issue 22 §6): driven directly, no HTTP.

Properties, for every SDK call that names a signal or an event or sends a value:
- a name is taken (in its NFC form) exactly when it follows the rule, as the oracle here
  states it from `str.isalnum`; otherwise the call raises WorkflowError `invalid_name`
  naming the rule, and the run fails with it at that first call;
- a value up to 256 KiB is sent as given; past it the call raises WorkflowError
  `value_too_large` naming the cap;
- the SDK's rule is the orchestrator's (one definition, functions.sdk.protocol.values)."""

from __future__ import annotations

import asyncio
import json
import unicodedata
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from functions.durable import Context, WorkflowError, advance, workflow
from functions.sdk.protocol import values as sdk_values
from orchestrator.services import values as api_values
from tests.support.names import NAMES, follows_rule

CAP = 256 * 1024
T0 = 1_700_000_000.0
PROPS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def only_op(wf: Any, payload: Any) -> dict[str, Any]:
    """The one operation the first call of `wf` reports."""
    body = {"run": {"run_id": "r1", "workflow": wf.name, "started_at": T0, "now": T0 + 1},
            "input": payload, "journal": []}
    ops = asyncio.run(advance(wf, body))["ops"]
    assert len(ops) == 1, ops
    op: dict[str, Any] = ops[0]
    return op


@workflow("v-signal")
async def signal_wait(ctx: Context, payload: Any) -> Any:
    return await ctx.wait_for_signal(payload["name"])


@workflow("v-hook")
async def hook_made(ctx: Context, payload: Any) -> Any:
    pad = "é" * payload.get("chars", 0)
    return await ctx.create_hook(payload.get("name", "approve"),
                                 metadata={"pad": pad} if pad else None)


@workflow("v-event")
async def event_wait(ctx: Context, payload: Any) -> Any:
    return await ctx.wait_for_event(payload["name"])


@workflow("v-child")
async def child(ctx: Context, payload: Any) -> Any:
    start = ctx.call if payload["kind"] == "call" else ctx.spawn
    return await start("other", {"pad": "x" * payload["chars"]})


def assert_refused(op: dict[str, Any], code: str, names: str) -> None:
    assert op["op"] == "fail", op
    assert op["error"]["code"] == code and names in op["error"]["message"], op


def test_the_sdk_and_the_orchestrator_share_one_rule() -> None:
    assert api_values.MAX_VALUE_BYTES == sdk_values.MAX_VALUE_BYTES == CAP
    assert api_values.NAME is sdk_values.NAME and api_values.EVENT_NAME is sdk_values.EVENT_NAME


@PROPS
@given(name=NAMES)
@example(name="approbation-é")
@example(name=unicodedata.normalize("NFD", "approbation-é"))
@example(name="x" * 128)
@example(name="x" * 129)
@example(name="a#b")
def test_a_signal_or_hook_name_is_checked_where_the_wait_is_declared(name: str) -> None:
    nfc = unicodedata.normalize("NFC", name)
    for wf, kind, field in ((signal_wait, "signal", "name"), (hook_made, "hook", "signal")):
        op = only_op(wf, {"name": name})
        if follows_rule(name):
            assert op["op"] == kind and op[field] == nfc and op["name"] == nfc, op
        else:
            assert_refused(op, "invalid_name", "letters or digits")
        assert follows_rule(name) == (api_values.NAME.fullmatch(nfc) is not None)


@PROPS
@given(name=NAMES)
@example(name="commande/expédiée")
@example(name="/x")
def test_an_event_name_is_checked_where_the_wait_is_declared(name: str) -> None:
    op = only_op(event_wait, {"name": name})
    if follows_rule(name, event=True):
        assert op["op"] == "event" and op["event"] == unicodedata.normalize("NFC", name), op
    else:
        assert_refused(op, "invalid_name", "letters or digits")


def _sizes() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([0, 1, CAP // 2 - 6, CAP // 2 - 5, CAP]),
                     st.integers(min_value=0, max_value=CAP))


@PROPS
@given(chars=_sizes())
@example(chars=CAP // 2 - 5)  # 2 bytes each: just under the cap with `{"pad":""}`
@example(chars=CAP // 2 - 4)  # just past it
def test_a_hooks_metadata_is_capped_where_the_hook_is_made(chars: int) -> None:
    op = only_op(hook_made, {"chars": chars})
    metadata = {"pad": "é" * chars} if chars else None
    size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False).encode())
    if size <= CAP:
        assert op["op"] == "hook" and op["metadata"] == metadata
    else:
        assert_refused(op, "value_too_large", str(CAP))


@PROPS
@given(chars=_sizes(), kind=st.sampled_from(["call", "spawn"]))
@example(chars=CAP - 10, kind="call")
@example(chars=CAP - 9, kind="spawn")
def test_a_child_runs_input_is_capped_where_the_child_is_started(chars: int, kind: str) -> None:
    op = only_op(child, {"kind": kind, "chars": chars})
    if chars + len('{"pad":""}') <= CAP:
        assert op["op"] == kind and len(op["input"]["pad"]) == chars
    else:
        assert_refused(op, "value_too_large", str(CAP))


def test_the_error_is_a_workflow_error_the_workflow_may_catch() -> None:
    caught: list[str] = []

    @workflow("v-catch")
    async def catching(ctx: Context, payload: Any) -> Any:
        try:
            await ctx.wait_for_signal("not a name")
        except WorkflowError as exc:
            caught.append(exc.code)
        return await ctx.wait_for_signal("fine")

    assert only_op(catching, None)["op"] == "signal"
    assert caught == ["invalid_name"]
