"""What the harness runs: the manifest's workflows, the runs of one seed, and starting
them through the API (retried across API restarts, one run per Idempotency-Key).

- `chain`: 30 steps in a row (inline successors, a lease carried down a chain);
- `fanout`: a root, 50 branches, one join of all 50 (wide promotion, a join counted 50
  times);
- `diamond`: a, then b and c, then d (a small join);
- `flaky`: two steps that fail their first attempts (one with `Retry-After`), then a
  join (retries and backoff);
- `halting` (`onFailure: halt`): a step that always fails next to slow steps and a
  chain (the stop pass: no step starts after `run.halted`);
- `independent` (`continue-independent`): a failing step, non-JSON and oversize
  answers, a 100 kB output (passed on intact through the blob bucket), independent
  branches (only the failed branches are skipped);
- `pooled`: `concurrency: [{limit: 3}, {limit: 2, key: "${{ input.tenant }}"}]` with
  `priority: "${{ input.p }}"`: a `/work` step, then two `/hold` steps in a row (a run
  in flight at the function for a while); its runs spread over TENANTS, each with a
  priority (`run_input`): at most 3 running at once, 2 of a tenant (the limits of N,
  keys taking turns, priority, with the admitting processes killed);
- `limited`: a `/work` step, then three `/hold` steps at once on backend `lim` (the same
  function server, `limits: {concurrency: 2}`): at most 2 of its calls in flight, from
  every run and worker;
- the durable workflows of durable_app (`dchain`, `dsignals`, `dparallel`, `devent`,
  `dtimeout`, `dclaim`, `dlock`, `dgate`), of backend `dfn`, whose versions (`v1`,
  `v2`, `v3`) the function server serves at /<v>/durable/<name>; what the harness
  sends them (signals, events, answers to gates) is durable_drive's, the deploy in the
  middle (deploy.py) moves them between versions.

Every `/work` step and every durable call may also meet the function server's random
faults (ledger_server)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.chaos.durable_app import VERSIONS as DURABLE_VERSIONS
from tests.chaos.durable_app import WORKFLOWS as DURABLE_WORKFLOWS

__all__ = ["CI_SIZE", "DURABLE_BACKEND", "FIRST_VERSION", "LIMITED_BACKEND",
           "LIMITED_CONCURRENCY", "POOL_LIMIT", "SOAK_SIZE", "TENANTS", "TENANT_LIMIT", "RunSpec",
           "Submission", "manifest", "plan", "run_input", "submit"]

# The backend of the durable workflows: durable_app's versions, all served by the
# function server (`<fn>/<v>`), the first current when the stack starts.
DURABLE_BACKEND = "dfn"
FIRST_VERSION = "v1"
WORK_RETRY = "{ max: 6, strategy: linear, delay: 200ms, maxDelay: 2s }"
# The flow-control workflows: `pooled`'s limits (all its runs, and one tenant's) and its
# runs' tenants; the backend `limited` calls, and its limit of calls in flight.
POOL_LIMIT = 3
TENANT_LIMIT = 2
TENANTS = ("acme", "globex", "initech")
LIMITED_BACKEND = "lim"
LIMITED_CONCURRENCY = 2
# Workflows whose runs come in a burst (a fraction of the spread): `pooled`'s runs queue
# for their limits while processes die, instead of each finding room on arrival.
BURST = {"pooled": 0.3}
# Runs per workflow.
CI_SIZE = {"chain": 1, "fanout": 1, "diamond": 3, "flaky": 2, "halting": 2, "independent": 2,
           "dchain": 1, "dsignals": 1, "dparallel": 1, "devent": 1, "dtimeout": 1,
           "dclaim": 3, "dlock": 3, "dgate": 2, "pooled": 12, "limited": 6}
SOAK_SIZE = {"chain": 3, "fanout": 4, "diamond": 20, "flaky": 8, "halting": 6,
             "independent": 6, "dchain": 3, "dsignals": 4, "dparallel": 3, "devent": 3,
             "dtimeout": 2, "dclaim": 6, "dlock": 6, "dgate": 4, "pooled": 36,
             "limited": 12}


def _step(name: str, route: str = "/work", deps: list[str] | None = None,
          payload: dict[str, Any] | None = None, retry: str = WORK_RETRY,
          backend: str = "fn") -> str:
    parts = [f"backend: {backend}, route: {route}"]
    if deps:
        parts.append(f"dependsOn: [{', '.join(deps)}]")
    if payload:
        inner = ", ".join(f"{k}: {v}" for k, v in payload.items())
        parts.append(f"payload: {{ {inner} }}")
    parts.append(f"retry: {retry}")
    return f"      {name}: {{ {', '.join(parts)} }}"


def manifest(fn_url: str, secret: str, timeout: float) -> str:
    """The manifest of every workflow above, its one backend the function server."""
    wf: dict[str, tuple[str, list[str]]] = {}
    wf["chain"] = ("halt", [_step("s00")] + [
        _step(f"s{i:02d}", deps=[f"s{i - 1:02d}"]) for i in range(1, 30)])
    branches = [f"b{i:02d}" for i in range(50)]
    wf["fanout"] = ("halt", [_step("root")] + [_step(b, deps=["root"]) for b in branches]
                    + [_step("join", deps=branches)])
    wf["diamond"] = ("halt", [_step("a"), _step("b", deps=["a"]), _step("c", deps=["a"]),
                              _step("d", deps=["b", "c"])])
    wf["flaky"] = ("halt", [
        _step("a"),
        _step("lin", "/flaky", ["a"], {"fail": 2},
              "{ max: 4, strategy: linear, delay: 300ms, maxDelay: 5s }"),
        _step("exp", "/flaky", ["a"], {"fail": 2, "retry_after": 1},
              "{ max: 4, strategy: exponential, delay: 200ms, maxDelay: 5s }"),
        _step("z", deps=["lin", "exp"]),
    ])
    wf["halting"] = ("halt", [
        _step("root"),
        _step("boom", "/fail", ["root"]),
        *[_step(f"slow{i}", deps=["root"], payload={"sleep": 1.5}) for i in (1, 2, 3)],
        _step("t0", deps=["slow1"]),
        *[_step(f"t{i}", deps=[f"t{i - 1}"]) for i in range(1, 5)],
        _step("after_boom", deps=["boom"]),
    ])
    wf["independent"] = ("continue-independent", [
        _step("root"),
        _step("boom", "/fail", ["root"]),
        _step("b1", deps=["boom"]), _step("b2", deps=["b1"]),
        _step("ok1", deps=["root"]),
        *[_step(f"ok{i}", deps=[f"ok{i - 1}"]) for i in (2, 3, 4)],
        _step("big", "/big", ["root"], {"bytes": 100000}),
        _step("bigjoin", deps=["big", "ok1"]),
        _step("nonjson", "/nonjson", ["root"]),
        _step("nj_after", deps=["nonjson"]),
        _step("huge", "/huge", ["root"], {"bytes": 1100000}),
        _step("join", deps=["ok4", "b2"]),
    ])
    wf["pooled"] = ("halt", [_step("a"), _step("h1", "/hold", ["a"]),
                             _step("h2", "/hold", ["h1"])])
    wf["limited"] = ("halt", [_step("a"), *[
        _step(f"l{i}", "/hold", ["a"], backend=LIMITED_BACKEND) for i in (1, 2, 3)]])
    heads = {"pooled": [
        f"    concurrency: [{{ limit: {POOL_LIMIT} }},"
        f' {{ limit: {TENANT_LIMIT}, key: "${{{{ input.tenant }}}}" }}]',
        '    priority: "${{ input.p }}"']}
    versions = ", ".join(f'{v}: "{fn_url}/{v}"' for v in DURABLE_VERSIONS)
    lines = [
        "backends:",
        f'  fn: {{ url: "{fn_url}", secret: "{secret}", timeout: {timeout:g}s }}',
        f'  {LIMITED_BACKEND}: {{ url: "{fn_url}", secret: "{secret}", timeout: {timeout:g}s,'
        f" limits: {{ concurrency: {LIMITED_CONCURRENCY} }} }}",
        f'  dfn: {{ versions: {{ {versions} }}, current: {FIRST_VERSION}, secret: "{secret}",'
        f" timeout: {timeout:g}s }}",
        "workflows:",
    ]
    for name, (on_failure, steps) in wf.items():
        lines += [f"  {name}:", f"    onFailure: {on_failure}", *heads.get(name, []),
                  "    steps:", *steps]
    lines += [f"  {name}: {{ backend: {DURABLE_BACKEND} }}" for name in DURABLE_WORKFLOWS]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class RunSpec:
    name: str  # the run's logical name: its input, its Idempotency-Key
    workflow: str
    at: float  # seconds after the workload starts


@dataclass
class Submission:
    spec: RunSpec
    key: str
    run_id: str | None = None
    created: bool | None = None
    tries: int = 0
    sent_at: float = 0.0
    answered_at: float | None = None
    errors: list[str] = field(default_factory=list)


def plan(seed: int, sizes: dict[str, int], spread: float) -> list[RunSpec]:
    """The runs of one seed, their start times spread over `spread` seconds (those of a
    BURST workflow over its fraction of it)."""
    rng = random.Random(f"{seed}/workload")
    names = [(wf, f"{wf}-{i}") for wf, n in sizes.items() for i in range(n)]
    rng.shuffle(names)
    return sorted((RunSpec(name, wf, round(rng.uniform(0, spread) * BURST.get(wf, 1.0), 2))
                   for wf, name in names), key=lambda s: s.at)


def run_input(spec: RunSpec, seed: int) -> dict[str, Any]:
    """A run's input: its name and the seed; a `pooled` run's also its tenant (in turn,
    by its number) and its priority (0, 10 or 50, in a cycle of its own)."""
    doc: dict[str, Any] = {"name": spec.name, "seed": seed}
    if spec.workflow == "pooled":
        n = int(spec.name.rsplit("-", 1)[1])
        doc["tenant"] = TENANTS[n % len(TENANTS)]
        doc["p"] = (0, 10, 50, 0)[n % 4]
    return doc


def submit(api_url: str, sub: Submission, seed: int, deadline: float,
           log: Callable[[str], None] = lambda _: None) -> Submission:
    """POST /runs until it is answered: connection errors and 5xx (the API restarting)
    are retried with the same Idempotency-Key, so a start retried is one run."""
    body = {"workflow": sub.spec.workflow, "input": run_input(sub.spec, seed)}
    sub.sent_at = time.time()
    with httpx.Client(timeout=10.0) as client:
        while True:
            sub.tries += 1
            try:
                resp = client.post(f"{api_url}/runs", json=body,
                                   headers={"Idempotency-Key": sub.key})
                if resp.status_code in (200, 201):
                    doc = resp.json()
                    sub.run_id, sub.created = doc["run_id"], doc["created"]
                    sub.answered_at = time.time()
                    return sub
                sub.errors.append(f"{resp.status_code} {resp.text[:200]}")
                if resp.status_code < 500:
                    log(f"start {sub.spec.name}: refused {resp.status_code}: {resp.text[:200]}")
                    return sub
            except httpx.HTTPError as exc:
                sub.errors.append(f"{type(exc).__name__}")
            if time.time() > deadline:
                log(f"start {sub.spec.name}: gave up after {sub.tries} tries")
                return sub
            time.sleep(0.3)
