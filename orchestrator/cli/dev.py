"""The local stack behind `orchestrator dev`: everything in one process, in order.

1. the embedded AWS emulator (moto, DynamoDB serialized), in a process of its own:
   this process's own parts hand it their requests over a local socket, other processes
   reach it over HTTP (`--emulator-in-process` keeps it in this process, as before);
   unless an endpoint is configured
   (`AWS_ENDPOINT_URL`, or one service's own `AWS_ENDPOINT_URL_DYNAMODB`, ...);
2. the tables, queues and bucket, created from template.yaml through CloudFormation, or
   straight through the services' APIs (`--provision direct`);
3. the functions app on uvicorn;  4. the HTTP API, with a fresh API key for this stack
   (printed once) unless ORCH_API_AUTH=off;  5. the workers and the sweeper, as threads.
`stop()` undoes it in reverse."""

from __future__ import annotations

import errno
import importlib
import inspect
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.emulator.capabilities import facts as emulator_facts
from orchestrator import telemetry
from orchestrator.cli.dev_model import asked, loaded, without_emulator
from orchestrator.errors import OrchestratorError, UsageError
from orchestrator.services.versions.seeding import register_at_start
from orchestrator.settings import (
    ENDPOINT_VARIABLE,
    SERVICE_ENDPOINT_VARIABLES,
    Settings,
    environment,
    set_environment,
)

__all__ = ["LocalStack", "StackOptions", "emulator_facts", "endpoints", "load_factory"]

DEMO_WORKFLOW = "monthly-report"
# The worker function's timeout in template.yaml.
LAMBDA_WORKER_TIMEOUT = 120.0


@dataclass(frozen=True)
class StackOptions:
    manifest: Path
    host: str = "127.0.0.1"
    api_port: int = 8080
    functions_app: str | None = "functions.examples.monthly_report:create_app"
    functions_port: int = 8001
    # The script host (functions/sdk/scripts): serves durable shell scripts and `run:`
    # steps; a manifest with no `shell` backend gets one, `scripts`, pointing at it.
    # 0: any free port; None: serve none.
    scripts_port: int | None = 8002
    emulator_port: int = 4566
    embedded_emulator: bool = True
    workers: int = 1
    sweep_interval: float = 5.0
    prefix: str | None = None
    # With the embedded emulator, keep the process on one core (infra.emulator.tuning.
    # keep_to_one_core); False lets its threads run on every core.
    one_core: bool = True
    # With the embedded emulator, run moto in a process of its own (its work on another
    # core than the API's, the workers' and the functions'); False keeps it in this one.
    emulator_process: bool = True
    # The AWS model of the embedded emulator (infra/emulator/aws_model.py): "aws" (the
    # shipped file) or a file's path; None: ORCH_EMULATOR_MODEL's, if set.
    aws_model: str | None = None
    # Serve through the Lambda handlers, invoked as AWS would (infra/lambda_local.py).
    lambda_mode: bool = False
    # How the tables, queues and bucket are made: "cloudformation" (the data stack), or
    # "direct" through the services' APIs, for an endpoint without CloudFormation.
    provision: str = "cloudformation"
    # Serve each change of the functions app's code as a new version (cli/dev_reload.py).
    reload: bool = False
    environ: dict[str, str] = field(default_factory=lambda: dict(environment()))


def endpoints(settings: Settings) -> str:
    """Where the clients go, for a person: the common endpoint (or AWS), then each
    service's own."""
    where = settings.endpoint_url or f"AWS ({settings.region})"
    own = [f"{service} {url}" for service, url in sorted(settings.service_endpoints.items())]
    return "; ".join([where, *own])


def _one_cloudformation_endpoint(settings: Settings) -> None:
    """CloudFormation makes its tables, queues and bucket in its own region's services: a
    service sent elsewhere would never see them."""
    stack = settings.endpoint_for("cloudformation")
    for service in ("dynamodb", "sqs", "s3"):
        url = settings.endpoint_for(service)
        if url != stack:
            raise UsageError(
                f"{service} is at {url or 'AWS'} but CloudFormation at {stack or 'AWS'}"
                f" ({ENDPOINT_VARIABLE}*): its stack would make the resources where the"
                " orchestrator does not look; use --provision direct")


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--functions {spec!r}: expected module:factory")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--functions {spec!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"--functions {spec!r}: {module_name} has no callable {attr}")
    return factory  # type: ignore[no-any-return]


class LocalStack:
    def __init__(self, opts: StackOptions, echo: Callable[[str], None] = print) -> None:
        self.opts = opts
        self.echo = echo
        self.emulator: Any = None
        self.reloader: Any = None
        self.servers: list[Any] = []
        self.threads: list[threading.Thread] = []
        self.stop_event = threading.Event()
        self.runtime: Any = None
        self.api_url = ""
        self.functions_url = ""
        self.api_key: str | None = None
        self.dashboard_url: str | None = None
        self.metrics_url: str | None = None
        # Variables the Lambda mode set in this process's environment, and what they were.
        self._saved_env: dict[str, str | None] = {}
        # The interpreter's switch interval before the emulator process's was set.
        self._switch: float | None = None
        self._api_beat: Any = None  # the API's heartbeat (_beat_api), its last beat at stop
        # The embedded emulator's AWS model, and (--lambda) the Lambda limits built from it.
        self.aws_model: Any = None
        self._limits: Any = None

    def start(self) -> None:
        """Start every part, in order. The manifest is checked before anything starts (an
        invalid one raises `ManifestError` with nothing to undo); a part that fails to
        start stops the ones started before it, then its error is raised."""
        from orchestrator.manifest.loader import load_manifest

        # The manifest as it will be read below, with stand-ins for the variables this
        # stack sets for the functions it serves (their port and secret come later).
        planned = dict(self.opts.environ)
        if self.opts.functions_app:
            planned.setdefault("FUNCTIONS_URL",
                               f"http://{self.opts.host}:{self.opts.functions_port}")
            planned.setdefault("FUNCTIONS_SECRET", "stand-in")
        if self.opts.scripts_port is not None:
            planned.setdefault("SCRIPTS_URL", f"http://{self.opts.host}:{self.opts.scripts_port}")
            planned.setdefault("SCRIPTS_SECRET", "stand-in")
        load_manifest(self.opts.manifest, planned)
        try:
            self._start()
        except BaseException:
            # Above all the emulator's process: stopped, it removes its socket itself;
            # left to the interpreter's exit, its directory was removed under it.
            self.stop()
            raise

    def _start(self) -> None:
        from functions.sdk.serving import BackgroundServer
        from infra.emulator import calm_collector, keep_to_one_core
        from infra.stack import deploy_data_stack
        from orchestrator.adapters.aws import make_clients
        from orchestrator.api.app import create_app
        from orchestrator.manifest.loader import load_manifest
        from orchestrator.runtime import Runtime
        from orchestrator.services.access.apikeys import ApiKeys

        env = dict(self.opts.environ)
        settings = Settings.from_env(env)
        if self.opts.prefix:
            settings = settings.with_(prefix=self.opts.prefix)
        settings = settings.with_(sweep_interval=self.opts.sweep_interval)
        if settings.public_url is None and self.opts.api_port:
            # Hook URLs the workflows hand out point at this API (ORCH_PUBLIC_URL wins).
            host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(self.opts.host, self.opts.host)
            settings = settings.with_(public_url=f"http://{host}:{self.opts.api_port}")
        if self.opts.embedded_emulator:
            self.emulator = self._start_emulator()
            # It serves every service: no service's own endpoint stays in front of it.
            settings = settings.with_(endpoint_url=self.emulator.url, service_endpoints={})
            self.echo(f"emulator   {self.emulator.url}   (moto: DynamoDB, SQS, S3, CloudFormation)")
            # This process's own parts hand their requests to the emulator directly (over a
            # local socket to its process, or in-process); others reach it over HTTP.
            clients = self.emulator.attach(make_clients(settings))
            self.echo(f"           {getattr(self.emulator, 'facts', '') or emulator_facts()}")
        else:
            self.echo(f"endpoint   {endpoints(settings)}")
            without_emulator(*asked(self.opts.aws_model, self.opts.environ), settings,
                             self.echo)
            if self.opts.provision == "cloudformation":
                _one_cloudformation_endpoint(settings)

        if self.opts.functions_app:
            factory = load_factory(self.opts.functions_app)
            kwargs: dict[str, Any] = {}
            if "secret" in inspect.signature(factory).parameters:
                # Sign every call, as in production: a fresh shared secret per stack.
                secret = env.get("FUNCTIONS_SECRET") or secrets.token_hex(16)
                env["FUNCTIONS_SECRET"] = secret
                kwargs["secret"] = secret
            if self.opts.lambda_mode:
                from functions.sdk import lambda_adapter
                from infra.lambda_local import EventFront

                self._setenv("FUNCTIONS_APP", self.opts.functions_app)
                if "FUNCTIONS_SECRET" in env:
                    self._setenv("FUNCTIONS_SECRET", env["FUNCTIONS_SECRET"])
                lambda_adapter.forget()
                app: Any = EventFront(lambda_adapter.handler, function_url=True,
                                      limits=self._lambda_limits())
            else:
                app = factory(**kwargs)
            server = BackgroundServer(app, self.opts.host, self.opts.functions_port).start()
            self.servers.append(server)
            self.functions_url = server.url
            env.setdefault("FUNCTIONS_URL", server.url)
            self.echo(f"functions  {server.url}   ({self.opts.functions_app})")

        if self.opts.scripts_port is not None:
            self._start_scripts(env)
        manifest = load_manifest(self.opts.manifest, env)
        if self.emulator is None:
            clients = make_clients(settings)
        t0 = time.monotonic()
        if self.opts.provision == "direct":
            from infra.direct import create_data_resources

            for gap in create_data_resources(clients, settings.prefix):
                self.echo(f"resources  skipped, the endpoint does not support it: {gap}")
            how = "straight through the services' APIs"
        else:
            deploy_data_stack(clients, settings.prefix)
            how = f"stack {settings.prefix}-data"
        self.echo(
            f"resources  {how} from template.yaml "
            f"({time.monotonic() - t0:.1f}s): tables {settings.names.runs_table}, "
            f"{settings.names.steps_table}, {settings.names.control_table}; "
            f"queues {settings.names.dispatch_queue}, "
            f"{settings.names.timer_queue}; bucket {settings.names.blob_bucket}"
        )
        telemetry.setup(settings)  # before the API app is made: it gets its server spans
        self.runtime = rt = Runtime.build(settings, manifest, clients=clients)
        for line in register_at_start(rt.versions, rt.moves, rt.manifest):
            self.echo(f"versions   {line}")
        if self.opts.reload:
            self._start_reload(rt, env)
        if settings.api_auth:
            # The API wants a bearer key: make one for this stack and show it once.
            self.api_key = ApiKeys(rt.control).create("dev", time.time())
        if self.opts.lambda_mode:
            self._lambda_env(env, settings)
        badge = "DEV" if self.emulator is not None else None
        api_app: Any = (self._lambda_api() if self.opts.lambda_mode
                        else create_app(rt, badge=badge))
        api = BackgroundServer(api_app, self.opts.host, self.opts.api_port).start()
        self.servers.append(api)
        self.api_url = api.url
        auth = "bearer key below" if self.api_key else "no key needed: ORCH_API_AUTH=off"
        self.echo(f"api        {api.url}   ({auth})")
        self.dashboard_url = f"{api.url}/ui/runs"
        if settings.api_auth:
            from orchestrator.services.access.dashboard_logins import DashboardLogins

            token = DashboardLogins(rt.control).create(time.time())
            self.dashboard_url = f"{api.url}/ui/login?token={token}"
        self.echo(f"dashboard  {self.dashboard_url}"
                  + ("   (signs you in once)" if settings.api_auth else ""))
        # The whole stack's metrics, for Prometheus to scrape (api/metrics.py).
        self.metrics_url = f"{api.url}/metrics"
        self.echo(f"metrics    {self.metrics_url}   (Prometheus text format"
                  + ("; send the bearer key below" if settings.api_auth else "") + ")")
        if self.emulator is not None:
            calm_collector()
            core = keep_to_one_core() if self.opts.one_core else None
            if core is not None:
                spare = getattr(self.emulator, "core", None)
                beside = "" if spare is None else f", the emulator's process to core {spare}"
                self.echo(f"cpu        this process keeps to core {core}{beside} (one"
                          " interpreter lock each; --all-cores to lift)")
        if self.opts.lambda_mode:
            self._lambda_workers(rt)
        else:
            for i in range(self.opts.workers):
                self._spawn(f"worker-{i}", rt.worker().run, self.stop_event)
            self._spawn("sweeper", rt.sweeper().run, self.stop_event)
            self._beat_api(rt)
            self.echo(
                f"workers    {self.opts.workers} (threads: {settings.worker_threads} each); "
                f"sweeper every {settings.sweep_interval:g}s"
            )
        self._banner(manifest)

    def _start_scripts(self, env: dict[str, str]) -> None:
        """The script host, signed with a secret of its own (SCRIPTS_URL, SCRIPTS_SECRET
        for the manifest); in the Lambda mode behind its own handler, invoked as AWS
        would (functions.sdk.scripts.lambda_host)."""
        from functions.sdk.serving import BackgroundServer

        secret = env.get("SCRIPTS_SECRET") or secrets.token_hex(16)
        env["SCRIPTS_SECRET"] = secret
        if self.opts.lambda_mode:
            from functions.sdk.scripts.lambda_host import forget, handler
            from infra.lambda_local import EventFront

            self._setenv("SCRIPTS_SECRET", secret)
            forget()
            app: Any = EventFront(handler, function_url=True, limits=self._lambda_limits())
        else:
            from functions.sdk.scripts import ScriptHost

            app = ScriptHost(secret).app
        server = BackgroundServer(app, self.opts.host, self.opts.scripts_port or 0).start()
        self.servers.append(server)
        env.setdefault("SCRIPTS_URL", server.url)
        self.echo(f"scripts    {server.url}   (script host: durable shell scripts,"
                  " run: steps)")

    def _start_emulator(self) -> Any:
        """The embedded emulator: in a process of its own (infra/emulator/process.py),
        unless asked for in this one; in this one too, with one line saying why, where
        this system has no Unix sockets or the process did not start."""
        from infra.emulator import Emulator
        from infra.emulator.process import EmulatorProcess, StartFailed, unavailable
        from infra.emulator.tuning import SWITCH_INTERVAL, spare_core

        host, port = self.opts.host, self.opts.emulator_port
        # Refused here, in one line, before any process starts.
        path, model = loaded(*asked(self.opts.aws_model, self.opts.environ))
        if path is not None:
            self.echo(f"emulator   the AWS model of {path}")
        self.aws_model = model
        why = None
        if self.opts.emulator_process:
            why = unavailable()
            if why is None:
                core = spare_core() if self.opts.one_core else None
                try:
                    emulator = EmulatorProcess(
                        host, port, core, model="off" if path is None else str(path)).start()
                except StartFailed as exc:
                    why = f"its own process did not start: {exc.reason}"
                else:
                    self._switch = sys.getswitchinterval()
                    sys.setswitchinterval(SWITCH_INTERVAL)
                    return emulator
            self.echo(f"emulator   runs in this process: {why}")
        try:
            return Emulator(host, port, model=model).start()
        except OSError as exc:  # its port taken, its host not this machine's
            hint = (" (another --emulator-port, or 0 for a free one)"
                    if exc.errno == errno.EADDRINUSE else "")
            raise OrchestratorError(
                f"the embedded emulator did not start on {host}:{port}: {exc}{hint}"
                + ("" if why is None else f"; before that, {why}")
            ) from exc

    # ---- the Lambda mode ----------------------------------------------------------------

    def _lambda_env(self, env: dict[str, str], settings: Settings) -> None:
        """What template.yaml gives the deployed functions, for the handlers to read."""
        manifest = self.opts.manifest.resolve()
        values = {
            "LAMBDA_TASK_ROOT": str(manifest.parent), "ORCH_MANIFEST": manifest.name,
            "ORCH_PREFIX": settings.prefix, "ORCH_SWEEP_INTERVAL": str(settings.sweep_interval),
            "ORCH_API_AUTH": "on" if settings.api_auth else "off",
        }
        if settings.endpoint_url:
            values[ENDPOINT_VARIABLE] = settings.endpoint_url
        for service, url in settings.service_endpoints.items():
            values[SERVICE_ENDPOINT_VARIABLES[service]] = url
        for key in ("FUNCTIONS_URL", "FUNCTIONS_SECRET", "SCRIPTS_URL", "SCRIPTS_SECRET"):
            if key in env:
                values[key] = env[key]
        for key, value in values.items():
            self._setenv(key, value)
        from orchestrator import lambda_handlers

        lambda_handlers.forget()

    def _setenv(self, key: str, value: str) -> None:
        """Set a variable of this process for the handlers; `stop` puts it back."""
        old = set_environment(key, value)
        self._saved_env.setdefault(key, old)

    def _lambda_limits(self) -> Any:
        """With the AWS model on, the one Lambda account every function of this stack
        shares (its concurrency, its invocation delay: infra/lambda_limits.py); else None."""
        if self._limits is None and self.aws_model is not None:
            from infra.lambda_limits import LambdaLimits

            self._limits = LambdaLimits.from_model(self.aws_model)
        return self._limits

    def _lambda_api(self) -> Any:
        from infra.lambda_local import EventFront
        from orchestrator import lambda_handlers

        return EventFront(lambda_handlers.api, limits=self._lambda_limits())

    def _lambda_workers(self, rt: Any) -> None:
        from infra.lambda_local import QueueMapping, Schedule
        from orchestrator import lambda_handlers

        for name, url in (("dispatch", rt.queues.dispatch_url), ("timers", rt.queues.timer_url)):
            mapping = QueueMapping(rt.clients.sqs, url, lambda_handlers.worker,
                                   timeout=LAMBDA_WORKER_TIMEOUT, limits=self._lambda_limits())
            self._spawn(f"mapping-{name}", mapping.run, self.stop_event)
        self._spawn("schedule", Schedule(lambda_handlers.sweeper, limits=self._lambda_limits()).run,
                    self.stop_event)
        if self._limits is not None:
            self.echo(f"lambda     the AWS model: {self._limits.concurrency} concurrent"
                      " invocations across the functions, each after Lambda's invocation delay")
        self.echo("lambda     the handlers of orchestrator/lambda_handlers.py, invoked as AWS"
                  " does: API and functions behind HTTP API / Function URL events, SQS batches"
                  f" of 10 ({LAMBDA_WORKER_TIMEOUT:g} s invocations), the sweeper every minute")

    def _banner(self, manifest: Any) -> None:
        """Copy-paste lines that use this stack (and its key)."""
        names = list(manifest.workflows)
        wf = DEMO_WORKFLOW if DEMO_WORKFLOW in names else (names[0] if names else None)
        env = f"ORCHESTRATOR_URL={self.api_url}"
        auth = ""
        if self.api_key:
            env += f" ORCHESTRATOR_API_KEY={self.api_key}"
            auth = ' -H "Authorization: Bearer $ORCHESTRATOR_API_KEY"'
        self.echo("")
        self.echo("Use it (the key is shown only here):" if self.api_key else "Use it:")
        self.echo(f"  export {env}")
        if wf:
            self.echo(f"  orchestrator trigger {wf} --wait")
            self.echo(
                f"  curl -s -X POST $ORCHESTRATOR_URL/runs{auth}"
                " -H 'content-type: application/json'"
                f' -d \'{{"workflow": "{wf}", "input": {{}}}}\''
            )
        hooks = list(getattr(manifest, "webhooks", None) or {})
        if hooks:
            self.echo(
                f"  orchestrator webhook sign {hooks[0]} --body payload.json"
                f" --manifest {shlex.quote(str(self.opts.manifest))}"
                "   # prints a signed curl delivery"
            )

    def _beat_api(self, rt: Any) -> None:
        """The API's heartbeat, as `orchestrator api` beats (the Lambda form's API beats in
        its handler): the health page and `/metrics` list it among the stack's processes."""
        from orchestrator.services.health.heartbeat import Heartbeat, process_id

        beat = Heartbeat(rt.store, "api", process_id(), every=rt.settings.heartbeat_interval)
        self.threads.append(beat.start(self.stop_event))
        self._api_beat = beat

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self.threads.append(t)

    def run_demo(self, timeout: float = 120.0,
                 sleep: Callable[[float], None] = time.sleep) -> str:
        from orchestrator.cli.render import render_run

        rt = self.runtime
        if DEMO_WORKFLOW not in rt.manifest.workflows:
            raise UsageError(f"--demo needs a workflow named {DEMO_WORKFLOW!r} in the manifest")
        run, _ = rt.runs.start(DEMO_WORKFLOW, {})
        self.echo(f"\ndemo: started {run.run_id}")
        deadline = time.monotonic() + timeout
        view = rt.runs.view(run.run_id)
        while view["status"] in ("queued", "running") and time.monotonic() < deadline:
            sleep(0.1)  # a poll of the run's row until it ends
            view = rt.runs.view(run.run_id)
        self.echo(render_run(view))
        status: str = view["status"]
        return status

    def _start_reload(self, rt: Any, env: dict[str, str]) -> None:
        from orchestrator.cli.dev_reload import reloading

        self.reloader = reloading(self.opts.functions_app, self.functions_url,
                                  self.opts.lambda_mode, self.opts.host, rt, env, self.echo)

    def stop(self) -> None:
        self.stop_event.set()
        if self.reloader is not None:
            self.reloader.stop()
        for t in self.threads:
            t.join(timeout=10)
        if self._api_beat is not None:
            self._api_beat.stopped()  # leaves the alive list at once
            self._api_beat = None
        for s in reversed(self.servers):
            try:
                s.stop()
            except (OrchestratorError, RuntimeError):
                pass
        if self.emulator is not None:
            self.emulator.stop()
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        for key, value in self._saved_env.items():
            set_environment(key, value)
        self._saved_env.clear()
