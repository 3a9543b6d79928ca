"""An in-process test environment for durable workflows: the real engine on the embedded
emulator, the workflows served over real HTTP, and a fake clock that jumps to the next
wake-up when every run waits, so a 14-day sleep is tested in milliseconds.

    from orchestrator.testing import WorkflowEnv

    with WorkflowEnv(workflows=[trial]) as env:
        run_id = env.start("trial", {"userId": "u1"})
        env.run_until_idle()                  # runs, sleeps 14 days (at once), runs on
        assert env.result(run_id) == {"converted": False}

Nothing runs in the background: `run_until_idle` and `advance` hand each queued
message to a worker on the calling thread, so a test sees the end of what it caused
when they return. The orchestrator's clock stands still unless one of them moves it;
entries the SDK records take that clock plus the little real time a call takes."""

from __future__ import annotations

import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from types import TracebackType
from typing import Any

import yaml

from functions.sdk import FunctionApp
from functions.sdk.durable import Workflow, stubs
from functions.sdk.serving import BackgroundServer
from infra.direct import create_data_resources
from infra.emulator import Emulator
from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.manifest.durations import parse_duration
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.runtime import Runtime
from orchestrator.settings import Settings
from orchestrator.worker import Worker

__all__ = ["FakeClock", "RunFailed", "RunNotFinished", "StillRunning", "WorkflowEnv"]

# Finished runs and journals stay readable however far a test moves the clock (the
# store treats a row past its retention as gone).
RETENTION = 100 * 365 * 86400.0
DEFAULT_MAX_ROUNDS = 1000
# The store keeps times to the millisecond: a wake-up stored this much past the end of
# an `advance` is the one it was meant to reach.
SLACK = 0.001


class RunFailed(AssertionError):
    """`result()` of a run that ended without success; `error` is the run's error."""

    def __init__(self, run_id: str, status: str, error: Any) -> None:
        super().__init__(f"run {run_id} ended {status}: {error}")
        self.run_id = run_id
        self.status = status
        self.error = error


class RunNotFinished(AssertionError):
    """`result()` of a run that has not ended (it waits for a signal or an event, or
    is paused)."""


class StillRunning(AssertionError):
    """`run_until_idle()` gave up: runs kept waking up past its round limit."""


class FakeClock:
    """The orchestrator's time in a WorkflowEnv: it stands still unless moved, and only
    moves forward."""

    def __init__(self, start: float) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def move_to(self, when: float) -> None:
        with self._lock:
            self._now = max(self._now, when)

    def sleep(self, seconds: float) -> None:
        """What a worker's wait for a message due within the second does here."""
        with self._lock:
            self._now += max(0.0, seconds)


class WorkflowEnv:
    """The durable workflows of `app` (a FunctionApp), or `workflows` (served by an app
    made here), each under the name it is served by, on a real orchestrator of their own.

    `secret`: the app's signing secret, if it has one. `options`: more manifest fields
    per workflow (`timeout`, `on: {event: ...}` for `emit`). `dags`: YAML workflows
    (name -> the workflow's mapping, its steps on backend `app`: the app's routes), run
    on the same fake clock (a retry's backoff, an approval's deadline). `emulator`: one to share
    (a session fixture); otherwise the environment starts and stops its own. `start`:
    the fake clock's first reading (default: the real time now). `capabilities`: what
    backend `app` declares beyond its routes (`("shell",)` for a ScriptHost's app: its
    `run:` steps and `script:` workflows)."""

    def __init__(
        self,
        app: FunctionApp | None = None,
        *,
        workflows: Iterable[Workflow] = (),
        secret: str | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        emulator: Emulator | None = None,
        start: float | None = None,
        dags: Mapping[str, Mapping[str, Any]] | None = None,
        capabilities: Iterable[str] = (),
    ) -> None:
        workflows = list(workflows)
        self.dags = {k: dict(v) for k, v in (dags or {}).items()}
        self.capabilities = list(capabilities)
        if (app is None) == (not workflows) and not (app is not None and self.dags):
            raise ValueError("give WorkflowEnv an app serving the workflows, or workflows=[...]")
        if app is None:
            secret = secrets.token_hex(16)
            app = FunctionApp(secret=secret, title="workflow-env")
            app.workflow(*workflows)
        if app.signed and not secret:
            raise ValueError("the app checks signatures: pass its secret (secret=...)")
        if not app.workflows and not self.dags:
            raise ValueError("the app serves no durable workflow (app.workflow(...))")
        unknown = sorted(set(options or {}) - set(app.workflows))
        if unknown:
            raise ValueError(f"options for {unknown}: the app serves {list(app.workflows)}")
        self.app = app
        self.secret = secret if app.signed else None
        self.options = {k: dict(v) for k, v in (options or {}).items()}
        self.clock = FakeClock(time.time() if start is None else start)
        self._emulator = emulator
        self._owns_emulator = emulator is None
        self._server: BackgroundServer | None = None
        self._rt: Runtime | None = None
        self._worker: Worker | None = None

    # ---- setting up and down -----------------------------------------------------------

    def __enter__(self) -> WorkflowEnv:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _open(self) -> None:
        if self._emulator is None:
            self._emulator = Emulator().start()
        self._server = BackgroundServer(self.app).start()
        settings = Settings(
            endpoint_url=self._emulator.url, prefix="env" + secrets.token_hex(4),
            api_auth=False, ttl_success=RETENTION, ttl_failed=RETENTION,
        )
        clients = _clients_for(self._emulator, settings)
        # Straight through the services' APIs: CloudFormation's first stack in a process
        # takes moto over a second to load, the direct calls some 40 ms.
        create_data_resources(clients, settings.prefix)
        text, env = self._manifest()
        manifest = manifest_from_text(text, "orchestrator.yml", environ=env)
        rt = Runtime.build(settings, manifest, clients=clients, clock=self.clock)
        # The worker runs on the fake clock but signs its calls with the real time (the
        # SDK refuses a timestamp minutes away from its own clock): Runtime.worker gives
        # the runtime's own clock to the invoker alone, so it is asked on a copy whose
        # clock is the real one, with the same parts.
        self._worker = replace(rt, clock=time.time).worker(clock=self.clock,
                                                           sleep=self.clock.sleep)
        self._rt = rt

    def _manifest(self) -> tuple[str, dict[str, str]]:
        """The manifest (one backend, one durable workflow per served name) and the
        variables it reads (`${...}`: the URL and secret are never parsed as YAML)."""
        assert self._server is not None
        backend: dict[str, Any] = {"url": "${WORKFLOW_ENV_URL}"}
        if self.capabilities:
            backend["capabilities"] = self.capabilities
        env = {"WORKFLOW_ENV_URL": self._server.url}
        if self.secret:
            backend["secret"] = "${WORKFLOW_ENV_SECRET}"
            env["WORKFLOW_ENV_SECRET"] = self.secret
        doc = {
            "backends": {"app": backend},
            "workflows": {name: {"backend": "app", "workflow": name, **self.options.get(name, {})}
                          for name in self.app.workflows},
        }
        doc["workflows"].update(self.dags)
        return yaml.safe_dump(doc, sort_keys=False), env

    def close(self) -> None:
        """Stop the app's server (and the emulator if this environment started it), and
        clear the step stubs."""
        stubs.clear()
        if self._worker is not None:
            self._worker.invoker.close()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._owns_emulator and self._emulator is not None:
            self._emulator.stop()
            self._emulator = None
        self._rt = self._worker = None

    @property
    def rt(self) -> Runtime:
        """The orchestrator's parts (store, queues, services), for what the helpers
        below do not cover."""
        if self._rt is None:
            raise RuntimeError("the environment is not open: use it in a with block")
        return self._rt

    @property
    def url(self) -> str:
        """The base URL the app is served at."""
        if self._server is None:
            raise RuntimeError("the environment is not open: use it in a with block")
        return self._server.url

    @property
    def now(self) -> float:
        """The orchestrator's time (epoch seconds)."""
        return self.clock()

    # ---- acting ------------------------------------------------------------------------

    def start(self, workflow: str, input: Any = None, run_id: str | None = None) -> str:
        """Start a run of `workflow` (a name the app serves); its id. Nothing runs until
        `run_until_idle` or `advance`."""
        run, _ = self.rt.runs.start(workflow, input, run_id)
        return run.run_id

    def send_signal(self, run_id: str, name: str, payload: Any = None, *,
                    key: str | None = None) -> dict[str, Any]:
        """Send signal `name` to a run (`key`: an Idempotency-Key); the run takes it at
        the next `run_until_idle`."""
        return self.rt.signals.send(run_id, name, payload, key)

    def emit(self, name: str, data: Any = None, *, key: str | None = None,
             event_id: str | None = None) -> list[str]:
        """Emit an event about subject `key`: it ends the waits for it (at the next
        `run_until_idle`) and starts the runs it triggers (workflows given
        `options={"wf": {"on": {"event": name}}}`), whose ids it returns."""
        answer = self.rt.events.emit(name, data, key=key, event_id=event_id)
        return [r["run_id"] for r in answer["runs"]]

    def execute_hook(self, hook: str, payload: Mapping[str, Any] | None = None
                     ) -> dict[str, Any]:
        """Execute a hook (its URL as the workflow handed it out, or its token) with
        `payload`, as POST /hooks/{token} does: it delivers the hook's signal at the next
        `run_until_idle`."""
        token = hook.rstrip("/").rsplit("/", 1)[-1]
        return self.rt.hooks.execute(token, dict(payload or {}))

    def stub_step(self, name: str, value: Any = None, *, fn: Callable[..., Any] | None = None,
                  error: BaseException | None = None) -> None:
        """Answer step `name` with `value`, `fn(*args, **kwargs)` or by raising `error`,
        instead of running its body (in every workflow of this process, until the
        environment closes)."""
        stubs.stub(name, value, fn=fn, error=error)

    def run_until_idle(self, *, max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        """Run what is queued; when every run waits on a timer, move the clock to the
        earliest wake-up and go on. Returns once every run has ended or waits for
        something only the test can send (a signal or an event, with no timeout) or
        do (a paused run). StillRunning after `max_rounds` wake-ups (a run that never
        stops sleeping)."""
        self._pump(None, max_rounds)

    def advance(self, duration: float | str | timedelta, *,
                max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        """Move the clock forward by `duration` (seconds, a timedelta, or text: "90s",
        "3d", "1h30m"), running every wake-up that falls due on the way, in order."""
        if isinstance(duration, timedelta):
            seconds = duration.total_seconds()
        else:
            seconds = parse_duration(duration, "advance", allow_zero=True)
        if seconds < 0:
            raise ValueError(f"advance: {duration!r} is negative (time only moves forward)")
        self._pump(self.clock() + seconds, max_rounds)

    # ---- reading -----------------------------------------------------------------------

    def view(self, run_id: str) -> dict[str, Any]:
        """The run as the API shows it (status, output, error, steps, waiting)."""
        return self.rt.runs.view(run_id)

    def status(self, run_id: str) -> str:
        """queued, running, paused, success, failed or killed."""
        return str(self.rt.runs.view(run_id, steps=False)["status"])

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal: one entry per operation (kind, name, status, value or
        error, started, ended), in order."""
        return self.rt.store.journal.read_journal(run_id)

    def result(self, run_id: str) -> Any:
        """The workflow's result. RunFailed if the run ended otherwise, RunNotFinished
        if it has not ended."""
        view = self.view(run_id)
        status = view["status"]
        if status == "success":
            return view["output"]
        if status in ("failed", "killed"):
            raise RunFailed(run_id, status, view["error"])
        why = ("waiting for its concurrency group or throttle" if status == "queued"
               else _waits(view.get("waiting"), self.clock()))
        raise RunNotFinished(f"run {run_id} has not ended: it is {status}, {why}")

    # ---- the loop ----------------------------------------------------------------------

    def _pump(self, until: float | None, max_rounds: int) -> None:
        for _ in range(max_rounds):
            self._drain()
            woke, next_at = self._wake()
            if woke:
                continue
            if next_at is None or (until is not None and next_at > until + SLACK):
                if until is not None:
                    self.clock.move_to(until)
                return
            self.clock.move_to(next_at)
        raise StillRunning(f"runs still going after {max_rounds} rounds of wake-ups "
                           f"(the clock is at {self.clock():.3f}): {self._going()}")

    def _drain(self) -> None:
        """Hand every visible message of both queues to the worker, until none is left.
        Delayed ones stay out of sight (SQS delays are real time): `_wake` wakes their
        runs instead, and a copy that shows up later finds its wait resolved."""
        queues = self.rt.queues
        worker = self._worker
        assert worker is not None
        visibility = self.rt.settings.visibility_timeout
        while True:
            got = [item for url in (queues.dispatch_url, queues.timer_url)
                   for item in queues.receive(url, wait=0, visibility=visibility)]
            if not got:
                return
            for item in got:
                if item.message is not None:
                    worker.handle(item.message)
                queues.delete(item.queue, [item.receipt])

    def _wake(self) -> tuple[bool, float | None]:
        """Wake the runs whose wait is over (as their timer messages would, had SQS
        delays not been real time); whether there were any, and the earliest wake-up of
        the others (None: none waits on a timer)."""
        now = self.clock()
        due: list[Dispatch] = []
        admitted = False
        next_at: float | None = None
        for run_id in self.rt.store.runs.active_run_ids():
            run = self.rt.store.runs.get_run(run_id, now)
            if run is None or run.status.terminal:
                continue
            if run.status is RunStatus.QUEUED:
                # Held by its throttle until `admit_at` (else by its concurrency group,
                # until the run holding it ends).
                if run.admit_at is not None and run.admit_at <= now:
                    self.rt.admission.due(run_id)
                    after = self.rt.store.runs.get_run(run_id, now)
                    if after is None or after.status is not RunStatus.QUEUED:
                        admitted = True
                        continue
                    # Still queued: its start moved on (a throttle's next slot), or it
                    # waits in a concurrency limit's line, where the end of a run
                    # ahead lets it go, not a timer.
                    run = after
                if run.admit_at is not None and run.admit_at > now:
                    next_at = run.admit_at if next_at is None else min(next_at, run.admit_at)
                continue
            # The top's driver and each parallel branch's: any may wait on a timer. In a
            # YAML run, its steps that wait (an approval gate) likewise.
            rows = (self.rt.store.drivers.all(run_id) if run.definition.durable is not None
                    else [r for r in self.rt.store.steps.query_steps(run_id)
                          if r.waiting is not None or (
                              r.status is StepStatus.DISPATCHED and not r.claimed)])
            for driver in rows:
                if driver.status.terminal:
                    continue
                if driver.claimed:
                    raise RuntimeError(f"run {run_id}: its driver {driver.step} is held by "
                                       f"{driver.lease_owner} though no worker is running "
                                       "(an earlier error?)")
                if driver.due_at is None and driver.waiting is not None:
                    continue  # waits for a signal or an event (or an operator)
                if driver.due_at is None or driver.due_at <= now:
                    # Its wait is over (or its first message went missing): look now.
                    due.append(Dispatch(run_id=run_id, step=driver.step,
                                        attempt=driver.attempt))
                else:
                    next_at = (driver.due_at if next_at is None
                               else min(next_at, driver.due_at))
        if due:
            self.rt.queues.dispatch(due)
        return bool(due) or admitted, next_at

    def _going(self) -> str:
        now = self.clock()
        parts = []
        for run_id in self.rt.store.runs.active_run_ids():
            driver = self.rt.store.drivers.get_driver(run_id)
            waiting = None if driver is None else driver.waiting
            parts.append(f"{run_id} ({_waits(waiting, now)})")
        return "; ".join(parts) or "none"


def _waits(waiting: Mapping[str, Any] | None, now: float) -> str:
    """What a run's driver waits for, in words."""
    if not waiting:
        return "not waiting"
    kind, name, until = waiting.get("kind"), waiting.get("name"), waiting.get("until")
    when = "" if until is None else f" until now + {max(0.0, float(until) - now):.0f}s"
    if kind in ("signal", "event"):
        return f"waiting for {kind} {name!r}{when or ' (no timeout)'}"
    if kind == "mismatch":
        return f"paused by a replay mismatch at {name!r}"
    return f"waiting ({kind} {name!r}){when}"


# Clients by emulator: environments sharing one share its clients (thread-safe), since
# botocore reads its endpoint data anew for every new session (a third of a second).
_CLIENTS: weakref.WeakKeyDictionary[Emulator, tuple[str, Clients]] = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def _clients_for(emulator: Emulator, settings: Settings) -> Clients:
    with _CLIENTS_LOCK:
        known = _CLIENTS.get(emulator)
        if known is not None and known[0] == emulator.url:
            return known[1]
        clients: Clients = emulator.attach(make_clients(settings))
        _CLIENTS[emulator] = (emulator.url, clients)
        return clients
