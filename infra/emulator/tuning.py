"""The knobs of a process that hosts the emulator: its garbage collector, the cores its
threads run on, and how often its threads hand the interpreter lock over.

`calm_collector()` and `keep_to_one_core()` serve a process that hosts moto and calls it
in-process (`orchestrator dev`, the bench harness, `python -m infra.emulator`);
`spare_core()` is the core of the emulator's own process beside such a parent, and
`SWITCH_INTERVAL` the parent's switch interval while its requests wait on the emulator's
socket (process.py). Each is a plain OS or interpreter setting: where the system has no
such setting (no `sched_setaffinity`, one core), it is left alone."""

from __future__ import annotations

import gc
import os

__all__ = ["SWITCH_INTERVAL", "calm_collector", "keep_to_one_core", "spare_core"]

# How long a thread of the `dev` process may hold the interpreter lock while another
# waits for it (Python's default: 5 ms). Every request now waits on a socket with the
# lock released and must take it back to go on: with the default, a request answered
# while another thread ran waited up to 5 ms for it. Measured with tests/bench/
# turnabout.py (paired, `dev` with 1 ms against 5 ms, then 0.2 ms against 1 ms): W1 0.89
# then 0.92, W2 1.03 then 0.94. The emulator's process keeps the default: moto's SQS is
# not thread-safe (a receive iterates a set of in-flight messages that a concurrent
# delete changes), and a thread switched every 0.2 ms met that race within minutes.
SWITCH_INTERVAL = 0.0002


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


def spare_core() -> int | None:
    """The core for the emulator process beside a parent that keeps to another
    (keep_to_one_core takes the last): the first; None where there is
    one core only, or no way to say. Kept to it, the child answers sooner than when the
    system moves it around (a request's round trip: 60-100 us against 130-240 us on a
    2-core VM), and `dev` went faster on every workload (tests/bench/turnabout.py, child
    kept to a core against not: W1 0.90, W2 0.92, a 50-step durable chain 0.82, a
    25-branch parallel 0.87)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[0] if len(cpus) >= 2 else None
