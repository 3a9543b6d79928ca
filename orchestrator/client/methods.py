"""The API's calls, written once (`Methods`): `Client` returns their results and
`AsyncClient` awaitables of them, each sending the same `Call`s its own way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Self, TypeVar

from orchestrator.client.calls import Call, renamed, run_input, seg
from orchestrator.client.hooks import Hooks

__all__ = ["LIST_PARAMS", "TRIGGER_OPTIONS", "Methods"]

R = TypeVar("R")

# The reference's option and parameter names, and the API's own.
TRIGGER_OPTIONS = {"runId": "run_id", "idempotencyKey": "idempotency_key",
                   "parentRunId": "parent_run_id", "run_id": "run_id",
                   "idempotency_key": "idempotency_key", "parent_run_id": "parent_run_id"}
LIST_PARAMS = {"workflowName": "workflow", "workflow": "workflow", "status": "status",
               "limit": "limit", "cursor": "cursor"}


class Methods(Generic[R]):
    """The API's calls, written once: `Client` returns their results, `AsyncClient`
    awaitables of them."""

    url: str
    hooks: Hooks[R]

    def _send(self, call: Call) -> R:
        raise NotImplementedError

    @property
    def workflow(self) -> Self:
        """The `client.workflow.trigger(...)` namespace other SDKs spell (README, "The Python
        client"): the client itself."""
        return self

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                json: Any = None, headers: Mapping[str, str] | None = None,
                timeout: float | None = None) -> R:
        """Any call of the API (`path` from its root): the answer's JSON as it is."""
        return self._send(Call(method, path, params, json, headers, timeout))

    # ---- runs ----------------------------------------------------------------------------

    def trigger(self, workflow: str, input: Any = None,
                options: Mapping[str, Any] | None = None, *, run_id: str | None = None,
                idempotency_key: str | None = None, parent_run_id: str | None = None) -> R:
        """Start a run of `workflow`; returns {run_id, workflow, status, created}.

        `input` is the run's input, any JSON value; a list is the other SDKs' positional
        arguments (`[payload]` means `payload`). `run_id`: choose the id (starting it
        again returns that run, `created` false). `idempotency_key`: a retry with the same
        key and input returns the first run. `parent_run_id`: list the run among that
        run's children (cancelling the parent cancels it). The options may also be given
        as one mapping in the reference's spelling: {"runId", "idempotencyKey",
        "parentRunId"}."""
        opts = renamed(options or {}, TRIGGER_OPTIONS, "options")
        opts.update(renamed({"run_id": run_id, "idempotency_key": idempotency_key,
                              "parent_run_id": parent_run_id}, TRIGGER_OPTIONS, "options"))
        body: dict[str, Any] = {"workflow": workflow, "input": run_input(input)}
        for name in ("run_id", "parent_run_id"):
            if opts.get(name):
                body[name] = opts[name]
        key = opts.get("idempotency_key")
        return self._send(Call("POST", "/runs", json=body,
                               headers={"Idempotency-Key": key} if key else None))

    def get_run(self, run_id: str, *, steps: bool = True, wait: float = 0.0) -> R:
        """A run's view: status, input, output (durable runs), error, timings, and its
        steps (a durable run's operations), unless `steps=False`. `wait` (seconds, at
        most 25): the API answers once the run ended or that long passed."""
        params: dict[str, str] = {} if steps else {"steps": "false"}
        timeout = None
        if wait > 0:
            params["wait"] = f"{wait:.1f}"
            timeout = wait + 30.0
        return self._send(Call("GET", f"/runs/{seg(run_id)}", params, timeout=timeout))

    def list_runs(self, workflow: str | None = None, *, status: str | None = None,
                  limit: int | None = None, cursor: str | None = None,
                  params: Mapping[str, Any] | None = None) -> R:
        """Runs, newest first: {runs: [summary], next_cursor}. Filter by `workflow` and
        `status` (a run status, or `paused`); `limit` 1-100 (20); pass `next_cursor`
        back as `cursor` for the next page. `params` takes the same in one mapping, with
        the reference's `workflowName` for `workflow`."""
        query = renamed(params or {}, LIST_PARAMS, "params")
        query.update(renamed({"workflow": workflow, "status": status, "limit": limit,
                               "cursor": cursor}, LIST_PARAMS, "params"))
        return self._send(Call("GET", "/runs", {k: str(v) for k, v in query.items()}))

    def cancel_run(self, run_id: str, reason: str | None = None) -> R:
        """Cancel a run (and its running children); returns its view. A finished run
        raises `ConflictError` (`run_finished`)."""
        return self._send(Call("POST", f"/runs/{seg(run_id)}/cancel",
                               json={"reason": reason} if reason else {}))

    def send_signal(self, run_id: str, name: str, payload: Mapping[str, Any] | None = None,
                    *, idempotency_key: str | None = None) -> R:
        """Send signal `name` with `payload` (a JSON object) to durable run `run_id`;
        returns {run_id, signal, id, duplicate}. A signal sent before the run waits for
        it is kept for it. With `idempotency_key`, sending it again queues nothing."""
        return self._send(Call("POST", f"/runs/{seg(run_id)}/signals/{seg(name)}",
                               json={} if payload is None else payload,
                               headers={"Idempotency-Key": idempotency_key}
                               if idempotency_key else None))

    def answer_approval(self, run_id: str, step: str, approved: bool,
                        comment: str | None = None) -> R:
        """Approve (or reject: the run is cancelled) the open approval gate `step` of
        `run_id`; returns the gate as answered. A second answer, or one past the gate's
        deadline, is refused (409) and changes nothing."""
        body: dict[str, Any] = {"approved": approved}
        if comment is not None:
            body["comment"] = comment
        return self._send(Call("POST", f"/runs/{seg(run_id)}/approvals/{seg(step)}",
                               json=body))

    def list_approvals(self, approver: str | None = None, limit: int = 100) -> R:
        """The inbox: {approvals: [open gates, oldest first]} (`approver`: those that API
        key name may answer)."""
        params: dict[str, Any] = {"limit": limit}
        if approver is not None:
            params["approver"] = approver
        return self._send(Call("GET", "/approvals", params=params))

    def get_state(self, entity: str, key: str) -> R:
        """A durable state cell: {entity, key, value, version, expires_at}."""
        return self._send(Call("GET", f"/state/{seg(entity)}/{seg(key)}"))

    def set_state(self, entity: str, key: str, value: Any, ttl: float | None = None) -> R:
        """Set a state cell to `value` (for `ttl` seconds); the cell as set."""
        body: dict[str, Any] = {"value": value}
        if ttl is not None:
            body["ttl"] = ttl
        return self._send(Call("PUT", f"/state/{seg(entity)}/{seg(key)}", json=body))

    def delete_state(self, entity: str, key: str) -> R:
        return self._send(Call("DELETE", f"/state/{seg(entity)}/{seg(key)}"))

    def list_state(self, entity: str, after: str | None = None, limit: int = 100) -> R:
        """{entity, cells: [cell], next}: an entity's cells in key order."""
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        return self._send(Call("GET", f"/state/{seg(entity)}", params=params))

    def resume_run(self, run_id: str) -> R:
        """Call a paused durable run's workflow again (after a fix for the replay mismatch
        that paused it); returns {run_id, resumed, was_paused}."""
        return self._send(Call("POST", f"/runs/{seg(run_id)}/resume", json={}))

    def reset_run(self, run_id: str, to: int) -> R:
        """Forget a durable run's journal from position `to` of its top scope on and call
        its workflow again; returns {run_id, reset_to, forgotten, was_paused}."""
        return self._send(Call("POST", f"/runs/{seg(run_id)}/reset", json={"to": to}))

    def children(self, run_id: str) -> R:
        """The runs started as children of `run_id` (`ctx.call`, `ctx.spawn`, or with
        `parent_run_id`), as summaries, oldest first."""
        return self._send(Call("GET", f"/runs/{seg(run_id)}/children",
                               read=lambda body: body["children"]))

    def parent(self, run_id: str) -> R:
        """The summary of the run `run_id` is a child of; None if it has none (or the
        parent expired)."""
        return self._send(Call("GET", f"/runs/{seg(run_id)}/parent",
                               read=lambda body: body["parent"]))

    get_child_workflows = children
    get_parent_workflow = parent

    # ---- a run's events ------------------------------------------------------------------

    def create_event(self, run_id: str, event_type: str, payload: Any = None) -> R:
        """Record a custom event of a run, beside its transitions; returns {id,
        event_type, payload, at}."""
        return self._send(Call("POST", f"/runs/{seg(run_id)}/events",
                               json={"event_type": event_type, "payload": payload}))

    def list_events(self, run_id: str) -> R:
        """A run's custom events (`create_event`), oldest first."""
        return self._send(Call("GET", f"/runs/{seg(run_id)}/events",
                               read=lambda body: body["custom"]))

    def history(self, run_id: str) -> R:
        """Every transition of a run and its steps, oldest first ({type, at, step, ...})."""
        return self._send(Call("GET", f"/runs/{seg(run_id)}/events",
                               read=lambda body: body["events"]))
