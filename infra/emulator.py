"""The embedded AWS emulator: moto's server app, served over real HTTP from a daemon thread
of this process, made linearizable for DynamoDB.

Stock moto is not linearizable under a threaded server: moto's DynamoDB backend evaluates a
condition and applies the write without a lock, so two racing conditional writes can both
succeed (with 32 racers, two winners in 5 to 9 rounds out of 50). Every invariant of the
orchestrator rests on conditional writes, so the emulator runs DynamoDB requests one at a
time. SQS and S3 requests run concurrently: an SQS long-poll (up to 20 s) holds its own
server thread and never delays anyone else.

    with Emulator() as emulator:
        clients = make_clients(Settings(endpoint_url=emulator.url))

Standalone: `python -m infra.emulator --port 4566` (prints the URL; Ctrl-C stops).

moto keeps its state in module globals, so every Emulator of one process serves the same
accounts, tables and queues: give concurrent users distinct resource prefixes.

In-process: the clients of this same process need not go through a socket at all.
`emulator.attach(clients)` hands each request of those clients straight to the same WSGI
app (the same DynamoDB lock, moto's same parsing and serialization), so the `dev`
process's workers and API skip the HTTP round trip, while other processes (`orchestrator
worker`, the CLI) still reach the emulator over HTTP at `.url`.

What that reaches inside moto and botocore is checked when it is first used
(infra/capabilities.py): `in-process` (moto's handler for a service, called as moto's own
botocore stub calls it: with botocore's request up to moto 5.2.3, with moto's normalized
Request from 5.2.4; a probe request proves it), `in-process:wsgi` (other services through
the server's app), and `unsigned` (botocore's signer and User-Agent handlers, unhooked). A
check that fails leaves that piece out, with one log line: the clients then call the same
emulator over HTTP, or sign their requests as usual."""

from __future__ import annotations

import argparse
import gc
import io
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from botocore import UNSIGNED
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ClientError
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.test import EnvironBuilder

from infra import moto_speedups
from infra.capabilities import (
    Capability,
    Reach,
    Verdict,
    check,
    record,
    report,
    resolve,
    versions,
)

__all__ = ["CAPABILITIES", "Emulator", "InProcess", "SerializeDynamoDB", "calm_collector",
           "keep_to_one_core", "self_check"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# One lock per process, not per Emulator: what it protects (moto's DynamoDB backends) is
# process-wide, so two Emulators in one process must not race each other either.
_DYNAMODB_LOCK = threading.Lock()


class SerializeDynamoDB:
    """WSGI middleware: one request at a time among those that touch moto's DynamoDB state,
    every other request straight through.

    Serialized: DynamoDB and DynamoDB Streams (X-Amz-Target "DynamoDB..."), and CloudFormation,
    whose stacks create and delete tables inside the DynamoDB backend. Not serialized: SQS
    (a long-poll may wait 20 s), S3 and the rest. The response body is read inside the lock,
    since a WSGI app may do its work lazily while the body is iterated."""

    def __init__(self, app: WSGIApp, lock: threading.Lock = _DYNAMODB_LOCK) -> None:
        self.app = app
        self.lock = lock

    @staticmethod
    def serializes(environ: dict[str, Any]) -> bool:
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            return True
        # SigV4: "AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, ..."
        return "/cloudformation/aws4_request" in environ.get("HTTP_AUTHORIZATION", "")

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if not self.serializes(environ):
            return self.app(environ, start_response)
        # The whole request is read before the lock is taken: a client that stalls half-way
        # through sending its body holds only its own thread, never everyone's DynamoDB.
        # Inside the lock moto only computes (the answer is sent after it is released), so
        # one request holds the lock for as long as moto takes to handle it, no longer.
        environ["wsgi.input"] = io.BytesIO(_read_body(environ))
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ["wsgi.input"]
    if not environ.get("CONTENT_LENGTH") and environ.get("wsgi.input_terminated"):
        return bytes(stream.read())  # chunked: werkzeug ends the stream at the last chunk
    length = int(environ.get("CONTENT_LENGTH") or 0)
    chunks, left = [], length
    while left > 0:
        chunk = stream.read(min(left, 1 << 16))
        if not chunk:
            break  # the client went away: moto answers the short body as malformed
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Body(io.BytesIO):
    """A response body as botocore reads it (moto's own stub does the same)."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


IN_PROCESS = Capability(
    "in-process", "this process's DynamoDB and SQS calls skip the socket",
    (Reach("moto.dynamodb.responses:DynamoHandler.dispatch"),
     Reach("moto.sqs.responses:SQSResponse.dispatch")))
IN_PROCESS_WSGI = Capability(
    "in-process:wsgi", "this process's S3 and CloudFormation calls skip the socket",
    (Reach("moto.moto_server.werkzeug_app:DomainDispatcherApplication.get_application"),))
# Checked on each client: what it unhooks are attributes of a botocore client object.
UNSIGNED_CALLS = Capability(
    "unsigned", "in-process requests are neither signed nor given a User-Agent", ())
CAPABILITIES = (IN_PROCESS, IN_PROCESS_WSGI, UNSIGNED_CALLS)

# A read-only request per service whose answer proves the direct path (target, body).
_PROBES = {
    "dynamodb": ("DynamoDB_20120810.ListTables", b'{"Limit": 1}'),
    "sqs": ("AmazonSQS.ListQueues", b'{"MaxResults": 1}'),
}
_checked: dict[str, str | None] = {}  # capability or service -> None (usable) or why not
_checked_lock = threading.Lock()


def recheck() -> None:
    """Forget what was checked of the in-process path (the next attach checks again)."""
    with _checked_lock:
        _checked.clear()


def _normalizer() -> Any:
    """How moto's handlers take a request. From moto 5.2.4 they take moto's own Request
    (moto.core.request.normalize_request makes one of botocore's, and its
    `from_wsgi_server` says which): that module, whose normalize_request is looked up at
    each call (a speed-up may replace it); up to 5.2.3, botocore's request as it is (None)."""
    try:
        request_class = resolve("moto.core.request:Request")
        resolve("moto.core.request:normalize_request")
    except LookupError:
        return None
    if not hasattr(request_class, "from_wsgi_server"):
        return None
    return resolve("moto.core.request")


class InProcess:
    """A botocore `before-send` handler that answers a request from moto in this process
    instead of sending it.

    DynamoDB and SQS requests go to moto's own handler for the service, as moto's in-process
    mode (`mock_aws`) calls it: botocore's prepared request (moto's normalized Request from
    5.2.4), no WSGI environ, no Flask app around it. DynamoDB's still run one at a time
    under the same lock as the HTTP path's. Any other service (S3, CloudFormation, ...)
    becomes a WSGI environ, exactly as werkzeug's server would build it, and goes through
    the same app as an HTTP request."""

    def __init__(self, dispatcher: Any, url: str, service: str,
                 region: str = "us-east-1") -> None:
        # moto's dispatcher works out the service of every request anew (it lists moto's
        # modules on disk, under a lock): a client's service is known, so its app is
        # looked up once and called directly, behind the same DynamoDB serialization.
        self.dispatcher = dispatcher
        self.url = url
        self.service = service
        self.app: WSGIApp | None = None
        direct = _DIRECT.get(service)
        self.handler = None if direct is None else direct()
        self.requests = _normalizer()
        # moto checks no signature: it reads the account and the region from the
        # Authorization header's credential scope. Requests handed over directly are not
        # signed (a SigV4 signature is a good part of botocore's time per request), and
        # carry that scope alone.
        self.scope = (f"AWS4-HMAC-SHA256 Credential=local/20000101/{region}/{service}"
                      "/aws4_request, SignedHeaders=host, Signature=unsigned")

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        if not str(request.url).startswith(self.url):
            return None  # another endpoint: send it as usual
        if self.handler is not None:
            return self._direct(request, self.handler)
        parts = urlsplit(request.url)
        body = _body_of(request)
        environ = EnvironBuilder(
            path=parts.path or "/", query_string=parts.query, method=request.method,
            headers=[(k, v.decode() if isinstance(v, bytes) else v)
                     for k, v in request.headers.items()],
            data=body,
            base_url=f"{parts.scheme}://{parts.netloc}",
        ).get_environ()
        status: list[str] = []
        headers: list[tuple[str, str]] = []

        def start_response(st: str, hd: list[tuple[str, str]], exc: Any = None) -> None:
            status.append(st)
            headers[:] = hd

        if self.app is None:
            self.app = SerializeDynamoDB(self.dispatcher.get_application(environ))
        out = self.app(environ, start_response)
        try:
            data = b"".join(out)
        finally:
            close = getattr(out, "close", None)
            if close is not None:
                close()
        return AWSResponse(request.url, int(status[0].split()[0]), dict(headers), _Body(data))

    def _direct(self, request: Any, handler: Callable[..., Any]) -> AWSResponse:
        # As moto's own botocore stub does: headers as text, the body read whole (before
        # the lock, like the HTTP path), moto's HTTP errors and ClientErrors as answers.
        for name, value in list(request.headers.items()):
            if isinstance(value, bytes):
                request.headers[name] = value.decode("utf-8")
        request.body = _body_of(request)
        if "Authorization" not in request.headers:
            request.headers["Authorization"] = self.scope
        url, headers = request.url, request.headers
        if self.requests is not None:
            request = self.requests.normalize_request(request)
            url, headers = request.raw_url, request.headers
        try:
            if self.service == "dynamodb":
                with _DYNAMODB_LOCK:
                    status, headers, body = handler(request, url, headers)
            else:
                status, headers, body = handler(request, url, headers)
        except HTTPException as exc:
            status, headers, body = exc.code, exc.get_headers(), exc.get_body()
        except ClientError as exc:  # what moto's Flask wrapper answers for one
            status, headers, body = 400, {}, exc.response["Error"]["Message"]
        if isinstance(body, str):
            body = body.encode("utf-8")
        return AWSResponse(str(url), int(status), _text_headers(headers), _Body(body))

    def probe(self) -> str | None:
        """Send one read-only request the direct way: None if moto answered it as it
        should, else why not (this moto takes its requests in another shape)."""
        if self.handler is None or self.service not in _PROBES:
            return None
        target, body = _PROBES[self.service]
        request = AWSPreparedRequest(
            "POST", f"{self.url}/",
            HTTPHeaders.from_dict({"X-Amz-Target": target,
                                   "Content-Type": "application/x-amz-json-1.0"}),
            body, stream_output=False)
        try:
            answer = self(request)
        except Exception as exc:  # any failure: this path is not for this moto
            return f"a {self.service} request failed in moto ({type(exc).__name__}: {exc})"
        if answer is None or answer.status_code != 200:
            status = None if answer is None else answer.status_code
            return f"a {self.service} request was answered {status}, not 200"
        return None


def hand_over(client: Any, handler: Callable[..., Any], *, unsigned: bool) -> None:
    """Have `handler` answer the client's requests (`before-send`, first); `unsigned`:
    its requests are neither signed nor given a User-Agent (moto's handlers read only
    the credential scope, which the answering side adds)."""
    client.meta.events.register_first("before-send", handler)
    if unsigned:
        hyphenized = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"choose-signer.{hyphenized}", _unsigned)
        _unhook(client, f"request-created.{hyphenized}")


def _unsigned(**_: Any) -> Any:
    return UNSIGNED


def _check_once(capability: Capability, key: str, probe: Callable[[], str | None]) -> str | None:
    """The capability's check, then `probe`, once per process for each key; its verdict
    (off if any key's check failed) is recorded for infra.capabilities.report()."""
    with _checked_lock:
        if key not in _checked:
            _checked[key] = check(capability) or probe()
            reasons = [r for k in _checked_keys(capability) if (r := _checked.get(k))]
            record(capability, (reasons[0] + " (calls go over HTTP)") if reasons else None)
        return _checked[key]


def _checked_keys(capability: Capability) -> list[str]:
    return list(_PROBES) if capability is IN_PROCESS else ["wsgi"]


def _unhook(client: Any, created: str) -> None:
    """Nor is anything done to a request that only its trip over the wire needs: its
    signature (moto reads the credential scope InProcess adds; `choose-signer` already
    makes it UNSIGNED, this saves the signer's own work) and its User-Agent, rebuilt by
    botocore for every request. Both handlers are private attributes of the client."""
    signer = getattr(getattr(client, "_request_signer", None), "handler", None)
    agent = getattr(getattr(client, "_user_agent_creator", None),
                    "rebuild_and_replace_user_agent_handler", None)
    missing = [name for name, h in (("_request_signer.handler", signer),
                                    ("_user_agent_creator.rebuild_and_replace_user_agent_"
                                     "handler", agent)) if h is None]
    with _checked_lock:
        if missing:
            reason = (f"botocore's client has no {', '.join(missing)} "
                      "(requests are still unsigned, through choose-signer)")
            _checked["unsigned"] = reason
        else:
            _checked.setdefault("unsigned", None)
        record(UNSIGNED_CALLS, _checked["unsigned"])
    for handler in (signer, agent):
        if handler is not None:
            client.meta.events.unregister(created, handler)


def _dynamodb_handler() -> Callable[..., Any]:
    return resolve("moto.dynamodb.responses:DynamoHandler").dispatch  # type: ignore[no-any-return]


def _sqs_handler() -> Callable[..., Any]:
    return resolve("moto.sqs.responses:SQSResponse").dispatch  # type: ignore[no-any-return]


# The services whose every request moto answers with one handler, whatever the path.
_DIRECT: dict[str, Callable[[], Callable[..., Any]]] = {
    "dynamodb": _dynamodb_handler,
    "sqs": _sqs_handler,
}


def _body_of(request: Any) -> bytes:
    body = request.body or b""
    if isinstance(body, str):
        return body.encode()
    if not isinstance(body, bytes):
        return bytes(body.read())
    return body


def _text_headers(headers: Any) -> dict[str, str]:
    items = headers.items() if hasattr(headers, "items") else headers
    return {str(k): str(v) for k, v in items}


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


class Emulator:
    """moto over HTTP on `host:port` (port 0 picks a free port; read it from `.url`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
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
        moto_speedups.install()
        self._dispatcher = _server_app()
        app = SerializeDynamoDB(self._dispatcher)
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
        for client in _clients_of(clients):
            service = client.meta.service_model.service_name
            handler = InProcess(self._dispatcher, self.url, service, client.meta.region_name)
            if handler.handler is not None:
                if _check_once(IN_PROCESS, service, handler.probe) is not None:
                    continue  # this client calls the emulator over HTTP
            elif _check_once(IN_PROCESS_WSGI, "wsgi", lambda: None) is not None:
                continue
            hand_over(client, handler, unsigned=handler.handler is not None)
        return clients

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


def calm_collector(young: int = 10_000) -> None:
    """For a process that hosts the emulator, once it is set up: moto keeps every item
    of every table as Python objects, and the cyclic collector's full passes walked them
    all again and again (a seventh to a fifth of a busy `dev` process's time went to
    them). What is alive now is set aside for good (`gc.freeze`), and collections come
    `young` allocations apart instead of 700 (older generations 50 and 100 of the younger
    apart, not 10). Garbage without cycles is still freed at once."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(young, 50, 100)


def keep_to_one_core() -> int | None:
    """Keep every thread of this process (and those it starts later) on one core; the
    core, or None where that cannot be done (not Linux, or one core only).

    For a process that hosts the emulator and calls it in-process: its threads take turns
    under one interpreter lock, and the moto work they share is most of what they do.
    Left to roam two cores, every hand-over of the lock wakes a thread on the other core
    and moto's objects move between the cores' caches: the same workload took 1.4 to 2
    times the CPU time and wall time (tests/bench/run.py, back to back). The other cores
    stay free for other processes (`orchestrator worker`, function servers, the CLI)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    core = cpus[-1]
    try:
        tasks = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tasks = [0]
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, {core})
        except OSError:  # a thread that ended meanwhile
            pass
    return core


def _clients_of(clients: Any) -> list[Any]:
    if hasattr(clients, "meta"):
        return [clients]
    return [getattr(clients, f.name) for f in fields(clients)]


def self_check() -> list[Verdict]:
    """Start a throwaway emulator, install the speed-ups, attach a DynamoDB and an SQS
    client and make one read-only call with each: every capability's verdict on this
    install (infra.capabilities.report()), as `orchestrator doctor` prints them."""
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
