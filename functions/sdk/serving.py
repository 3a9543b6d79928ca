"""Serve an app on uvicorn: `serve` in the foreground, or `BackgroundServer`, a real
uvicorn server in a background thread.

The local stack (`orchestrator dev`) hosts the example functions in a `BackgroundServer`
next to the worker, and the integration tests use it to talk to real servers over real HTTP.

    with BackgroundServer(app) as server:       # port=0: the OS picks a free port
        httpx.post(server.url + "/noop", json=...)

We bind the listening socket ourselves before uvicorn starts, so `url` carries the real
port, and connections made before uvicorn's loop is up simply wait in the backlog.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

import uvicorn

if TYPE_CHECKING:
    from functions.sdk.app import FunctionApp

__all__ = ["BackgroundServer", "serve"]


def serve(app: FunctionApp, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve `app` with uvicorn until interrupted (blocking)."""
    uvicorn.run(app, host=host, port=port, lifespan="off")


class BackgroundServer:
    """A uvicorn server in a daemon thread; `start()`/`stop()` or use as a context manager."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        startup_timeout: float = 10.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. ``http://127.0.0.1:54321``."""
        if self._socket is None:
            raise RuntimeError("the server is not started")
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> BackgroundServer:
        """Bind, start serving, and return once uvicorn is accepting connections."""
        if self._thread is not None:
            raise RuntimeError("the server was already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose
        # proto says TCP, and without it Nagle + delayed ACKs add ~40 ms to every response.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self.port = sock.getsockname()[1]

        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=max(1, round(self.shutdown_timeout)),
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(
            target=self._run, args=(server, sock), name=f"uvicorn:{self.port}", daemon=True
        )
        self._thread.start()

        # uvicorn exposes readiness only as a flag; poll it, bounded by the timeout and
        # cut short if the thread dies (a bad app or config).
        deadline = time.monotonic() + self.startup_timeout
        while not server.started:
            if not self._thread.is_alive():
                self._close_socket()
                raise RuntimeError(f"uvicorn on {self.url} exited during startup") from (
                    self._error
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"uvicorn on {self.url} did not start within {self.startup_timeout}s"
                )
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Ask uvicorn to shut down gracefully (in-flight requests finish) and join the
        thread; force the exit if it has not stopped within `shutdown_timeout`."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(self.shutdown_timeout + 1)
        if thread.is_alive():
            server.force_exit = True
            thread.join(self.shutdown_timeout)
        self._close_socket()
        if thread.is_alive():
            raise RuntimeError(f"uvicorn on {self.url} did not stop")

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, server: uvicorn.Server, sock: socket.socket) -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # reported by start(); a thread has nobody to raise to
            self._error = exc

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.close()
