"""The seeded fault schedule of the processes: what happens to which process, when.

`make_schedule(seed, duration, ...)` is a pure function of its arguments (print it, and
the same seed replays it); `play()` carries it out against a Cluster in real time.

- `kill`: SIGKILL a worker; it is restarted after `restart` s;
- `aim`: arm a worker to SIGKILL itself at `point` (tests.chaos.faults.AIM_POINTS); a
  plain kill if the point has not come within `AIM_WAIT` s;
- `zombie`: a worker SIGSTOPs itself right after its next claim, and is SIGCONTed
  `hold` s later (past its lease); a plain SIGSTOP if no claim comes within `AIM_WAIT`;
- `kill-sweeper`, `zombie-sweeper`: a sweeper SIGKILLed, or SIGSTOPped for `hold` s;
- `kill-api`: SIGKILL the API, restarted after `restart` s (starts are retried);
- `restart-all`: once per schedule, SIGKILL every process but the emulator, restart all.

Besides the random `aim`s, every schedule aims one worker at `mid-call` (killed while
a durable step body runs) early on, while the durable runs go."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from tests.chaos.cluster import Cluster
from tests.chaos.faults import AIM_POINTS, STOP_POINT

__all__ = ["AIM_WAIT", "Event", "make_schedule", "play"]

AIM_WAIT = 8.0
KINDS = {"kill": 3.0, "aim": 4.0, "zombie": 2.0, "kill-sweeper": 1.5, "zombie-sweeper": 0.5,
         "kill-api": 1.0}


@dataclass(frozen=True)
class Event:
    at: float  # seconds after the faults start
    kind: str
    target: str | None = None
    point: str | None = None
    hold: float | None = None  # zombies: how long the process stays stopped
    restart: float | None = None  # kills: how long it stays dead

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def make_schedule(seed: int, duration: float, *, workers: int, sweepers: int, lease: float,
                  gap: tuple[float, float] = (1.5, 3.0)) -> list[Event]:
    """Events every `gap` seconds for `duration` seconds, and one restart of everything
    between 40% and 70% of the way."""
    rng = random.Random(f"{seed}/schedule")
    kinds, weights = list(KINDS), list(KINDS.values())
    events: list[Event] = []
    # A worker armed or stopped is not aimed at again until it is surely free.
    busy: dict[str, float] = {}
    t = rng.uniform(*gap)
    while t < duration:
        kind = rng.choices(kinds, weights)[0]
        free = [f"worker-{i}" for i in range(1, workers + 1)
                if busy.get(f"worker-{i}", 0.0) <= t]
        worker = rng.choice(free or [f"worker-{i}" for i in range(1, workers + 1)])
        sweeper = f"sweeper-{rng.randint(1, sweepers)}"
        restart = round(rng.uniform(0.2, 2.0), 2)
        hold = round(lease + rng.uniform(1.0, 4.0), 2)
        at = round(t, 2)
        if kind in ("aim", "zombie"):
            busy[worker] = t + AIM_WAIT + (hold if kind == "zombie" else 0.0)
        if kind == "kill":
            events.append(Event(at, kind, worker, restart=restart))
        elif kind == "aim":
            events.append(Event(at, kind, worker, point=rng.choice(AIM_POINTS), restart=restart))
        elif kind == "zombie":
            events.append(Event(at, kind, worker, hold=hold))
        elif kind == "kill-sweeper":
            events.append(Event(at, kind, sweeper, restart=restart))
        elif kind == "zombie-sweeper":
            events.append(Event(at, kind, sweeper, hold=hold))
        else:
            events.append(Event(at, kind, "api", restart=restart))
        t += rng.uniform(*gap)
    events.append(Event(round(duration * rng.uniform(0.4, 0.7), 2), "restart-all"))
    at = duration * rng.uniform(0.1, 0.35)

    def clear(worker: str) -> bool:  # no other arm of this worker overlaps this one
        return all(e.target != worker or abs(e.at - at) > AIM_WAIT + (e.hold or 0.0)
                   for e in events if e.kind in ("aim", "zombie"))

    free = [w for w in (f"worker-{i}" for i in range(1, workers + 1)) if clear(w)]
    if free:
        events.append(Event(round(at, 2), "aim", rng.choice(free), point="mid-call",
                            restart=round(rng.uniform(0.2, 2.0), 2)))
    return sorted(events, key=lambda e: e.at)


def play(cluster: Cluster, events: list[Event], stop: threading.Event) -> None:
    """Carry the schedule out, in real time from now; return early when `stop` is set."""
    start = time.monotonic()
    timers: list[threading.Timer] = []
    try:
        for ev in events:
            if stop.wait(max(0.0, start + ev.at - time.monotonic())):
                return
            if ev.kind in ("kill", "kill-sweeper", "kill-api"):
                assert ev.target is not None
                cluster.kill(ev.target, restart_after=ev.restart or 0.5)
            elif ev.kind == "aim":
                assert ev.target is not None and ev.point is not None
                cluster.procs[ev.target].restart_delay = ev.restart or 0.5
                cluster.arm(ev.target, ev.point)
                timers.append(_later(AIM_WAIT, _missed, cluster, ev.target, ev.point))
            elif ev.kind == "zombie":
                assert ev.target is not None
                cluster.arm(ev.target, STOP_POINT)
                threading.Thread(target=_zombie, args=(cluster, ev.target, ev.hold or 5.0),
                                 daemon=True).start()
            elif ev.kind == "zombie-sweeper":
                assert ev.target is not None
                if cluster.pause(ev.target):
                    timers.append(_later(ev.hold or 5.0, cluster.resume, ev.target))
            elif ev.kind == "restart-all":
                cluster.restart_all()
    finally:
        for t in timers:
            t.cancel()


def _missed(cluster: Cluster, name: str, point: str) -> None:
    """An aimed crash whose point did not come in time: a plain kill instead."""
    if cluster.disarm(name) and not cluster.calm_file.exists():
        cluster.note("aim-missed", cluster.procs[name], point=point)
        cluster.kill(name, restart_after=cluster.procs[name].restart_delay)


def _zombie(cluster: Cluster, name: str, hold: float) -> None:
    """Wait for the armed worker to stop itself after a claim (a plain SIGSTOP if it
    has not within AIM_WAIT), keep it stopped `hold` s, then SIGCONT it."""
    deadline = time.monotonic() + AIM_WAIT
    while not cluster.stopped(name):
        if cluster.calm_file.exists():
            return
        if time.monotonic() > deadline:
            if cluster.disarm(name):
                cluster.note("aim-missed", cluster.procs[name], point=STOP_POINT)
                if not cluster.pause(name):
                    return
                break
            deadline += 1.0  # it took the arm just now: it is stopping
        time.sleep(0.05)
    else:
        cluster.mark_paused(name)
    end = time.monotonic() + hold
    while time.monotonic() < end and not cluster.calm_file.exists():
        time.sleep(0.05)
    cluster.resume(name)


def _later(delay: float, fn: Any, *args: Any) -> threading.Timer:
    timer = threading.Timer(delay, fn, args)
    timer.daemon = True
    timer.start()
    return timer
