"""What a step costs on AWS: the deployed stack's Lambda handlers run here as
`orchestrator dev --lambda` runs them (infra/lambda_local.py: HTTP API events, SQS
batches through an event source mapping of four invocations at once), against the
emulator, with the no-op function on uvicorn, and every request they make is priced with
AWS's rules (tests/bench/capacity.py) and the on-demand prices of orchestrator/prices.py.

  W1  a chain (100 steps; --quick 20)
  W2  a fan-out into one join (500 + 2 steps; --quick 50 + 2)
  W3  concurrent runs of a 5-step chain (50 runs; --quick 10), started by POST /runs
  W4  webhook-started runs of the same chain: signed deliveries POSTed to the API
      (50; --quick 10)
  D1  a durable chain of N no-op steps (functions/examples/noop.py's noop-chain), at two
      sizes so that growth shows: 100 and 1,000 (--quick 20 and 200)
  D2  a durable ctx.parallel of N no-op branches, all at once (noop-parallel): 100 and
      1,000 (--quick 20 and 100)

A durable step is one `step` of the workflow (the driver's row apart). The durable
protocol is version 2: one call streams many steps' checkpoints, which the worker
commits in TransactWriteItems of up to 100 (priced at AWS's transactional rate:
tests/bench/capacity.py). Targets (issue 21), printed and in the JSON's `targets`:
durable steps at $2 or less per million, at most 1.2 AWS requests per durable step at
every size. The no-op function counts the durable calls it answers (`durable_calls`: each
an invocation of the user's function on AWS, not priced, as the user's functions are not),
and the timed pass notes how long the handlers waited on each AWS operation
(`aws_wait_ms`: the emulator's speed, not DynamoDB's).

The emulator (moto, `python -m infra.emulator`) and the no-op function (uvicorn) run in
processes of their own, so that a handler's measured duration is its own work and its
waits, as on Lambda (DynamoDB's and the function's work are not the handler's).

Each run is started through the API handler (an HTTP API event, as API Gateway sends it),
its steps run by the worker handler on SQS events (batches of up to ten, as the event
source mapping sends them). Per step and per workload: AWS requests by operation, the
DynamoDB write and read request units (table by table, index by index), the billed SQS
requests, the Lambda invocations and their billed GB-s, and dollars per million steps
item by item, beside AWS Step Functions (Standard, Express) and Lambda durable functions
(how those are counted: tests/bench/bill.py).

Every workload runs twice. The first pass is metered: the capacity units need the items'
sizes, read by a client of the bench's own, and those reads slow the handlers. The second
is timed: the Lambda figures (invocations, billed duration) come from it, with nothing
but counting in the way. A Lambda bills an invocation's duration rounded up to the
millisecond at the function's MemorySize (template.yaml); the worker's includes its wait
on the function's HTTP answer. Durations measured here are this machine's: the emulator
answers in about a millisecond, DynamoDB in a few, a Function URL in more (the
sensitivity is printed: what 10 ms more per step would add).

The sweeper is not per step: it runs one invocation a minute while anything is in
flight, sweeping every ORCH_SWEEP_INTERVAL and sleeping between. Its passes are measured
on their own (runs flowing meanwhile), and a busy minute is priced: one invocation, the
passes its loop makes before its timeout, their requests, and its billed duration,
sleeps included (tests/bench/bill.py). Its invocation is paid by the minute, spread here
over --steps-per-second (100); its requests grow with the load, spread over the load
they were measured at.

Not counted: the user's functions (their invocations and compute), data transfer, the
DLQ alarm and idle costs (`orchestrator deploy --dry-run`), the event source mapping's
idle long polls on AWS (here its empty 1 s receives are counted as they come).

    python tests/bench/cost.py [--quick] [--json] [--steps-per-second N]

Figures go to stdout, progress to stderr."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from functions.examples.noop import create_app as noop_app  # noqa: E402
from functions.sdk.serving import BackgroundServer  # noqa: E402
from infra.emulator import calm_collector  # noqa: E402
from infra.lambda_events import Context  # noqa: E402
from infra.lambda_local import EventFront, QueueMapping  # noqa: E402
from infra.stack import deploy_data_stack  # noqa: E402
from infra.template import load_template  # noqa: E402
from orchestrator import lambda_handlers  # noqa: E402
from orchestrator.adapters.aws import make_clients  # noqa: E402
from orchestrator.cli.dev import LAMBDA_WORKER_TIMEOUT  # noqa: E402
from orchestrator.manifest.loader import manifest_from_text  # noqa: E402
from orchestrator.runtime import Runtime  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from orchestrator.webhook_signing import sign  # noqa: E402
from tests.bench.bill import MAP_CONCURRENCY, price_all, render, sweeper_minute  # noqa: E402
from tests.bench.capacity import (  # noqa: E402
    Meter,
    Tally,
    item_size,
    table_shapes,
    write_units,
)
from tests.bench.run import (  # noqa: E402
    HOOK_SECRET,
    CallCounter,
    RequestCounter,
    chain,
    fan,
    wait_all,
)


def manifest_text(sizes: dict[str, int]) -> str:
    return "\n".join([
        "backends:", '  fn: { url: "${FN}" }',
        "webhooks:", "  bench:", "    workflow: hooked",
        f'    verify: {{ scheme: github, secrets: ["{HOOK_SECRET}"] }}',
        "workflows:",
        "  w1:", "    steps:", chain(sizes["w1"]),
        "  w2:", "    steps:", fan(sizes["w2"]),
        "  w3:", "    steps:", chain(5),
        "  hooked:", "    steps:", chain(5),
        # Durable workflows, served by the same no-op app (functions/examples/noop.py).
        "  dchain: { backend: fn, workflow: noop-chain }",
        "  dpar: { backend: fn, workflow: noop-parallel }",
    ]) + "\n"


def memory_mb(template: dict[str, Any]) -> dict[str, int]:
    """Each handler's MemorySize (its own, else the Globals', else Lambda's 128)."""
    default = template.get("Globals", {}).get("Function", {}).get("MemorySize", 128)
    resources = template["Resources"]
    return {role: int(resources[name]["Properties"].get("MemorySize", default))
            for role, name in (("worker", "WorkerFunction"), ("api", "ApiFunction"),
                               ("sweeper", "SweeperFunction"))}


def sweeper_timeout(template: dict[str, Any]) -> float:
    default = template.get("Globals", {}).get("Function", {}).get("Timeout", 3)
    props = template["Resources"]["SweeperFunction"]["Properties"]
    return float(props.get("Timeout", default))


def thread_role() -> str:
    """Whose request this is when no handler said (see Invocations.timed)."""
    name = threading.current_thread().name
    if name.startswith("record"):  # the worker handler's pool of a batch's records
        return "worker"
    if name.startswith(("esm", "invoke")):  # the event source mapping: receive, delete
        return "esm"
    return "other"


class Invocations:
    """The handlers, timed: each invocation's duration, by function."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.lock = threading.Lock()
        self.seconds: dict[str, list[float]] = {}
        self.in_flight = 0
        self.last_end = time.monotonic()

    def timed(self, role: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def invoke(event: dict[str, Any], context: Any) -> Any:
            with self.lock:
                self.in_flight += 1
            t0 = time.perf_counter()
            try:
                with self.meter.role(role):
                    return handler(event, context)
            finally:
                took = time.perf_counter() - t0
                with self.lock:
                    self.seconds.setdefault(role, []).append(took)
                    self.in_flight -= 1
                    self.last_end = time.monotonic()

        return invoke

    def take(self) -> dict[str, list[float]]:
        with self.lock:
            out, self.seconds = self.seconds, {}
        return out

    def quiesce(self, quiet: float = 1.2, timeout: float = 30.0) -> None:
        """Wait until no invocation ran for `quiet` seconds (a mapping's receive cycle)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                idle = self.in_flight == 0 and time.monotonic() - self.last_end >= quiet
            if idle:
                return
            time.sleep(0.1)


def billed(seconds: list[float], mb: int) -> tuple[int, float]:
    """(invocations, GB-s): each duration rounded up to the millisecond."""
    return len(seconds), sum(math.ceil(s * 1000) / 1000 * mb / 1024 for s in seconds)


class Waits:
    """How long the handlers' AWS requests took, by operation (botocore's before-call
    to after-call: what a handler waits for, the emulator's work included). The event
    source mapping's own requests (its receives and deletes) are not a handler's."""

    def __init__(self, clients: Any, role_of: Callable[[], str]) -> None:
        self.role_of = role_of
        self.lock = threading.Lock()
        self.seconds: Counter[str] = Counter()
        for c in (clients.dynamodb, clients.sqs, clients.s3):
            c.meta.events.register("before-call", self._before)
            c.meta.events.register("after-call", self._after)
            c.meta.events.register("after-call-error", self._after)

    def _before(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        if self.role_of() != "esm":
            context["waits_from"] = (model.name, time.perf_counter())

    def _after(self, context: dict[str, Any], **_: Any) -> None:
        if "waits_from" not in context:
            return
        op, t0 = context.pop("waits_from")
        with self.lock:
            self.seconds[op] += time.perf_counter() - t0

    def take(self) -> Counter[str]:
        with self.lock:
            out, self.seconds = self.seconds, Counter()
        return out


class CountedCalls:
    """The no-op function's app with its durable calls counted (run.py's CallCounter);
    GET /bench/calls answers the count since the last GET and resets it."""

    def __init__(self, app: Any) -> None:
        self.counter = CallCounter(app)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") == "/bench/calls":
            body = json.dumps({"calls": self.counter.take()}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.counter(scope, receive, send)


class Bench:
    """The stack under measurement: the handlers on the emulator, and ways to start runs."""

    def __init__(self, api_url: str, observer: Runtime, meter: Meter, counter: RequestCounter,
                 calls: Invocations, memory: dict[str, int], waits: Waits,
                 fn_url: str) -> None:
        self.http = httpx.Client(base_url=api_url, timeout=60)
        self.waits = waits
        self.fn_calls_url = f"{fn_url}/bench/calls"
        self.observer = observer
        self.meter = meter
        self.counter = counter
        self.calls = calls
        self.memory = memory
        self.local = threading.local()

    def _client(self) -> httpx.Client:
        if not hasattr(self.local, "http"):
            self.local.http = httpx.Client(base_url=str(self.http.base_url), timeout=60)
        c: httpx.Client = self.local.http
        return c

    def start(self, workflow: str, i: int, payload: dict[str, Any] | None = None) -> str:
        body = {"workflow": workflow, "input": {"i": i} if payload is None else payload}
        r = self._client().post("/runs", json=body)
        if r.status_code != 201:
            raise SystemExit(f"POST /runs refused: {r.status_code} {r.text}")
        run_id: str = r.json()["run_id"]
        return run_id

    def deliver(self, i: int) -> str:
        body = json.dumps({"i": i, "kind": "cost"}).encode()
        headers = {"content-type": "application/json",
                   **sign("github", HOOK_SECRET, body, now=time.time())}
        r = self._client().post("/webhooks/bench", content=body, headers=headers)
        if r.status_code != 202:
            raise SystemExit(f"webhook refused: {r.status_code} {r.text}")
        run_id: str = r.json()["run_id"]
        return run_id

    def one(self, workflow: str, payload: dict[str, Any]) -> list[str]:
        return [self.start(workflow, 0, payload)]

    def many(self, start: Callable[[int], str], n: int, senders: int = 8) -> list[str]:
        with ThreadPoolExecutor(senders) as pool:
            return list(pool.map(start, range(n)))

    def durable_calls(self) -> int:
        """The durable calls the function answered since the last look."""
        calls: int = httpx.get(self.fn_calls_url, timeout=10).json()["calls"]
        return calls

    def measure(self, start: Callable[[], list[str]]) -> dict[str, Any]:
        """Run `start`'s runs to the end twice: metered (requests, capacity, SQS, the
        function's durable calls), then timed (Lambda invocations and durations, the
        requests' waits)."""
        out: dict[str, Any] = {}
        for metered in (True, False):
            self.calls.quiesce()
            self.meter.capacity = metered
            self.meter.take()
            self.counter.take()
            self.calls.take()
            self.waits.take()
            self.durable_calls()
            ids = start()
            wait_all(self.observer, ids)
            self.calls.quiesce()
            tallies, counted, seconds = self.meter.take(), self.counter.take(), self.calls.take()
            total = Tally()
            for t in tallies.values():
                total.add(t)
            # Every request reached the meter (a mapping's 1 s receive may straddle a
            # take: it counts in one window's before-call and the next one's after-call).
            if abs(sum(total.requests.values()) - sum(counted.values())) > 2:
                raise SystemExit(f"the meter saw {sum(total.requests.values())} requests, "
                                 f"botocore's before-call {sum(counted.values())}")
            if metered:
                out.update(runs=len(ids), total=total, by_role=tallies,
                           durable_calls=self.durable_calls())
            else:
                out.update(seconds=seconds, timed_requests=sum(counted.values()),
                           waits=self.waits.take())
        return out


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The handlers read their configuration from the environment, as on Lambda."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    lambda_handlers.forget()
    try:
        yield
    finally:
        lambda_handlers.forget()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_moto_capacity(c: Any, table: str) -> dict[str, Any]:
    """Whether the emulator's ReturnConsumedCapacity could stand in for AWS's: a 3 KB
    put and a strongly consistent read of it, and a transaction of two 1.5 KB puts,
    against the rules."""
    item = {"pk": {"S": "cost-check"}, "sk": {"S": "3kb"}, "blob": {"S": "x" * 3000}}
    put = c.put_item(TableName=table, Item=item, ReturnConsumedCapacity="TOTAL")
    get = c.get_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]},
                     ConsistentRead=True, ReturnConsumedCapacity="TOTAL")
    pair = [{"pk": {"S": "cost-check"}, "sk": {"S": f"tx{i}"}, "blob": {"S": "x" * 1500}}
            for i in range(2)]
    tx = c.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": i}}
                                               for i in pair], ReturnConsumedCapacity="TOTAL")
    for i in [item, *pair]:
        c.delete_item(TableName=table, Key={"pk": i["pk"], "sk": i["sk"]})
    size = item_size(item)
    return {
        "item_bytes": size,
        "put": {"moto": put["ConsumedCapacity"]["CapacityUnits"], "aws_rule": write_units(size)},
        "strong_read": {"moto": get["ConsumedCapacity"]["CapacityUnits"], "aws_rule": 1.0},
        "transaction": {
            "item_bytes": item_size(pair[0]),
            "moto": sum(x.get("CapacityUnits", 0.0) for x in tx.get("ConsumedCapacity", [])),
            # Two writes of each item (prepare, commit), 1 WRU per started KB each.
            "aws_rule": sum(2 * write_units(item_size(i)) for i in pair)},
        "note": "moto answers constants (1.0 per write, 0.5 per read): computed instead",
    }


@contextmanager
def served(module: str, *args: str) -> Iterator[str]:
    """`python -m module args` in a process of its own, which prints its URL first:
    the emulator's and the function's work is then not the handlers' (a Lambda's
    duration is its own work and its waits, DynamoDB's and the function's work is not)."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"python -m {module} did not start (said {url!r})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_noop() -> None:
    """The no-op function on uvicorn, its URL printed, until terminated."""
    server = BackgroundServer(CountedCalls(noop_app())).start()
    print(server.url, flush=True)
    threading.Event().wait()


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--serve-noop"]:
        serve_noop()
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Small workloads (well under a minute).")
    ap.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    ap.add_argument("--steps-per-second", type=float, default=100.0,
                    help="The sustained load the sweeper's busy minutes are spread over.")
    args = ap.parse_args(argv)
    sizes: dict[str, Any] = (
        {"w1": 20, "w2": 50, "w3": 10, "w4": 10, "d1": [20, 200], "d2": [20, 100],
         "sweep_passes": 2} if args.quick
        else {"w1": 100, "w2": 500, "w3": 50, "w4": 50, "d1": [100, 1000], "d2": [100, 1000],
              "sweep_passes": 11})

    def say(line: str) -> None:  # progress to stderr, figures to stdout
        print(line, file=sys.stderr, flush=True)

    template = load_template()
    memory = memory_mb(template)
    timeout = sweeper_timeout(template)
    results: dict[str, Any] = {"sizes": sizes, "memory_mb": memory,
                               "steps_per_second": args.steps_per_second}
    with served("infra.emulator", "--port", "0") as emulator_url, \
            served("tests.bench.cost", "--serve-noop") as fn_url, \
            tempfile.TemporaryDirectory() as tmp:
        settings = Settings(endpoint_url=emulator_url, prefix="cost", sweep_interval=5.0,
                            api_auth=False)
        plain = make_clients(settings)  # the bench's own: counted nowhere
        deploy_data_stack(plain, settings.prefix)
        names = settings.names
        results["moto_consumed_capacity"] = check_moto_capacity(plain.dynamodb,
                                                                names.control_table)
        text = manifest_text(sizes)
        (Path(tmp) / "cost.yml").write_text(text)
        manifest = manifest_from_text(text, "cost.yml", ROOT, {"FN": fn_url})
        observer = Runtime.build(settings, manifest, clients=plain)
        env = {"LAMBDA_TASK_ROOT": tmp, "ORCH_MANIFEST": "cost.yml", "FN": fn_url,
               "ORCH_PREFIX": settings.prefix, "ORCH_SWEEP_INTERVAL": "5",
               "ORCH_API_AUTH": "off", "AWS_ENDPOINT_URL": emulator_url}
        with environment(env):
            rt = lambda_handlers.container()  # the handlers' own clients: the counted ones
            shapes = table_shapes(plain.dynamodb, [names.runs_table, names.steps_table,
                                                   names.control_table])
            results["indexes"] = {t: [f"{i.name} ({i.projection})" for i in s.indexes]
                                  for t, s in shapes.items()}
            meter = Meter(rt.clients, plain.dynamodb, shapes, role_of=thread_role)
            counter = RequestCounter(rt.clients)
            waits = Waits(rt.clients, meter.current_role)
            calls = Invocations(meter)
            stop = threading.Event()
            worker = calls.timed("worker", lambda_handlers.worker)
            mappings = []
            for queue, url in (("dispatch", rt.queues.dispatch_url),
                               ("timers", rt.queues.timer_url)):
                m = QueueMapping(rt.clients.sqs, url, worker, timeout=LAMBDA_WORKER_TIMEOUT)
                t = threading.Thread(target=m.run, args=(stop,), name=f"esm-{queue}",
                                     daemon=True)
                mappings.append(t)
            with BackgroundServer(EventFront(calls.timed("api", lambda_handlers.api))) as api:
                calm_collector()  # as `orchestrator dev` does once its stack is up
                for t in mappings:
                    t.start()
                bench = Bench(api.url, observer, meter, counter, calls, memory, waits, fn_url)
                try:
                    say("warming up (a run and a delivery: the cold starts) …")
                    bench.meter.take()
                    wait_all(observer, [bench.start("w3", -1), bench.deliver(-1)])
                    calls.quiesce()
                    results["cold_start_ms"] = {
                        role: round(max(s) * 1000, 1) for role, s in calls.take().items()}
                    # The durable runs first: the emulator (moto) copies the whole steps
                    # table for each item of a TransactWriteItems, so its time to commit
                    # grows with the rows W1-W4 leave (DynamoDB's does not).
                    results["durable"] = run_durable(bench, sizes, say)
                    results["workloads"] = run_workloads(bench, sizes, say)
                    say(f"sweeper: {sizes['sweep_passes']} passes while runs flow …")
                    results["sweeper"] = sweeper_phase(
                        bench, sizes["sweep_passes"], timeout, rt.settings.sweep_interval,
                        memory["sweeper"])
                finally:
                    stop.set()
                    for t in mappings:
                        t.join(timeout=15)
    price_all(results)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def run_workloads(bench: Bench, sizes: dict[str, int],
                  say: Callable[[str], None]) -> dict[str, Any]:
    plans: list[tuple[str, str, int, Callable[[], list[str]], int]] = [
        ("w1", f"W1 chain of {sizes['w1']}", sizes["w1"],
         lambda: [bench.start("w1", 0)], sizes["w1"]),
        ("w2", f"W2 fan-out of {sizes['w2']} into one join", sizes["w2"] + 2,
         lambda: [bench.start("w2", 0)], 2 + math.ceil(sizes["w2"] / MAP_CONCURRENCY)),
        ("w3", f"W3 {sizes['w3']} concurrent runs of a 5-step chain", 5,
         lambda: bench.many(lambda i: bench.start("w3", i), sizes["w3"]), 5),
        ("w4", f"W4 {sizes['w4']} webhook deliveries, each a 5-step chain", 5,
         lambda: bench.many(bench.deliver, sizes["w4"]), 5),
    ]
    out: dict[str, Any] = {}
    for key, label, steps_per_run, start, critical_path in plans:
        say(f"{label} (metered, then timed) …")
        m = bench.measure(start)
        steps = steps_per_run * m["runs"]
        out[key] = summarize(label, m, steps, steps_per_run, critical_path, bench.memory)
    return out


def run_durable(bench: Bench, sizes: dict[str, Any],
                 say: Callable[[str], None]) -> dict[str, Any]:
    """D1 and D2, each at two sizes (the growth shows): one run each, started by POST
    /runs, a durable step being one `step` of the workflow (the driver apart)."""
    plans: list[tuple[str, str, int, dict[str, int], int]] = []
    for n in sizes["d1"]:
        plans.append((f"d1_{n}", f"D1 durable chain of {n}", n, {"steps": n}, n))
    for n in sizes["d2"]:
        # Step Functions' counterpart: an inline Map of n Tasks, MAP_CONCURRENCY at once.
        plans.append((f"d2_{n}", f"D2 durable parallel of {n}, all at once", n,
                      {"branches": n, "max": n}, math.ceil(n / MAP_CONCURRENCY)))
    out: dict[str, Any] = {}
    for key, label, n, payload, critical_path in plans:
        workflow = "dchain" if key.startswith("d1") else "dpar"
        say(f"{label} (metered, then timed) …")
        m = bench.measure(functools.partial(bench.one, workflow, payload))
        out[key] = summarize(label, m, n, n, critical_path, bench.memory)
        out[key]["durable"] = True
    return out


def summarize(label: str, m: dict[str, Any], steps: int, steps_per_run: int,
              critical_path: int, memory: dict[str, int]) -> dict[str, Any]:
    total: Tally = m["total"]
    lam = {role: billed(s, memory.get(role, 128)) for role, s in m["seconds"].items()}

    def per(x: float) -> float:
        return x / steps

    return {
        "label": label, "runs": m["runs"], "steps": steps, "steps_per_run": steps_per_run,
        "critical_path_tasks": critical_path,
        "per_step": {
            "requests": {op: round(per(n), 3) for op, n in sorted(total.requests.items())},
            "requests_total": round(per(sum(total.requests.values())), 3),
            "requests_by_role": {r: round(per(sum(t.requests.values())), 3)
                                 for r, t in sorted(m["by_role"].items())},
            "wru": per(sum(total.wru.values())),
            "rru": per(sum(total.rru.values())),
            "sqs_requests": per(sum(n for op, n in total.requests.items()
                                    if op in total.sqs_billed)),
            "sqs_billed": per(sum(total.sqs_billed.values())),
            "invocations": {role: per(n) for role, (n, _) in lam.items()},
            "gb_s": {role: per(gbs) for role, (_, gbs) in lam.items()},
            "ms": {role: per(sum(s) * 1000) for role, s in m["seconds"].items()},
            # What the handlers waited on their AWS requests (timed pass), by operation
            # (the event source mapping's receives and deletes apart).
            "aws_wait_ms": {op: round(per(t * 1000), 3) for op, t in m["waits"].most_common()},
            # The function's durable calls (each an invocation of the user's function on
            # AWS: not priced, as the user's functions are not).
            "durable_calls": per(m["durable_calls"]),
        },
        "wru_by_target": {k: round(per(v), 3) for k, v in total.wru.most_common()},
        "wru_by_write": {k: round(per(v), 3) for k, v in total.wru_by_op.most_common()},
        "rru_by_target": {k: round(per(v), 3) for k, v in
                          sorted(total.rru.items(), key=lambda kv: -kv[1])},
        "failed_conditions": total.failed_conditions,
        "cancelled_transactions": total.cancelled_transactions,
        "empty_receives_per_step": round(per(total.empty_receives), 3),
        "s3_requests": per(sum(n for op, n in total.requests.items() if op.endswith("Object"))),
        "timed_pass_requests_per_step": round(per(m["timed_requests"]), 3),
    }


def sweeper_phase(bench: Bench, passes: int, timeout: float, interval: float,
                  mb: int) -> dict[str, Any]:
    """The sweeper's passes while runs flow (a W3 run started every 0.25 s), metered,
    one every interval, and a busy minute priced from them.

    Each pass is an invocation of the handler given less than two intervals and its
    margin, so that it makes exactly one pass (its loop's rule): the passes are measured
    one by one, whether or not an invocation could make them all, and the minute's billed
    time (its sleeps included) follows from the same rule (sweeper_minute)."""
    bench.calls.quiesce()
    bench.meter.capacity = True
    stop = threading.Event()
    started: list[str] = []

    def feed() -> None:
        i = 0
        while not stop.is_set():
            started.append(bench.start("w3", 10_000 + i))
            i += 1
            stop.wait(0.25)

    event = {"source": "aws.events", "detail-type": "Scheduled Event"}
    margin = min(lambda_handlers.DEFAULT_MARGIN, interval)
    one_pass = interval + margin + 1.0
    sweep = bench.calls.timed("sweeper", lambda_handlers.sweeper)
    errors: list[str] = []

    def invoke() -> dict[str, Any]:
        try:
            answer: dict[str, Any] = sweep(event, Context(timeout=one_pass))
            return answer
        except Exception as exc:  # reported: on AWS the invocation would fail
            errors.append(f"{type(exc).__name__}: {exc}")
            return {}

    # One pass first, not measured: the shards' cursors catch up with the wakes of every
    # workload before (a deployed sweeper sweeps all along).
    invoke()
    feeder = threading.Thread(target=feed, name="feeder", daemon=True)
    feeder.start()
    time.sleep(0.5)  # something in flight from the first pass on
    bench.meter.take()
    bench.calls.take()
    errors.clear()
    answers: Counter[str] = Counter()
    t0 = time.monotonic()
    for i in range(passes):
        for key, value in invoke().items():
            if isinstance(value, int | float):
                answers[key] += int(value)
        time.sleep(max(0.0, t0 + (i + 1) * interval - time.monotonic()))
    took = time.monotonic() - t0
    stop.set()
    feeder.join()
    wait_all(bench.observer, started)
    bench.calls.quiesce()
    tally = bench.meter.take().get("sweeper", Tally())
    seconds = bench.calls.take().get("sweeper", [])
    pass_s = sum(seconds) / max(1, len(seconds))
    # The load the passes saw: the feeder's runs, 5 steps each, over its time.
    load = 5 * len(started) / max(took, 1e-3)
    minute_passes, minute_s = sweeper_minute(pass_s, timeout, interval, margin)
    per_pass: dict[str, Any] = {
        "wru": sum(tally.wru.values()) / passes, "rru": sum(tally.rru.values()) / passes,
        "sqs_billed": sum(tally.sqs_billed.values()) / passes,
        "requests": {op: round(n / passes, 2) for op, n in sorted(tally.requests.items())},
    }
    return {
        "measured": {"passes": passes, "pass_ms": round(pass_s * 1000, 1),
                     "runs_flowing": len(started), "load_steps_per_s": round(load, 1),
                     "answers": dict(answers), "errors": sorted(set(errors)),
                     "wru_by_target": dict(tally.wru), "rru_by_target": dict(tally.rru)},
        "per_pass": per_pass,
        "busy_minute": {"invocations": 1, "timeout_s": timeout, "passes": minute_passes,
                        "billed_s": round(minute_s, 2), "memory_mb": mb,
                        "gb_s": minute_s * mb / 1024,
                        "wru": per_pass["wru"] * minute_passes,
                        "rru": per_pass["rru"] * minute_passes,
                        "sqs_billed": per_pass["sqs_billed"] * minute_passes},
    }


if __name__ == "__main__":
    raise SystemExit(main())
