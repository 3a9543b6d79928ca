"""`versions retire V` racing starts and migrations: whatever the timing, a retire is
refused (409 `version_pinned`, or a conflict) or succeeds only when no open run may
still call V; a run that started on V just as V was retired is paused `version_gone`,
never called on V's URL, and can be migrated and finished.

As in a deployed stack, each part is a runtime of its own on one set of tables: the
deployer's (the API: promote, retire, migrate), the workers' (which have called every
version before, so they know where each is served), and a starter whose read of the
current version predates the deploy (a process's cache of it: the start of a run that
read the current version just before it moved). The interleavings are driven
deterministically: the retire's own store calls stop at a gate (after its mark, or
after its count and before the version is deleted) while the other side acts. The
three versions are real FunctionApps over HTTP, each behind a recorder of the requests
it received; DynamoDB and SQS are moto's, through boto3."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.aws import make_clients
from orchestrator.adapters.store.versions import VersionRows
from orchestrator.errors import Code, Conflict
from orchestrator.manifest.loader import manifest_from_text
from orchestrator.runtime import Runtime
from tests.integration.test_cli_durable import until
from tests.support.harness import Harness
from tests.support.versioned_fns import CALLS, waiting_for_signal
from tests.support.versioned_fns import MANIFEST as BASE
from tests.support.versioned_fns import create_app as create_fns

MANIFEST = BASE


class Seen:
    """A version's FunctionApp, recording when each request to it arrived."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.at: list[tuple[float, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            with self.lock:
                self.at.append((time.time(), str(scope.get("path"))))
        await self.app(scope, receive, send)

    def since(self, t: float) -> list[tuple[float, str]]:
        with self.lock:
            return [(at, path) for at, path in self.at if at >= t]


class Gated(VersionRows):
    """The deployer's version rows, whose retire stops at a gate: `marked` runs right
    after the mark (before the retire counts the pinned runs), `counted` right before
    the version is deleted (after the count)."""

    def __init__(self, rows: VersionRows) -> None:
        super().__init__(rows.control, rows.runs, rows.steps)
        self.gates: dict[str, Callable[[], None]] = {}

    def mark_retiring(self, backend: str, label: str, now: float) -> None:
        super().mark_retiring(backend, label, now)
        self.gates.pop("marked", lambda: None)()

    def remove(self, backend: str, label: str, mark: float, now: float) -> None:
        self.gates.pop("counted", lambda: None)()
        super().remove(backend, label, mark, now)


@dataclass
class Race:
    h: Harness  # the deployer's runtime (the API's)
    workers: Runtime
    starter: Runtime
    seen: dict[str, Seen]
    rows: Gated
    stop: threading.Event = field(default_factory=threading.Event)

    def start_stale(self, n: int) -> str:
        """A run started by the starter, on the version it last read as current."""
        run, _ = self.starter.runs.start("order", {"n": n})
        return run.run_id

    def run(self, run_id: str) -> Any:
        return self.h.rt.store.runs.get_run(run_id, time.time())

    def gone(self, run_id: str) -> bool:
        return (self.run(run_id).paused or {}).get("code") == Code.VERSION_GONE.value

    def waiting(self, run_id: str) -> bool:
        return waiting_for_signal(self.h.rt.store, run_id)

    def claimed(self, run_id: str) -> bool:
        """Its driver was claimed once at least, and let go."""
        driver = self.h.rt.store.drivers.get_driver(run_id)
        return bool(driver is not None and driver.attempt_started is not None
                    and driver.lease_owner is None)

    def finish(self, run_id: str, on: int) -> None:
        """Migrate a run paused `version_gone` to the current version, resume it, and
        see it finish there (every step body on version `on`)."""
        moves = self.h.rt.moves()
        moved = moves.migrate("shop", f"v{on}")
        assert run_id in moved["moved"] + moved["already"], moved
        assert self.run(run_id).version == f"v{on}"
        if self.run(run_id).paused is not None:
            self.h.rt.durable.resume(run_id)
        until(lambda: self.waiting(run_id))
        self.h.rt.signals.send(run_id, "go", {})
        assert self.h.wait(run_id)["output"] == {"charged_by": on}
        assert CALLS.of(run_id) == [("reserve", on), ("charge", on)]


@pytest.fixture
def race(build_harness: Any, tmp_path: Any) -> Iterator[Race]:
    seen = {f"v{i}": Seen(create_fns(i)) for i in (1, 2, 3)}
    servers = {label: BackgroundServer(app) for label, app in seen.items()}
    env = {label.upper(): s.__enter__().url for label, s in servers.items()}
    h = build_harness(MANIFEST, tmp_path, env)
    assert h.rt.versions.seed(h.rt.manifest.backends) == {}
    rows = Gated(h.rt.store.versions)
    h.rt.store.versions = rows

    def runtime() -> Runtime:
        manifest = manifest_from_text(MANIFEST, "orchestrator.yml", tmp_path, env)
        return Runtime.build(h.rt.settings, manifest, clients=make_clients(h.rt.settings))

    workers, starter = runtime(), runtime()
    # The starter read the current version before any deploy, and keeps it.
    starter.versions.ttl = 3600.0
    assert starter.versions.current("shop") == "v1"
    r = Race(h, workers, starter, seen, rows)
    t = threading.Thread(target=workers.worker().run, args=(r.stop,),
                         kwargs={"threads": 4, "wait": 1}, daemon=True)
    t.start()
    try:
        # The workers serve a run on v1 first: they know where v1 is served.
        warm = h.start("order", {"n": 0})
        until(lambda: r.waiting(warm))
        h.rt.signals.send(warm, "go", {})
        assert h.wait(warm)["output"] == {"charged_by": 1}
        yield r
    finally:
        r.stop.set()
        t.join(timeout=10)
        h.close()
        for s in servers.values():
            s.__exit__(None, None, None)


def test_a_start_that_lands_after_the_retire_is_paused_not_called(race: Race) -> None:
    moves = race.h.rt.moves()
    assert moves.promote("shop", "v2")["promoted"]
    assert moves.retire("shop", "v1")["retired"]
    retired = time.time()
    run_id = race.start_stale(1)
    assert race.run(run_id).version == "v1"
    until(lambda: race.gone(run_id) or race.waiting(run_id))
    assert race.seen["v1"].since(retired) == []
    assert race.gone(run_id)
    race.finish(run_id, on=2)


def test_a_start_between_the_count_and_the_delete_that_calls_it_refuses_the_retire(
        race: Race) -> None:
    """The run was written after the retire counted, and a worker claimed it before the
    version was deleted: the worker notes its use first, so the delete is refused."""
    moves = race.h.rt.moves()
    assert moves.promote("shop", "v2")["promoted"]
    started: list[str] = []

    def start_then_let_a_worker_call_it() -> None:
        run_id = race.start_stale(1)
        started.append(run_id)
        until(lambda: race.waiting(run_id))  # its first step ran, on v1

    race.rows.gates["counted"] = start_then_let_a_worker_call_it
    with pytest.raises(Conflict) as refused:
        moves.retire("shop", "v1")
    assert refused.value.code is Code.VERSION_PINNED
    assert "while it was being retired" in refused.value.message
    registry = race.h.rt.versions.registry("shop")
    assert "v1" in registry.live and registry.live["v1"].retiring is None
    (run_id,) = started
    race.h.rt.signals.send(run_id, "go", {})
    assert race.h.wait(run_id)["output"] == {"charged_by": 1}
    assert CALLS.of(run_id) == [("reserve", 1), ("charge", 1)]
    # Once it ended, v1 retires.
    assert moves.retire("shop", "v1")["retired"]


def test_a_start_before_the_count_makes_the_retire_refused(race: Race) -> None:
    moves = race.h.rt.moves()
    assert moves.promote("shop", "v2")["promoted"]
    started: list[str] = []
    race.rows.gates["marked"] = lambda: started.append(race.start_stale(1))
    with pytest.raises(Conflict) as refused:
        moves.retire("shop", "v1")
    assert refused.value.code is Code.VERSION_PINNED
    (run_id,) = started
    registry = race.h.rt.versions.registry("shop")
    assert "v1" in registry.live and registry.live["v1"].retiring is None
    # Its version is live: it runs there, and finishes.
    until(lambda: race.waiting(run_id))
    race.h.rt.signals.send(run_id, "go", {})
    assert race.h.wait(run_id)["output"] == {"charged_by": 1}
    assert CALLS.of(run_id) == [("reserve", 1), ("charge", 1)]


def test_a_migration_onto_a_version_being_retired_moves_nothing(race: Race) -> None:
    moves = race.h.rt.moves()
    assert moves.promote("shop", "v2")["promoted"]
    run_id = race.h.start("order", {"n": 1})
    until(lambda: race.waiting(run_id))
    assert race.run(run_id).version == "v2"
    moves.settle = 0.5  # a run it could not move is looked at again this long
    onto: list[dict[str, Any]] = []
    race.rows.gates["counted"] = lambda: onto.append(moves.migrate("shop", "v1"))
    assert moves.retire("shop", "v1")["retired"]
    assert onto[0]["moved"] == []
    assert race.run(run_id).version == "v2"
    race.h.rt.signals.send(run_id, "go", {})
    assert race.h.wait(run_id)["output"] == {"charged_by": 2}


@pytest.mark.parametrize("seed", range(6))
def test_retire_racing_starts_and_a_migration_never_strands_a_run(
        race: Race, seed: int) -> None:
    """Threads released together (seeded jitter): stale starts on v1, a migration of
    the open runs to v2, and the retire of v1. The retire is refused (version_pinned,
    or a conflict) or succeeds with no open run pinned to v1 but those paused
    `version_gone`, none of which ever reached v1; every run finishes."""
    rng = random.Random(seed)
    moves = race.h.rt.moves()
    moves.settle = 1.0
    assert moves.promote("shop", "v2")["promoted"]
    gate = threading.Barrier(4)
    started: list[tuple[str, float]] = []
    outcome: list[Any] = []

    def jitter() -> None:
        gate.wait(timeout=30)
        time.sleep(rng.uniform(0, 0.05))  # the seeded part of the interleaving

    def starts() -> None:
        jitter()
        for n in range(2):
            at = time.time()
            started.append((race.start_stale(n), at))

    def migrate() -> None:
        jitter()
        outcome.append(("migrate", moves.migrate("shop", "v2", version="v1")))

    def retire() -> None:
        jitter()
        try:
            outcome.append(("retire", moves.retire("shop", "v1")))
        except Conflict as exc:
            outcome.append(("refused", exc.code))

    threads = [threading.Thread(target=f) for f in (starts, migrate, retire)]
    for t in threads:
        t.start()
    gate.wait(timeout=30)
    for t in threads:
        t.join(timeout=60)
    (kind, what), = [o for o in outcome if o[0] != "migrate"]
    if kind == "refused":
        assert what in (Code.VERSION_PINNED, Code.CONFLICT)
        assert "v1" in race.h.rt.versions.registry("shop").live
    else:
        retired = time.time()
        assert "v1" not in race.h.rt.versions.registry("shop").live
        for run_id, _ in started:
            until(lambda rid=run_id: race.run(rid).version != "v1" or race.gone(rid))
        assert race.seen["v1"].since(retired) == []
    for run_id, _ in started:
        if race.gone(run_id):
            assert CALLS.of(run_id) == []  # never called on v1
            race.finish(run_id, on=2)
            continue
        until(lambda rid=run_id: race.waiting(rid))
        race.h.rt.signals.send(run_id, "go", {})
        assert race.h.wait(run_id)["status"] == "success"
        ended_on = int(str(race.run(run_id).version)[1:])
        assert CALLS.of(run_id)[-1] == ("charge", ended_on)
        assert {v for _, v in CALLS.of(run_id)} <= {1, 2}
