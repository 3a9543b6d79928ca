"""The embedded AWS emulator: moto's server app, served over real HTTP from a daemon thread
of this process, made linearizable for DynamoDB (one DynamoDB request at a time:
dynamodb_lock.py) and sped up where moto repeats itself (speedups/, applied at start).

    with Emulator() as emulator:
        clients = make_clients(Settings(endpoint_url=emulator.url))

Standalone: `python -m infra.emulator --port 4566` (prints the URL; Ctrl-C stops).

moto keeps its state in module globals, so every Emulator of one process serves the same
accounts, tables and queues: give concurrent users distinct resource prefixes.

In-process: the clients of this same process need not go through a socket at all.
`emulator.attach(clients)` hands each request of those clients straight to moto
(inprocess.py: the same DynamoDB lock, moto's same parsing and serialization), where the
checks of what that reaches inside moto and botocore pass; other processes
(`orchestrator worker`, the CLI) still reach the emulator over HTTP at `.url`."""

from __future__ import annotations

import argparse
import threading
from types import TracebackType
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from infra.emulator import speedups
from infra.emulator.aws_model import AwsModel, from_environ
from infra.emulator.capabilities import Verdict, report, resolve, versions
from infra.emulator.dynamodb_lock import SerializeDynamoDB
from infra.emulator.inprocess import (
    IN_PROCESS,
    IN_PROCESS_WSGI,
    InProcess,
    check_once,
    clients_of,
    hand_over,
)
from infra.emulator.modelled import AwsTiming, Modelled, ModelledWSGI
from infra.emulator.tuning import calm_collector

__all__ = ["Emulator", "main", "self_check"]


class _Quiet:
    # A client that stops sending gives its thread back after this long (reads only: an
    # SQS long-poll waits in moto, not on the socket).
    timeout = 60
    # One log line per request would drown the test output; errors are still logged.
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def _server_app() -> Any:
    """moto's server app (what `moto_server` serves), the one part of moto the emulator
    cannot do without: a moto that moved it is refused with what is missing."""
    try:
        dispatcher = resolve("moto.moto_server.werkzeug_app:DomainDispatcherApplication")
        backend_app = resolve("moto.moto_server.werkzeug_app:create_backend_app")
    except LookupError as exc:
        raise RuntimeError(
            f"this moto ({versions()['moto']}) has no server app where the emulator looks for"
            f" it: {exc}; install a moto that pyproject.toml allows (uv sync --locked)") from exc
    return dispatcher(backend_app)


def _request_handler() -> type[WSGIRequestHandler]:
    """moto's own request handler where it has one (5.2.5: it keeps S3 metadata headers
    with underscores), else werkzeug's; quiet either way."""
    try:
        base = resolve("moto.moto_server.werkzeug_app:MotoRequestHandler")
    except LookupError:
        base = WSGIRequestHandler
    if not (isinstance(base, type) and issubclass(base, WSGIRequestHandler)):
        base = WSGIRequestHandler
    return type("_QuietHandler", (_Quiet, base), {})


# `Emulator(model=FROM_ENVIRONMENT)`: the AWS model ORCH_EMULATOR_MODEL names, read at start.
FROM_ENVIRONMENT = "environment"


class Emulator:
    """moto over HTTP on `host:port` (port 0 picks a free port; read it from `.url`).

    `model`: the AWS model (infra/emulator/aws_model.py) on every path into it, as an
    `AwsModel` or an `AwsTiming` (a test's clock, sleep and seed); None, none (and no
    wrapper installed); by default, what ORCH_EMULATOR_MODEL asks for when it starts."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 model: AwsModel | AwsTiming | str | None = FROM_ENVIRONMENT) -> None:
        self.host = host
        self.port = port
        self._model = model
        self.timing: AwsTiming | None = None
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._dispatcher: Any = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not running: call start() first")
        return f"http://{self.host}:{self._server.server_port}"

    def start(self) -> Emulator:
        if self._server is not None:
            raise RuntimeError(f"the emulator is already running at {self.url}")
        speedups.install()
        self._dispatcher = _server_app()
        model = from_environ() if self._model == FROM_ENVIRONMENT else self._model
        if isinstance(model, str):
            raise TypeError(f"model={model!r}: give an AwsModel, an AwsTiming or None")
        self.timing = AwsTiming(model) if isinstance(model, AwsModel) else model
        app: Any = SerializeDynamoDB(self._dispatcher)
        if self.timing is not None:
            app = ModelledWSGI(app, self.timing)
        # Threaded: a thread per request (werkzeug closes the connection after each
        # response), so a long-poll holds only its own thread and socket.
        try:
            server = make_server(
                self.host, self.port, app, threaded=True, request_handler=_request_handler()
            )
        except SystemExit as exc:
            # werkzeug prints a bind's failure (a port in use, a host not this machine's)
            # and exits; the OSError behind it is what a caller can act on.
            if isinstance(exc.__context__, OSError):
                raise exc.__context__ from None
            raise
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon stop() is noticed
            name=f"emulator:{server.server_port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def attach(self, clients: Any) -> Any:
        """Make these boto3 clients (a `Clients`, or any with `.meta.events`) call this
        emulator in-process, where this moto allows it (each piece checked once per
        process: see the module's docstring); a client it does not stays on HTTP.
        Returns `clients`."""
        if self._dispatcher is None:
            raise RuntimeError("the emulator is not running: call start() first")
        for client in clients_of(clients):
            service = client.meta.service_model.service_name
            handler = InProcess(self._dispatcher, self.url, service, client.meta.region_name)
            if handler.handler is not None:
                if check_once(IN_PROCESS, service, handler.probe) is not None:
                    continue  # this client calls the emulator over HTTP
            elif check_once(IN_PROCESS_WSGI, "wsgi", lambda: None) is not None:
                continue
            hand_over(client, self.modelled(handler), unsigned=handler.handler is not None)
        return clients

    def modelled(self, handler: InProcess) -> Any:
        """The handler, behind the AWS model when it is on (else the handler itself)."""
        return handler if self.timing is None else Modelled(handler, self.timing)

    def stop(self) -> None:
        """Stop accepting requests and close the socket. Requests in progress (a long-poll)
        finish on their own daemon threads."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def self_check() -> list[Verdict]:
    """Start a throwaway emulator, install the speed-ups, attach a DynamoDB and an SQS
    client and make one read-only call with each: every capability's verdict on this
    install (capabilities.report()), as `orchestrator doctor` prints them."""
    import boto3

    with Emulator() as emulator:
        session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local",
                                        region_name="us-east-1")
        calls: tuple[tuple[str, str, dict[str, Any]], ...] = (
            ("dynamodb", "list_tables", {"Limit": 1}),
            ("sqs", "list_queues", {"MaxResults": 1}), ("s3", "list_buckets", {}))
        for service, operation, kwargs in calls:
            client = emulator.attach(
                session.client(service, endpoint_url=emulator.url))  # type: ignore[call-overload]
            getattr(client, operation)(**kwargs)
    return report()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m infra.emulator",
        description="Serve the embedded AWS emulator (moto, linearizable DynamoDB) over HTTP.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4566)
    args = parser.parse_args(argv)
    emulator = Emulator(args.host, args.port).start()
    calm_collector()
    print(emulator.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
