"""The cluster under test: real processes on free local ports, each started, signalled,
restarted and finally stopped by its id (never by name), all of them at `close()`.

- `emulator`: `python -m infra.emulator --port P` (its state is the system's: never
  killed);
- `fn`: `python -m tests.chaos.ledger_server ...` (the function server, its ledger; it
  also serves every version of the durable backend, which the manifest declares and
  `start()` registers);
- `api`: `orchestrator api --manifest M --port P`, with `ORCH_API_AUTH=off`;
- `worker-1..3`: `orchestrator worker` with the botocore faults and aimed crashes of
  tests.chaos.faults;
- `sweeper-1..2`: `orchestrator sweeper`.

Every process is launched through `python -m tests.chaos.faults`, which also makes it
exit when the harness dies (no orphans). The data stack is deployed into
the emulator under a prefix of its own before the orchestrator processes start."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from tests.chaos.jsonl import JsonlWriter

__all__ = ["Cluster", "ClusterOptions", "Proc", "free_port"]

ROOT = Path(__file__).resolve().parents[2]
FN_SECRET = "chaos-secret"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, ok: Callable[[], bool], timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(every)


@dataclass
class ClusterOptions:
    workers: int = 3
    sweepers: int = 2
    step_timeout: float = 3.0
    fn_fault_rate: float = 0.1
    # Extra ORCH_* settings of every orchestrator process (override the defaults below).
    env: dict[str, str] = field(default_factory=dict)
    # botocore fault rates of the workers (tests.chaos.faults.DEFAULT_RATES otherwise).
    rates: dict[str, float] = field(default_factory=dict)


# Short timings: a lease is the step's timeout plus the margin.
ORCH_DEFAULTS = {
    "ORCH_SWEEP_INTERVAL": "1",
    "ORCH_LEASE_MARGIN": "2",
    # The defaults' ratios at a 1 s sweep: a lost dispatch resent after one interval,
    # a received message invisible for two, a wake read a fifth of one after it passed
    # and again after five (a write that landed late).
    "ORCH_REDISPATCH_AFTER": "1",
    "ORCH_WAKE_LAG": "0.2",
    "ORCH_VISIBILITY_TIMEOUT": "2",
    "ORCH_WAKE_LATE": "5",
    "ORCH_STEP_TIMEOUT": "3",
    "ORCH_OUTPUT_HARD_CAP": "1000000",
    "ORCH_API_AUTH": "off",
}


@dataclass
class Proc:
    """One process of the cluster, across its restarts (`incarnation`)."""

    name: str
    role: str
    argv: list[str]
    env: dict[str, str]
    logs: Path
    popen: subprocess.Popen[bytes] | None = None
    incarnation: int = 0
    paused: bool = False
    # Restart it when it is found dead (after `restart_delay`), unless the cluster closes.
    keep_up: bool = True
    restart_delay: float = 0.5
    died_at: float | None = None
    _log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class Cluster:
    """Start with `start()`, drive with `kill` / `pause` / `resume` / `restart_all`,
    always `close()` (also on failure: it is a context manager)."""

    def __init__(self, workdir: Path, seed: int, opts: ClusterOptions | None = None) -> None:
        self.dir = workdir
        self.seed = seed
        self.opts = opts or ClusterOptions()
        self.prefix = f"cx{seed % 1000:03d}{secrets.token_hex(3)}"
        self.procs: dict[str, Proc] = {}
        self.lock = threading.RLock()
        self.closed = threading.Event()
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "faults").mkdir(parents=True, exist_ok=True)
        (self.dir / "arm").mkdir(parents=True, exist_ok=True)
        self.faults = JsonlWriter(self.dir / "faults" / "harness.jsonl")
        self.ledger = self.dir / "ledger.jsonl"
        self.calm_file = self.dir / "calm"
        self.manifest = self.dir / "orchestrator.yml"
        self.emulator_url = ""
        self.api_url = ""
        self.fn_url = ""
        self.void_queue = ""
        self._supervisor: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, manifest_text: Callable[[str], str]) -> None:
        """Emulator, data stack, function server, API, workers, sweepers; `manifest_text`
        makes the manifest from the function server's URL."""
        emu_port, fn_port, api_port = free_port(), free_port(), free_port()
        self.emulator_url = f"http://127.0.0.1:{emu_port}"
        self.fn_url = f"http://127.0.0.1:{fn_port}"
        self.api_url = f"http://127.0.0.1:{api_port}"
        base = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        wrap = [sys.executable, "-m", "tests.chaos.faults"]
        self.add("emulator", "emulator",
                 [*wrap, "--module", "infra.emulator", "--port", str(emu_port)], base)
        self.spawn(self.procs["emulator"])
        wait_until("the emulator", lambda: _answers(self.emulator_url), 60)
        self.deploy()
        self.manifest.write_text(manifest_text(self.fn_url))
        self.register_versions()
        orch = {
            **base, **ORCH_DEFAULTS, **self.opts.env,
            "AWS_ENDPOINT_URL": self.emulator_url, "ORCH_PREFIX": self.prefix,
            "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_REGION": "us-east-1",
        }
        self.add("fn", "fn", [
            *wrap, "--module", "tests.chaos.ledger_server", "--port", str(fn_port),
            "--ledger", str(self.ledger), "--seed", str(self.seed), "--secret", FN_SECRET,
            "--step-timeout", str(self.opts.step_timeout),
            "--fault-rate", str(self.opts.fn_fault_rate), "--calm", str(self.calm_file),
        ], base)
        self.add("api", "api", [*wrap, "api", "--manifest", str(self.manifest),
                                "--port", str(api_port)], orch)
        for i in range(1, self.opts.workers + 1):
            name = f"worker-{i}"
            env = {
                **orch,
                "CHAOS_FAULT_LOG": str(self.dir / "faults" / f"{name}.jsonl"),
                "CHAOS_SEED": str(self.seed), "CHAOS_CALM": str(self.calm_file),
                "CHAOS_ARM": str(self.dir / "arm" / name), "CHAOS_VOID_QUEUE": self.void_queue,
                "CHAOS_RATES": json.dumps(self.opts.rates),
            }
            self.add(name, "worker", [*wrap, "worker", "--manifest", str(self.manifest)], env)
        for i in range(1, self.opts.sweepers + 1):
            self.add(f"sweeper-{i}", "sweeper",
                     [*wrap, "sweeper", "--manifest", str(self.manifest)], orch)
        for proc in self.procs.values():
            if proc.popen is None:
                self.spawn(proc)
        wait_until("the function server", lambda: _answers(self.fn_url + "/healthz"), 60)
        wait_until("the API", lambda: _answers(self.api_url + "/healthz"), 60)
        self._supervisor = threading.Thread(target=self.supervise, name="supervisor",
                                            daemon=True)
        self._supervisor.start()

    def deploy(self) -> None:
        from infra.stack import deploy_data_stack
        from orchestrator.adapters.aws import make_clients
        from orchestrator.settings import Settings

        clients = make_clients(Settings(endpoint_url=self.emulator_url, prefix=self.prefix))
        deploy_data_stack(clients, self.prefix, timeout=60)
        self.void_queue = clients.sqs.create_queue(QueueName=f"{self.prefix}-void")["QueueUrl"]

    def register_versions(self) -> None:
        """Register the versions the manifest declares, its `current:` current, as
        `orchestrator dev` does when it starts (`orchestrator api` and `worker` leave
        it to a deploy)."""
        from orchestrator.adapters.aws import make_clients
        from orchestrator.adapters.store import Store
        from orchestrator.manifest.loader import load_manifest
        from orchestrator.services.versions import Versions
        from orchestrator.settings import Settings

        settings = Settings(endpoint_url=self.emulator_url, prefix=self.prefix)
        store = Store(make_clients(settings).dynamodb, settings.names)
        manifest = load_manifest(self.manifest, {}, check_openapi=False)
        Versions(store, time.time).seed(manifest.backends)

    def add(self, name: str, role: str, argv: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, role, argv, {**env, "CHAOS_PROC": name}, self.dir / "logs")
        self.procs[name] = proc
        return proc

    def spawn(self, proc: Proc) -> None:
        with self.lock:
            if self.closed.is_set():
                return
            proc.incarnation += 1
            env = {**proc.env, "CHAOS_PROC": f"{proc.name}#{proc.incarnation}"}
            if proc._log is not None:
                proc._log.close()
            proc._log = (proc.logs / f"{proc.name}.log").open("ab")
            proc._log.write(f"---- {proc.name}#{proc.incarnation} {time.time():.3f}\n".encode())
            proc._log.flush()
            proc.popen = subprocess.Popen(
                proc.argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=proc._log,
                stderr=subprocess.STDOUT,
            )
            proc.paused = False
            proc.died_at = None
            if proc.incarnation > 1:
                self.note("restart", proc)

    def note(self, kind: str, proc: Proc | None, **detail: Any) -> None:
        self.faults.write({
            "t": time.time(), "proc": None if proc is None else f"{proc.name}#{proc.incarnation}",
            "pid": None if proc is None else proc.pid, "kind": kind, **detail,
        })

    def supervise(self) -> None:
        """Restart what died (killed by the schedule, or self-killed at an aimed point)."""
        while not self.closed.wait(0.05):
            with self.lock:
                for proc in self.procs.values():
                    if proc.popen is None or proc.alive() or not proc.keep_up:
                        continue
                    now = time.monotonic()
                    if proc.died_at is None:
                        proc.died_at = now
                    elif now - proc.died_at >= proc.restart_delay:
                        self.spawn(proc)

    # ---- faults ------------------------------------------------------------------------

    def kill(self, name: str, *, restart_after: float = 0.5, kind: str = "sigkill") -> None:
        with self.lock:
            proc = self.procs[name]
            if not proc.alive() or proc.pid is None:
                return
            self.note(kind, proc)
            proc.restart_delay = restart_after
            os.kill(proc.pid, signal.SIGKILL)
            proc.paused = False

    def pause(self, name: str) -> bool:
        with self.lock:
            proc = self.procs[name]
            if not proc.alive() or proc.paused or proc.pid is None:
                return False
            self.note("sigstop", proc)
            os.kill(proc.pid, signal.SIGSTOP)
            proc.paused = True
            return True

    def stopped(self, name: str) -> bool:
        """Is the process stopped (state T: it SIGSTOPped itself at an aimed point)?"""
        pid = self.procs[name].pid
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[0] == "T"

    def mark_paused(self, name: str) -> None:
        with self.lock:
            proc = self.procs[name]
            self.note("self-stopped", proc)
            proc.paused = True

    def resume(self, name: str) -> None:
        with self.lock:
            proc = self.procs[name]
            if proc.alive() and proc.paused and proc.pid is not None:
                self.note("sigcont", proc)
                os.kill(proc.pid, signal.SIGCONT)
            proc.paused = False

    def arm(self, name: str, point: str) -> None:
        self.note("arm", self.procs[name], point=point)
        tmp = self.dir / "arm" / f".{name}.tmp"
        tmp.write_text(point)
        tmp.replace(self.dir / "arm" / name)

    def disarm(self, name: str) -> bool:
        """Clear an arm file; True if it was still armed (the point never came)."""
        try:
            (self.dir / "arm" / name).unlink()
            return True
        except FileNotFoundError:
            return False

    def restart_all(self) -> None:
        with self.lock:
            victims = [p for p in self.procs.values() if p.role != "emulator" and p.alive()]
            self.note("restart-all", None, procs=[p.name for p in victims],
                      pids={p.name: p.pid for p in victims})
            for proc in victims:
                assert proc.pid is not None
                os.kill(proc.pid, signal.SIGKILL)
                proc.paused = False
            for proc in victims:
                assert proc.popen is not None
                proc.popen.wait(timeout=10)
                self.spawn(proc)

    def calm(self) -> None:
        """Faults stop: the calm file, every arm cleared, every paused process resumed,
        every dead one restarted at once."""
        self.calm_file.write_text("calm\n")
        self.note("calm", None)
        with self.lock:
            for proc in self.procs.values():
                self.disarm(proc.name)
                if proc.paused or (proc.alive() and self.stopped(proc.name)):
                    proc.paused = True
                    self.resume(proc.name)
                proc.restart_delay = 0.0

    def names(self, role: str) -> list[str]:
        return [p.name for p in self.procs.values() if p.role == role]

    # ---- the end -----------------------------------------------------------------------

    def stop_roles(self, *roles: str, timeout: float = 15.0) -> None:
        """SIGTERM (then SIGKILL past `timeout`) every process of these roles, for good."""
        with self.lock:
            procs = [p for p in self.procs.values() if p.role in roles]
            for p in procs:
                p.keep_up = False
                if p.alive() and p.pid is not None:
                    if p.paused:
                        os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            if p.popen is None:
                continue
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=10)

    def close(self) -> None:
        """Every process stopped (all of them, whatever happened before)."""
        if self.closed.is_set():
            return
        self.closed.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        order = ["worker", "sweeper", "api", "fn", "emulator"]
        for role in order:
            try:
                self.stop_roles(role, timeout=5.0)
            except OSError:
                pass
        for p in self.procs.values():
            if p.alive():
                p.popen.kill()  # type: ignore[union-attr]
            if p._log is not None:
                p._log.close()
        self.faults.close()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1.0)
        return True
    except httpx.HTTPError:
        return False
