"""The embedded emulator in a process of its own, for `orchestrator dev`.

In one process, moto's work (parsing, evaluating, serializing every request) and the
orchestrator's (the API, the workers, the sweeper, botocore's side of each request) take
turns under one interpreter lock, on one core, while the machine's other cores wait. Here
moto runs in a child process, which serves the HTTP endpoint other processes use, and the
parent's clients hand it their requests over a local socket (a Unix domain socket: no
HTTP parsing on either side, no signature, one connection per calling thread). Each
request is answered by the same in-process path as `Emulator.attach` takes (inprocess.py,
in the child: child.py): the same DynamoDB lock, the same speed-ups, the same answers.

    with EmulatorProcess() as emulator:         # the child is up, `.url` is its HTTP URL
        clients = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))

The child ends with its parent: it reads its standard input, which the parent holds
open, and exits when that closes (the parent exited, however it died).

The socket lives in a private directory (mode 0700) made under the temporary directory,
or under /tmp when a path there would be too long for a Unix socket (macOS's TMPDIR,
/var/folders/…/T/, takes half the room). A child that cannot start raises `StartFailed`
with the reason it printed (or its exit code), and nothing of it is left behind."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Client, Connection
from types import TracebackType
from typing import Any

from botocore.awsrequest import AWSResponse

from infra.emulator.aws_model import MODEL_VARIABLE
from infra.emulator.inprocess import DIRECT, Body, body_of, clients_of, hand_over

__all__ = ["AUTHKEY_VARIABLE", "FAILED", "READY", "SOCKET_PATH_MAX", "EmulatorProcess", "Remote",
           "StartFailed", "unavailable"]


# The longest path, in bytes, a Unix domain socket can be bound at: `sun_path` holds 104
# bytes on macOS and the BSDs, 108 on Linux, the terminating NUL included. The shorter
# one everywhere: a longer path fails to bind, and the child never says `ready`.
SOCKET_PATH_MAX = 103

AUTHKEY_VARIABLE = "ORCH_EMULATOR_AUTHKEY"
READY = "ready "
FAILED = "failed "
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
                       body_of(request)))
            status, answer_headers, body = conn.recv()
        except (OSError, EOFError) as exc:
            self._local.conn = None
            raise ConnectionError(f"the emulator process went away: {exc}") from exc
        return AWSResponse(url, status, answer_headers, Body(body))


class EmulatorProcess:
    """moto in a child process, over HTTP on `host:port` for everyone (port 0: a free
    one, read `.url`) and over a local socket for the clients `attach` is given."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, core: int | None = None,
                 model: str | None = None) -> None:
        # The AWS model's file (or `aws`) for the child, as ORCH_EMULATOR_MODEL; None: the
        # child reads that variable from this process's environment, as it is.
        self.model = model
        self.host = host
        self.port = port
        self.core = core
        self.url = ""
        self.address = ""
        # The emulator's line for the banner (capabilities.facts, as the child
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
        self.url, _, facts = line[len(READY):].strip().partition(" ")
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
            env = {**os.environ, AUTHKEY_VARIABLE: self._authkey.hex()}
            if self.model is not None:
                env[MODEL_VARIABLE] = self.model
            self._child = subprocess.Popen(
                [sys.executable, "-m", "infra.emulator.child", "--host", self.host,
                 "--port", str(self.port), "--socket", self.address,
                 *([] if self.core is None else ["--core", str(self.core)])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        except OSError as exc:  # no directory, no interpreter, no process to be had
            raise StartFailed(f"{type(exc).__name__}: {exc}") from exc
        assert self._child.stdout is not None
        line = self._child.stdout.readline()
        if line.startswith(READY):
            return line
        if line.startswith(FAILED):  # the child's own words (its traceback: on stderr)
            raise StartFailed(line[len(FAILED):].strip())
        if line:
            raise StartFailed(f"it printed {line.strip()!r} instead of {READY.strip()!r}")
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
        for client in clients_of(clients):
            service = client.meta.service_model.service_name
            handler = Remote(self.address, self._authkey, self.url, service,
                             client.meta.region_name)
            # Unsigned where moto's handler answers directly; signed where its app does.
            hand_over(client, handler, unsigned=service in DIRECT)
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
