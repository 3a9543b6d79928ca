"""Faults inside an orchestrator process, at the botocore level, and the wrapper that
installs them before the real command runs:

    python -m tests.chaos.faults worker --manifest M      # = orchestrator worker ..., faulty
    python -m tests.chaos.faults --module infra.emulator --port P   # any module, no faults

The hooks are botocore event handlers, added to `botocore.handlers.BUILTIN_HANDLERS`
before any session exists, so every client the process makes carries them; nothing of
the orchestrator is patched. What they do, each at its rate (a seeded RNG per process):

- `sqs-dup` (SendMessage, SendMessageBatch): the request is sent once more before
  botocore sends it;
- `sqs-drop` (the same): some batch entries are removed, or a single message goes to a
  void queue;
- `sqs-delay`, `ddb-delay` (the sends; UpdateItem, PutItem, BatchWriteItem): a pause
  before sending;
- `exec-timeout` (the same writes and sends): the request is sent and executed, then the
  caller gets a read timeout (botocore's retry sends it again: a conditional write then
  finds its own effect, a send is duplicated).

And aimed crashes: when the harness writes a point name into this process's arm file,
the process SIGKILLs itself at the next such point: `after-claim` (the claim write
returned), `before-commit` (the success write is about to be sent), `after-commit` (it
returned, the dependants are not promoted yet), `mid-fanout` (the 3rd promotion in a
row of one thread), `mid-call` (MID_CALL_AFTER seconds after it sent a call to a durable
workflow: the call's step body is running; the one hook not at the botocore level, on
httpx's transport); or SIGSTOPs itself right after a claim (`stop-after-claim`: a
zombie holding a lease, resumed by the harness). Every fault is written to the
process's fault log (JSON lines) before it is played. None is played once the calm file
exists.

Configuration (environment): `CHAOS_FAULT_LOG`, `CHAOS_PROC` (the process's name in the
logs), `CHAOS_SEED`, `CHAOS_RATES` (JSON: the rates above, and `delay-min`, `delay-max`,
the range of a pause in seconds, default 0.2 to 1.5), `CHAOS_CALM`, `CHAOS_ARM`,
`CHAOS_VOID_QUEUE` (the URL of the queue that dropped messages go to)."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["AIM_POINTS", "DEFAULT_RATES", "STOP_POINT", "ProcessFaults", "main"]

AIM_POINTS = ("after-claim", "before-commit", "after-commit", "mid-fanout", "mid-call")
# A `mid-call` crash comes this long after the request left (a durable step body takes
# durable_app.BODY_HOLD): the function runs on, its answer goes nowhere.
MID_CALL_AFTER = 0.05
# Not a crash: the process SIGSTOPs itself right after a claim (a zombie holding a
# lease); the harness SIGCONTs it once the lease has expired.
STOP_POINT = "stop-after-claim"
DEFAULT_RATES: dict[str, float] = {
    "sqs-dup": 0.08, "sqs-drop": 0.06, "sqs-delay": 0.05, "ddb-delay": 0.04,
    "exec-timeout": 0.03,
}
WRITES = ("UpdateItem", "PutItem", "BatchWriteItem")
SENDS = ("SendMessage", "SendMessageBatch")
# A thread promoting a wide fan-out makes this many promotions in a row before an aimed
# `mid-fanout` crash.
FANOUT_AFTER = 3


@dataclass
class CallInfo:
    """What the current thread's botocore call is about (set in provide-client-params)."""

    service: str
    op: str
    kind: str = ""
    run: str | None = None
    step: str | None = None
    messages: list[Any] = field(default_factory=list)


def _kind(params: dict[str, Any]) -> str:
    """Which step write an UpdateItem is, from its expressions (see
    orchestrator/adapters/store/step_writes.py and the step_* modules beside it). Unknown
    ones are just 'write'."""
    update = str(params.get("UpdateExpression", ""))
    if "lease_owner = :o" in update:
        return "claim"
    if "output_size = :size" in update:
        return "succeed"
    if "ADD satisfied" in update:
        return "satisfy"
    if "due_at = :due" in update:
        return "retry"
    if "finished_at = :now" in update:
        return "finish"  # a step's failure or skip (or a run's finish)
    return "write"


class _Cached:
    """A file's content, re-read at most every `every` seconds (hooks run on every
    request: a stat per call is cheap, a read per call is not needed)."""

    def __init__(self, path: str | None, every: float) -> None:
        self.path = Path(path) if path else None
        self.every = every
        self.at = 0.0
        self.value: str | None = None

    def get(self) -> str | None:
        if self.path is None:
            return None
        now = time.monotonic()
        if now - self.at >= self.every:
            self.at = now
            try:
                self.value = self.path.read_text().strip() or None
            except OSError:
                self.value = None
        return self.value

    def clear(self) -> None:
        if self.path is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
        self.value = None


class ProcessFaults:
    """The hooks of one process. `install()` registers them for every botocore session
    made afterwards."""

    def __init__(self, env: dict[str, str]) -> None:
        from tests.chaos.jsonl import JsonlWriter

        self.proc = env.get("CHAOS_PROC", f"pid{os.getpid()}")
        self.rates: dict[str, float] = {
            **DEFAULT_RATES, **json.loads(env.get("CHAOS_RATES") or "{}")}
        self.rng = random.Random(f"{env.get('CHAOS_SEED', '0')}/{self.proc}")
        self.rng_lock = threading.Lock()
        self.log = JsonlWriter(env["CHAOS_FAULT_LOG"])
        self.calm = _Cached(env.get("CHAOS_CALM"), 0.25)
        self.arm = _Cached(env.get("CHAOS_ARM"), 0.1)
        self.void = env.get("CHAOS_VOID_QUEUE")
        self.local = threading.local()
        self._http: Any = None

    # ---- helpers ------------------------------------------------------------------

    def roll(self, fault: str) -> bool:
        if self.calm.get() is not None:
            return False
        rate = self.rates.get(fault, 0.0)
        with self.rng_lock:
            return rate > 0 and self.rng.random() < rate

    def uniform(self, a: float, b: float) -> float:
        with self.rng_lock:
            return self.rng.uniform(a, b)

    def record(self, kind: str, call: CallInfo | None, **detail: Any) -> None:
        self.log.write({
            "t": time.time(), "proc": self.proc, "pid": os.getpid(), "kind": kind,
            "op": None if call is None else call.op,
            "run": None if call is None else call.run,
            "step": None if call is None else call.step, **detail,
        })

    def send_raw(self, request: Any) -> Any:
        """Send a prepared request ourselves (it then executes on the server)."""
        if self._http is None:
            from botocore.httpsession import URLLib3Session

            self._http = URLLib3Session(timeout=30)
        return self._http.send(request)

    def crash(self, point: str, call: CallInfo) -> None:
        self.record("self-kill", call, point=point)
        self.arm.clear()
        os.kill(os.getpid(), signal.SIGKILL)

    def on_http(self, request: Any) -> None:
        """A call going out (httpx): armed at `mid-call`, a durable workflow's call is
        the last thing this process does."""
        if not (request.url.path.startswith("/durable/") and self.armed("mid-call")):
            return
        call = CallInfo("http", "POST", "call", request.headers.get("x-orchestrator-run-id"),
                        request.headers.get("x-orchestrator-step"))
        self.arm.clear()
        timer = threading.Timer(MID_CALL_AFTER, self.crash, ("mid-call", call))
        timer.daemon = True
        timer.start()

    def armed(self, point: str) -> bool:
        return self.calm.get() is None and self.arm.get() == point

    # ---- the hooks ----------------------------------------------------------------

    def on_params(self, params: dict[str, Any], event_name: str = "", **_: Any) -> None:
        service, op = [*event_name.split("."), "", ""][1:3]
        call = CallInfo(service, op)
        item_key = params.get("Key") or {}
        if isinstance(item_key, dict) and "run_id" in item_key:
            call.run = (item_key.get("run_id") or {}).get("S")
            call.step = (item_key.get("step") or {}).get("S")
        if service == "dynamodb" and op == "UpdateItem":
            call.kind = _kind(params)
            streak = getattr(self.local, "streak", 0)
            self.local.streak = streak + 1 if call.kind == "satisfy" else 0
        if service == "sqs" and op in SENDS:
            self.tamper_sends(call, params)
        self.local.call = call

    def tamper_sends(self, call: CallInfo, params: dict[str, Any]) -> None:
        if "Entries" in params:
            bodies = [e.get("MessageBody") for e in params["Entries"]]
        else:
            bodies = [params.get("MessageBody")]
        call.messages = [_message(b) for b in bodies]
        if call.messages and call.messages[0]:
            call.run = call.messages[0].get("run_id")
            call.step = call.messages[0].get("step")
        if not self.roll("sqs-drop"):
            return
        if "Entries" in params and len(params["Entries"]) > 1:
            entries = list(params["Entries"])
            with self.rng_lock:
                lost = self.rng.sample(range(len(entries)), max(1, len(entries) // 3))
            self.record("sqs-drop", call, messages=[call.messages[i] for i in lost])
            params["Entries"] = [e for i, e in enumerate(entries) if i not in lost]
        elif self.void is not None:
            self.record("sqs-drop", call, messages=call.messages)
            params["QueueUrl"] = self.void

    def before_send(self, request: Any, event_name: str = "", **_: Any) -> None:
        from botocore.exceptions import ReadTimeoutError

        call: CallInfo | None = getattr(self.local, "call", None)
        if call is None:
            return
        is_send = call.service == "sqs" and call.op in SENDS
        is_write = call.service == "dynamodb" and call.op in WRITES
        if not (is_send or is_write):
            return
        if self.roll("sqs-delay" if is_send else "ddb-delay"):
            pause = self.uniform(self.rates.get("delay-min", 0.2), self.rates.get("delay-max", 1.5))
            self.record("sqs-delay" if is_send else "ddb-delay", call, seconds=round(pause, 3),
                        write=call.kind or None)
            time.sleep(pause)
        if is_send and self.roll("sqs-dup"):
            self.record("sqs-dup", call, messages=call.messages)
            self.send_raw(request)
        if self.roll("exec-timeout"):
            self.record("exec-timeout", call, write=call.kind or None, messages=call.messages)
            self.send_raw(request)
            raise ReadTimeoutError(endpoint_url=request.url)

    def before_call(self, event_name: str = "", **_: Any) -> None:
        call: CallInfo | None = getattr(self.local, "call", None)
        if call is not None and call.kind == "succeed" and self.armed("before-commit"):
            self.crash("before-commit", call)

    def after_call(self, http_response: Any = None, event_name: str = "", **_: Any) -> None:
        call: CallInfo | None = getattr(self.local, "call", None)
        ok = http_response is not None and getattr(http_response, "status_code", 0) == 200
        if call is None or not ok:
            return
        if call.kind == "claim" and self.armed("after-claim"):
            self.crash("after-claim", call)
        elif call.kind == "claim" and self.armed(STOP_POINT):
            self.record("self-stop", call, point=STOP_POINT)
            self.arm.clear()
            os.kill(os.getpid(), signal.SIGSTOP)
        elif call.kind == "succeed" and self.armed("after-commit"):
            self.crash("after-commit", call)
        elif (call.kind == "satisfy" and getattr(self.local, "streak", 0) >= FANOUT_AFTER
              and self.armed("mid-fanout")):
            self.crash("mid-fanout", call)

    def install(self) -> None:
        from botocore import handlers

        handlers.BUILTIN_HANDLERS.extend([
            ("provide-client-params.dynamodb", self.on_params),
            ("provide-client-params.sqs", self.on_params),
            ("before-call.dynamodb", self.before_call),
            ("after-call.dynamodb", self.after_call),
            ("before-send.dynamodb", self.before_send),
            ("before-send.sqs", self.before_send),
        ])
        import httpx

        send = httpx.HTTPTransport.handle_request
        faults = self

        def handle_request(transport: httpx.HTTPTransport, request: httpx.Request
                           ) -> httpx.Response:
            faults.on_http(request)
            return send(transport, request)

        httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign,assignment]


def _message(body: Any) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (TypeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _exit_with_parent() -> None:
    """Die with the harness: a process whose parent is gone (reparented) kills itself,
    so a harness killed hard leaves no orphans behind."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    """Install the faults (when CHAOS_FAULT_LOG is set), then run `orchestrator ARGS`,
    or `--module NAME ARGS` (python -m NAME ARGS)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _exit_with_parent()
    env = dict(os.environ)
    if env.get("CHAOS_FAULT_LOG"):
        ProcessFaults(env).install()
    if args[:1] == ["--module"]:
        import runpy

        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    from orchestrator.cli.commands import main as orchestrator

    orchestrator.main(args=args, prog_name="orchestrator")


if __name__ == "__main__":
    main()
