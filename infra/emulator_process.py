"""The embedded emulator in a process of its own, for `orchestrator dev`.

In one process, moto's work (parsing, evaluating, serializing every request) and the
orchestrator's (the API, the workers, the sweeper, botocore's side of each request) take
turns under one interpreter lock, on one core, while the machine's other cores wait. Here
moto runs in a child process, which serves the HTTP endpoint other processes use, and the
parent's clients hand it their requests over a local socket (a Unix domain socket: no
HTTP parsing on either side, no signature, one connection per calling thread). Each
request is answered by the same in-process path as `Emulator.attach` takes (infra/
emulator.py): the same DynamoDB lock, the same speed-ups, the same answers.

    with EmulatorProcess() as emulator:         # the child is up, `.url` is its HTTP URL
        clients = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))

The child ends with its parent: it reads its standard input, which the parent holds
open, and exits when that closes (the parent exited, however it died).

The socket lives in a private directory (mode 0700) made under the temporary directory,
or under /tmp when a path there would be too long for a Unix socket (macOS's TMPDIR,
/var/folders/…/T/, takes half the room). A child that cannot start raises `StartFailed`
with the reason it printed (or its exit code), and nothing of it is left behind."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from types import TracebackType
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders

from infra.emulator import (
    _DIRECT,
    IN_PROCESS,
    IN_PROCESS_WSGI,
    Emulator,
    InProcess,
    _Body,
    _body_of,
    _check_once,
    _clients_of,
    calm_collector,
    hand_over,
)

__all__ = ["SOCKET_PATH_MAX", "SWITCH_INTERVAL", "EmulatorProcess", "Remote", "StartFailed",
           "spare_core", "unavailable"]

# How long a thread of the `dev` process may hold the interpreter lock while another
# waits for it (Python's default: 5 ms). Every request now waits on a socket with the
# lock released and must take it back to go on: with the default, a request answered
# while another thread ran waited up to 5 ms for it. Measured with tests/bench/
# turnabout.py (paired, `dev` with 1 ms against 5 ms, then 0.2 ms against 1 ms): W1 0.89
# then 0.92, W2 1.03 then 0.94. The emulator's process keeps the default: moto's SQS is
# not thread-safe (a receive iterates a set of in-flight messages that a concurrent
# delete changes), and a thread switched every 0.2 ms met that race within minutes.
SWITCH_INTERVAL = 0.0002

log = logging.getLogger("orchestrator.emulator")

# The longest path, in bytes, a Unix domain socket can be bound at: `sun_path` holds 104
# bytes on macOS and the BSDs, 108 on Linux, the terminating NUL included. The shorter
# one everywhere: a longer path fails to bind, and the child never says `ready`.
SOCKET_PATH_MAX = 103

_AUTHKEY_VARIABLE = "ORCH_EMULATOR_AUTHKEY"
_READY = "ready "
_FAILED = "failed "
_DIR_PREFIX = "orch-emulator-"
# What a socket's path adds to the directory its own is made in: "/", mkdtemp's name (the
# prefix and 8 random characters; `_launch` checks the path it got), "/socket".
_SOCKET_TAIL = len(f"/{_DIR_PREFIX}{'x' * 8}/socket")
# Where the socket's directory goes when one under the temporary directory would be too long.
_SHORT_PARENT = "/tmp"


class StartFailed(RuntimeError):
    """The emulator process did not start; `reason` says why, for a person."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the emulator process did not start: {reason}")
        self.reason = reason


def _socket_parent(tempdir: str, fallback: str = _SHORT_PARENT) -> str | None:
    """The directory to make the socket's own directory in: `tempdir`, or `fallback` when a
    socket under `tempdir` would be longer than SOCKET_PATH_MAX; None when neither will do."""
    for parent in dict.fromkeys((tempdir, fallback)):
        if (len(os.fsencode(parent)) + _SOCKET_TAIL <= SOCKET_PATH_MAX
                and os.path.isdir(parent)):
            return parent
    return None


def _no_short_path() -> str:
    return (f"a socket under {tempfile.gettempdir()} (TMPDIR) or {_SHORT_PARENT} would be"
            f" longer than the {SOCKET_PATH_MAX} bytes a Unix socket's path may have")


def unavailable() -> str | None:
    """Why the emulator cannot run in a process of its own here (None: it can)."""
    if not hasattr(socket, "AF_UNIX"):
        return "this system has no Unix domain sockets"
    if _socket_parent(tempfile.gettempdir()) is None:
        return _no_short_path()
    return None


def spare_core() -> int | None:
    """The core for the emulator process beside a parent that keeps to another
    (infra.emulator.keep_to_one_core takes the last): the first; None where there is
    one core only, or no way to say. Kept to it, the child answers sooner than when the
    system moves it around (a request's round trip: 60-100 us against 130-240 us on a
    2-core VM), and `dev` went faster on every workload (tests/bench/turnabout.py, child
    kept to a core against not: W1 0.90, W2 0.92, a 50-step durable chain 0.82, a
    25-branch parallel 0.87)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[0] if len(cpus) >= 2 else None


class Remote:
    """A botocore `before-send` handler that has the emulator process answer a request
    (over one connection per calling thread, opened at its first request)."""

    def __init__(self, address: str, authkey: bytes, url: str, service: str,
                 region: str) -> None:
        self.address = address
        self.authkey = authkey
        self.url = url
        self.service = service
        self.region = region
        self._local = threading.local()

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = Client(self.address, "AF_UNIX", authkey=self.authkey)
        return conn

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        url = str(request.url)
        if not url.startswith(self.url):
            return None
        headers = [(k, v.decode("utf-8") if isinstance(v, bytes) else v)
                   for k, v in request.headers.items()]
        conn = self._connection()
        try:
            conn.send((self.service, self.region, request.method, url, headers,
                       _body_of(request)))
            status, answer_headers, body = conn.recv()
        except (OSError, EOFError) as exc:
            self._local.conn = None
            raise ConnectionError(f"the emulator process went away: {exc}") from exc
        return AWSResponse(url, status, answer_headers, _Body(body))


class EmulatorProcess:
    """moto in a child process, over HTTP on `host:port` for everyone (port 0: a free
    one, read `.url`) and over a local socket for the clients `attach` is given."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, core: int | None = None
                 ) -> None:
        self.host = host
        self.port = port
        self.core = core
        self.url = ""
        self.address = ""
        # The emulator's line for the banner (infra.capabilities.facts, as the child
        # process has it: its speed-ups and its in-process path are its own).
        self.facts = ""
        self._authkey = secrets.token_bytes(16)
        self._child: subprocess.Popen[str] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> EmulatorProcess:
        """Start the child and wait for its `ready` line. Raises `StartFailed` when it
        does not come (the child and its directory are gone by then)."""
        if self._child is not None:
            raise RuntimeError(f"the emulator is already running at {self.url}")
        try:
            line = self._launch()
        except BaseException:
            self.stop()
            raise
        self.url, _, facts = line[len(_READY):].strip().partition(" ")
        # Whether moto's handlers are called directly or through its server app is the
        # child's business: this process's requests reach it over the socket either way.
        for path in (" · in-process calls", " · calls over HTTP"):
            facts = facts.replace(path, " · its own process, over a socket")
        self.facts = facts
        return self

    def _launch(self) -> str:
        """Make the socket's directory, start the child, and return its `ready` line."""
        parent = _socket_parent(tempfile.gettempdir())
        if parent is None:
            raise StartFailed(_no_short_path())
        try:
            self._dir = tempfile.TemporaryDirectory(prefix=_DIR_PREFIX, dir=parent)
            self.address = os.path.join(self._dir.name, "socket")
            if len(os.fsencode(self.address)) > SOCKET_PATH_MAX:
                raise StartFailed(f"its socket's path, {self.address}, is longer than"
                                  f" the {SOCKET_PATH_MAX} bytes a Unix socket's may have")
            env = {**os.environ, _AUTHKEY_VARIABLE: self._authkey.hex()}
            self._child = subprocess.Popen(
                [sys.executable, "-m", "infra.emulator_process", "--host", self.host,
                 "--port", str(self.port), "--socket", self.address,
                 *([] if self.core is None else ["--core", str(self.core)])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        except OSError as exc:  # no directory, no interpreter, no process to be had
            raise StartFailed(f"{type(exc).__name__}: {exc}") from exc
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if line.startswith(_READY):
            return line
        if line.startswith(_FAILED):  # the child's own words (its traceback: on stderr)
            raise StartFailed(line[len(_FAILED):].strip())
        if line:
            raise StartFailed(f"it printed {line.strip()!r} instead of {_READY.strip()!r}")
        try:
            code = self._child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            raise StartFailed("it closed its output before it was ready") from None
        raise StartFailed(f"it exited with code {code} before it was ready")

    @property
    def pid(self) -> int:
        if self._child is None:
            raise RuntimeError("the emulator is not running: call start() first")
        return self._child.pid

    def attach(self, clients: Any) -> Any:
        """Make these boto3 clients hand their requests to the emulator process (unsigned,
        as `Emulator.attach` does). Returns `clients`."""
        if self._child is None:
            raise RuntimeError("the emulator is not running: call start() first")
        for client in _clients_of(clients):
            service = client.meta.service_model.service_name
            handler = Remote(self.address, self._authkey, self.url, service,
                             client.meta.region_name)
            # Unsigned where moto's handler answers directly; signed where its app does.
            hand_over(client, handler, unsigned=service in _DIRECT)
        return clients

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _serve(emulator: Emulator, conn: Connection) -> None:
    """Answer one parent thread's requests, in order, until it goes away."""
    handlers: dict[tuple[str, str], InProcess] = {}
    with conn:
        while True:
            try:
                service, region, method, url, headers, body = conn.recv()
            except (EOFError, OSError):
                return
            handler = handlers.get((service, region))
            if handler is None:
                handler = handlers[(service, region)] = _handler(emulator, service, region)
            request = AWSPreparedRequest(method, url, HTTPHeaders(), body,
                                         stream_output=False)
            for name, value in headers:
                request.headers[name] = value
            try:
                answer = handler(request)
                assert answer is not None
                reply = (answer.status_code, dict(answer.headers), answer.content)
            except Exception as exc:  # what moto's server answers for one: a 500
                log.exception("the emulator failed on %s %s", service, url)
                reply = (500, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(
                    {"__type": "InternalFailure",
                     "message": f"the emulator failed: {type(exc).__name__}: {exc}"}
                ).encode())
            try:
                conn.send(reply)
            except OSError:
                return


def _handler(emulator: Emulator, service: str, region: str) -> InProcess:
    handler = InProcess(emulator._dispatcher, emulator.url, service, region)
    if handler.handler is not None:
        if _check_once(IN_PROCESS, service, handler.probe) is not None:
            handler.handler = None  # moto's server app answers it, as over HTTP
    else:
        _check_once(IN_PROCESS_WSGI, "wsgi", lambda: None)
    return handler


def _start(args: argparse.Namespace) -> tuple[Emulator, Listener]:
    """The emulator, on its port, and the socket's listener, accepting."""
    if args.core is not None:  # before any thread starts: each takes it on
        os.sched_setaffinity(0, {args.core})
    authkey = bytes.fromhex(os.environ.pop(_AUTHKEY_VARIABLE))
    emulator = Emulator(args.host, args.port).start()
    listener = Listener(args.socket, "AF_UNIX", authkey=authkey)

    def accept() -> None:
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError, AuthenticationError):
                continue  # a caller that failed the handshake, or went away during it
            threading.Thread(target=_serve, args=(emulator, conn), daemon=True).start()

    threading.Thread(target=accept, name="emulator-socket", daemon=True).start()
    for service in _DIRECT:  # their checks run now, for the facts
        _handler(emulator, service, "us-east-1")
    calm_collector()
    return emulator, listener


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.emulator_process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--core", type=int, help="keep to this core")
    args = parser.parse_args(argv)
    # Ctrl-C (and a SIGTERM sent to the process group, as `timeout` sends it) reaches
    # this process too: the parent decides when it ends, by closing the standard input
    # once its own threads have stopped calling.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        emulator, listener = _start(args)
        from infra.capabilities import facts as emulator_facts

        facts = emulator_facts()
    except Exception as exc:  # said to the parent; the traceback follows
        print(f"{_FAILED}{type(exc).__name__}: {exc}", flush=True)
        raise
    print(f"{_READY}{emulator.url} {facts}", flush=True)
    # The parent reads no more of it: anything printed later must not fill the pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.stdin.read()  # until the parent closes it (or dies)
    listener.close()
    emulator.stop()


if __name__ == "__main__":
    main()
