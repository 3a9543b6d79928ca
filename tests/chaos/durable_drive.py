"""What the harness sends durable runs while they go, through the API as a client would,
each send written to `drive.jsonl` (the checker's record of what was sent):

- a `dsignals` run gets one signal per wait of durable_app.SIGNAL_WAITS, in that order
  (FIFO per name is then checkable), each with an Idempotency-Key of its own: some
  `early` (at once, before the run can wait for them), some `late` (once the run's view
  shows it waiting for a signal), some resent with the same key (a resend must queue
  nothing);
- a `devent` run gets its event (`key` = the run's name) once its step before the wait
  has committed (the event may land before the wait registers: it must not be missed),
  emitted twice with one event id;
- a `dtimeout` run gets an event only once its wait has timed out (it must change
  nothing).

- a `dgate` run's gate is answered (approve) by two clients at once, `X-Approver` a and
  b (one answer must win, the other be refused); or, on the seed's choice, not at all:
  once the gate has timed out, an answer is sent, which must be refused.

A send that is not answered (the API restarting) is retried with the same key until it
is, or until the deadline. The plan of a run is a function of the seed and its name."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tests.chaos.durable_app import EVENT, SIGNAL_WAITS
from tests.chaos.jsonl import JsonlWriter

__all__ = ["SignalPlan", "drive", "gate_plan", "signal_plan", "start_driving"]

POLL = 0.25
LATE_WAIT = 15.0  # how long a late signal waits for the run to wait, before it goes anyway


@dataclass(frozen=True)
class SignalPlan:
    signal: str  # the signal's name
    key: str  # its Idempotency-Key
    late: bool  # sent once the run waits for a signal
    resends: int  # how many times it is sent again with the same key


def signal_plan(seed: int, run_name: str) -> list[SignalPlan]:
    """One signal per wait, in the order of the waits."""
    rng = random.Random(f"{seed}/{run_name}/signals")
    counts: dict[str, int] = {}
    plan = []
    for name in SIGNAL_WAITS:
        counts[name] = counts.get(name, 0) + 1
        plan.append(SignalPlan(name, f"{run_name}-{name}-{counts[name]}", rng.random() < 0.5,
                               rng.choice((0, 0, 1, 2))))
    return plan


class _Driver:
    def __init__(self, api: str, run_id: str, run_name: str, out: JsonlWriter,
                 deadline: float, log: Callable[[str], None], halt: threading.Event) -> None:
        self.halt = halt
        self.api = api
        self.run_id = run_id
        self.run_name = run_name
        self.out = out
        self.deadline = deadline
        self.log = log
        self.client = httpx.Client(base_url=api, timeout=10.0)

    def view(self) -> dict[str, Any] | None:
        try:
            resp = self.client.get(f"/runs/{self.run_id}")
            if resp.status_code == 200:
                doc: dict[str, Any] = resp.json()
                return doc
        except httpx.HTTPError:
            pass
        return None

    def until(self, ok: Callable[[dict[str, Any]], bool], within: float) -> bool:
        """Poll the run's view until `ok` holds (True), it ends or `within` passes."""
        end = min(self.deadline, time.time() + within)
        while time.time() < end and not self.halt.is_set():
            view = self.view()
            if view is not None and ok(view):
                return True
            if view is not None and view.get("status") not in ("queued", "running"):
                return False
            time.sleep(POLL)
        return False

    def post(self, what: str, path: str, body: Any, headers: dict[str, str],
             record: dict[str, Any]) -> None:
        """POST until answered (a 5xx or no answer: again, the same key), and record it."""
        tries, sent = 0, time.time()
        while True:
            tries += 1
            try:
                resp = self.client.post(path, json=body, headers=headers)
                if resp.status_code < 500:
                    doc = resp.json() if resp.headers.get("content-type", "").startswith(
                        "application/json") else {}
                    self.out.write({**record, "t": sent, "answered": time.time(),
                                    "tries": tries, "status": resp.status_code,
                                    "duplicate": doc.get("duplicate"), "answer_id": doc.get("id"),
                                    "error": doc.get("error")})
                    if resp.status_code >= 400:
                        self.log(f"{what} for {self.run_name}: {resp.status_code} "
                                 f"{resp.text[:200]}")
                    return
            except httpx.HTTPError:
                pass
            if time.time() > self.deadline or self.halt.is_set():
                self.out.write({**record, "t": sent, "answered": None, "tries": tries,
                                "status": None})
                self.log(f"{what} for {self.run_name}: gave up after {tries} tries")
                return
            time.sleep(0.3)

    def signals(self, plan: list[SignalPlan]) -> None:
        for sp in plan:
            registered = False
            if sp.late:
                registered = self.until(lambda v: (v.get("waiting") or {}).get("kind") == "signal",
                                        LATE_WAIT)
            for n in range(1 + sp.resends):
                self.post("signal", f"/runs/{self.run_id}/signals/{sp.signal}",
                          {"key": sp.key, "n": n}, {"Idempotency-Key": sp.key},
                          {"ev": "signal", "run": self.run_id, "name": self.run_name,
                           "signal": sp.signal, "key": sp.key, "late": sp.late,
                           "registered": registered, "resend": n})

    def event(self, *, late: bool) -> None:
        if late:
            def ready(v: dict[str, Any]) -> bool:
                return any(s.get("kind") == "event" and s.get("status") == "timed_out"
                           for s in v.get("steps") or [])
        else:
            def ready(v: dict[str, Any]) -> bool:
                return any(s.get("step") == "open" and s.get("status") == "success"
                           for s in v.get("steps") or [])
        if not self.until(ready, self.deadline - time.time()):
            self.log(f"event for {self.run_name}: the run never got there")
            return
        eid = f"{self.run_name}-{'late' if late else 'ping'}"
        for n in range(2):  # the same event twice: one id, one delivery
            self.post("event", "/events", {"name": EVENT, "key": self.run_name, "id": eid,
                                           "data": {"n": n}}, {},
                      {"ev": "event", "run": self.run_id, "name": self.run_name,
                       "subject": self.run_name, "id": eid, "late": late, "resend": n})


def gate_plan(seed: int, run_name: str) -> str:
    """How the harness answers a dgate run: "race" (two approvals at once) or "late"."""
    return "late" if random.Random(f"{seed}/{run_name}/gate").random() < 0.3 else "race"


def _gate(d: _Driver, mode: str) -> None:
    path = f"/runs/{d.run_id}/approvals/gate"

    def gate_status() -> str | None:
        try:
            resp = d.client.get(path)
        except httpx.HTTPError:
            return None
        return str(resp.json().get("status")) if resp.status_code == 200 else None

    end = d.deadline
    want = ("timed_out",) if mode == "late" else ("pending", "approved", "timed_out")
    while (got := gate_status()) not in want:
        if time.time() > end or d.halt.is_set():
            d.log(f"gate of {d.run_name}: never {want} (last {got})")
            return
        time.sleep(POLL)
    record = {"ev": "answer", "run": d.run_id, "name": d.run_name, "mode": mode}
    if mode == "late":
        d.post("answer", path, {"approved": True, "comment": "late"}, {"X-Approver": "late"},
               {**record, "by": "late"})
        return
    threads = [threading.Thread(target=d.post, args=(
        "answer", path, {"approved": True, "comment": who}, {"X-Approver": who},
        {**record, "by": who})) for who in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def drive(api: str, workflow: str, run_id: str, run_name: str, seed: int, out: JsonlWriter,
          deadline: float, log: Callable[[str], None] = lambda _: None,
          halt: threading.Event | None = None) -> None:
    """Everything the harness sends to one durable run (nothing for most workflows),
    until it is done, `deadline` passes or `halt` is set."""
    d = _Driver(api, run_id, run_name, out, deadline, log, halt or threading.Event())
    try:
        if workflow == "dsignals":
            d.signals(signal_plan(seed, run_name))
        elif workflow == "devent":
            d.event(late=False)
        elif workflow == "dtimeout":
            d.event(late=True)
        elif workflow == "dgate":
            _gate(d, gate_plan(seed, run_name))
    finally:
        d.client.close()


def start_driving(api: str, workflow: str, run_id: str, run_name: str, seed: int,
                  out: JsonlWriter, deadline: float, log: Callable[[str], None],
                  halt: threading.Event) -> threading.Thread | None:
    """`drive` on a thread of its own, for the workflows that need it."""
    if workflow not in ("dsignals", "devent", "dtimeout", "dgate"):
        return None
    t = threading.Thread(target=drive, args=(api, workflow, run_id, run_name, seed, out,
                                             deadline, log, halt), daemon=True,
                         name=f"drive-{run_name}")
    t.start()
    return t
