"""Run the chaos harness on one seed: start the cluster, run the seed's workloads under its
fault schedule, stop the faults, let everything settle, check, print the figures.

    python -m tests.chaos.run --seed 7             # CI size (~1 minute)
    python -m tests.chaos.run --seed 7 --soak      # the issue's size, longer faults
    python -m tests.chaos.run --seed 7 --json      # the report as JSON on stdout

Exit code 1 if any check failed (the violations are printed with the faults injected
near them and the rows). The seed fixes the fault schedule, the runs and when they
start, the function server's faults and the workers' botocore fault sequences; the
interleaving of real processes is what varies from one replay to the next."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.checker import Report, check
from tests.chaos.cluster import FN_SECRET, Cluster, ClusterOptions, wait_until
from tests.chaos.deploy import DeployPlan, deploy, deploy_plan
from tests.chaos.durable_drive import start_driving
from tests.chaos.jsonl import JsonlWriter, read_jsonl
from tests.chaos.schedule import Event, make_schedule, play
from tests.chaos.snapshot import collect, dump, read_durable, read_ledger
from tests.chaos.workloads import CI_SIZE, SOAK_SIZE, Submission, manifest, plan, submit

__all__ = ["SeedResult", "main", "run_seed"]


@dataclass
class SeedResult:
    seed: int
    report: Report
    schedule: list[Event]
    elapsed: float
    rollout: DeployPlan
    workdir: Path
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.report.violations

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "ok": self.ok, "elapsed": round(self.elapsed, 1),
                "phases": self.phases, "workdir": str(self.workdir),
                "schedule": [e.describe() for e in self.schedule],
                "deploy": self.rollout.describe(), **self.report.to_json()}


def run_seed(seed: int, *, soak: bool = False, bound: float = 120.0,
             fault_seconds: float | None = None, env: dict[str, str] | None = None,
             workdir: Path | None = None, keep: bool = False,
             log: Callable[[str], None] = lambda _: None) -> SeedResult:
    """One seed, start to finish; every process it started is stopped when it returns."""
    began = time.monotonic()
    sizes = SOAK_SIZE if soak else CI_SIZE
    duration = fault_seconds if fault_seconds is not None else (90.0 if soak else 24.0)
    folder = workdir or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    opts = ClusterOptions(env=dict(env or {}))
    lease = opts.step_timeout + float({**_orch_env(), **opts.env}["ORCH_LEASE_MARGIN"])
    schedule = make_schedule(seed, duration, workers=opts.workers, sweepers=opts.sweepers,
                             lease=lease)
    rollout = deploy_plan(seed, duration)
    phases: dict[str, float] = {}
    ok = False
    halt = threading.Event()  # the durable runs' senders stop, whatever happens
    try:
        with Cluster(folder, seed, opts) as cluster:
            cluster.start(lambda fn: manifest(fn, FN_SECRET, opts.step_timeout))
            phases["start"] = round(time.monotonic() - began, 1)
            log(f"cluster up in {phases['start']}s: {cluster.prefix}, api {cluster.api_url}, "
                f"logs in {folder}")
            specs = plan(seed, sizes, spread=duration * 0.5)
            subs = [Submission(s, key=f"{cluster.prefix}-{s.name}") for s in specs]
            stop = threading.Event()
            drive = _Drive(cluster.api_url, seed, JsonlWriter(folder / "drive.jsonl"),
                           time.time() + duration + bound + 30.0, log, halt=halt)
            submitter = threading.Thread(
                target=_submit_all, args=(cluster.api_url, subs, seed, stop, log, drive),
                daemon=True)
            deploy_log = JsonlWriter(folder / "deploy.jsonl")
            deployer = threading.Thread(
                target=deploy, args=(cluster.api_url, rollout, deploy_log,
                                     time.time() + duration + 60.0, halt, log), daemon=True)
            t0 = time.monotonic()
            submitter.start()
            deployer.start()
            play(cluster, schedule, stop)
            submitter.join(timeout=120)
            cluster.calm()
            calm_at = time.time()
            phases["faults"] = round(time.monotonic() - t0, 1)
            log(f"faults stopped after {phases['faults']}s; settling (bound {bound:g}s)")
            ids = [s.run_id for s in subs if s.run_id]
            _settle(cluster, ids, calm_at + bound)
            # A promotion still answering when the faults stopped (the API was down a
            # while) ends meanwhile: waited for here, not before the calm.
            deployer.join(timeout=60)
            deploy_log.close()
            phases["settle"] = round(time.time() - calm_at, 1)
            drive.join(within=15.0)
            t1 = time.monotonic()
            _quiesce(cluster.ledger, folder / "faults" / "harness.jsonl",
                     opts.step_timeout + 5.0)
            cluster.stop_roles("worker", "sweeper")
            snap = collect(endpoint=cluster.emulator_url, prefix=cluster.prefix,
                           api_url=cluster.api_url, ledger=cluster.ledger,
                           faults=folder / "faults",
                           submitted={s.spec.name: (s.key, s.run_id) for s in subs},
                           calm_at=calm_at, drive=folder / "drive.jsonl",
                           deploy=folder / "deploy.jsonl")
        report = check(snap, bound=bound)
        phases["check"] = round(time.monotonic() - t1, 1)
        ok = not report.violations
        if not ok or keep or workdir is not None:
            dump(snap, folder / "snapshot.json")
    finally:
        halt.set()
        if ok and not keep and workdir is None:
            shutil.rmtree(folder, ignore_errors=True)
    return SeedResult(seed, report, schedule, time.monotonic() - began, rollout, folder,
                      phases)


def _orch_env() -> dict[str, str]:
    from tests.chaos.cluster import ORCH_DEFAULTS

    return dict(ORCH_DEFAULTS)


@dataclass
class _Drive:
    """The threads sending signals and events to durable runs (durable_drive)."""

    api: str
    seed: int
    out: JsonlWriter
    deadline: float
    log: Callable[[str], None]
    threads: list[threading.Thread] = field(default_factory=list)
    halt: threading.Event = field(default_factory=threading.Event)

    def start(self, sub: Submission) -> None:
        if sub.run_id is None:
            return
        t = start_driving(self.api, sub.spec.workflow, sub.run_id, sub.spec.name, self.seed,
                          self.out, self.deadline, self.log, self.halt)
        if t is not None:
            self.threads.append(t)

    def join(self, within: float) -> None:
        """Wait for the sends to end (their runs ended), then stop what is left."""
        end = time.monotonic() + within
        for t in self.threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        self.halt.set()
        for t in self.threads:
            t.join(timeout=5.0)
        if not any(t.is_alive() for t in self.threads):
            self.out.close()


def _submit_all(api: str, subs: list[Submission], seed: int, stop: threading.Event,
                log: Callable[[str], None], drive: _Drive) -> None:
    start = time.monotonic()
    for sub in subs:
        time.sleep(max(0.0, start + sub.spec.at - time.monotonic()))
        submit(api, sub, seed, time.time() + 90.0, log)
        drive.start(sub)


def _settle(cluster: Cluster, ids: list[str], until: float) -> None:
    """Poll the run rows (consistent reads) until all are terminal or `until` passes."""
    from orchestrator.adapters.aws import make_clients
    from orchestrator.settings import Settings

    ddb = make_clients(Settings(endpoint_url=cluster.emulator_url)).dynamodb
    table = f"{cluster.prefix}-runs"
    pending = set(ids)
    while pending and time.time() < until:
        for rid in list(pending):
            item = ddb.get_item(TableName=table, Key={"run_id": {"S": rid}},
                                ConsistentRead=True).get("Item") or {}
            if item.get("status", {}).get("S") not in ("queued", "running", None):
                pending.discard(rid)
        if pending:
            time.sleep(0.5)


def _quiesce(ledger: Path, harness_log: Path, within: float) -> None:
    """Wait (bounded) until every call the function server received has been answered
    (a hanging call answers after the step's timeout), but for those its restarts cut
    off: they never will."""
    def answered() -> bool:
        restarts = [float(f["t"]) for f in read_jsonl(harness_log)
                    if f.get("kind") == "restart" and str(f.get("proc")).startswith("fn#")]
        cut = max(restarts, default=0.0)
        calls = [*read_ledger(ledger), *read_durable(ledger)[1]]
        return all(c.done is not None or c.t < cut for c in calls)

    try:
        wait_until("calls in flight", answered, within, every=0.25)
    except TimeoutError:
        pass  # the server may have been killed mid-call: the checker counts those


def render(res: SeedResult, *, verbose: bool = False) -> str:
    f = res.report.figures
    lines = [f"seed {res.seed}: {'ok' if res.ok else 'VIOLATIONS'} in {res.elapsed:.1f}s "
             f"{res.phases}"]
    kinds = Counter(e.kind for e in res.schedule)
    lines.append(f"  schedule: {len(res.schedule)} events {dict(kinds)}, "
                 f"{json.dumps(res.rollout.describe())}")
    if verbose:
        lines += [f"    {json.dumps(e.describe())}" for e in res.schedule]
    for key in ("runs", "runs_by_status", "steps", "steps_by_status", "calls", "answers",
                "faults", "aimed", "duplicate_calls", "keys_called_more_than_once",
                "reexecutions_after_delivered_2xx", "ready_to_start", "ready_to_call",
                "due_to_start", "due_to_call", "history_start_before_due",
                "last_step_to_run_finished", "settle_after_calm", "largest_item",
                "dlq_messages", "durable", "versions", "flow", "findings", "violations"):
        lines.append(f"  {key}: {json.dumps(f.get(key))}")
    for v in res.report.violations:
        lines.append(f"  VIOLATION {v.check}: run {v.run} step {v.step}: {v.message}")
        for fault in v.faults[:6]:
            lines.append(f"      near: {json.dumps(fault)[:240]}")
        if verbose and v.rows:
            lines.append(f"      rows: {json.dumps(v.rows)[:4000]}")
    if not res.ok:
        lines.append(f"  logs, ledger and fault logs kept in {res.workdir}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    p.add_argument("--soak", action="store_true", help="the issue's size, 90 s of faults")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("--bound", type=float, default=120.0,
                   help="seconds after the faults stop within which every run must end")
    p.add_argument("--faults-for", type=float, default=None, help="seconds of faults")
    p.add_argument("--env", action="append", default=[], metavar="ORCH_X=V",
                   help="a setting of every orchestrator process (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the logs and ledger")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("-v", "--verbose", action="store_true", help="the schedule and the rows")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**6)
    out = sys.stderr if args.json else sys.stdout

    def log(msg: str) -> None:
        print(f"[seed {seed}] {msg}", file=sys.stderr, flush=True)

    print(f"seed {seed}", file=out, flush=True)
    env = dict(kv.split("=", 1) for kv in args.env)
    res = run_seed(seed, soak=args.soak, bound=args.bound, fault_seconds=args.faults_for,
                   env=env, workdir=args.workdir, keep=args.keep, log=log)
    print(render(res, verbose=args.verbose), file=out, flush=True)
    if args.json:
        print(json.dumps(res.to_json(), indent=2, default=str))
    sys.exit(0 if res.ok else 1)


if __name__ == "__main__":
    main()
