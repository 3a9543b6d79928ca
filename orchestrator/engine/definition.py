"""What a run row stores about itself, typed: the workflow definition it started with
(timeouts resolved), its admission gate (concurrency group and throttle) and its
trigger. Each reads and writes the JSON the run row has always held, so stored runs and
the API's JSON keep their shape.

A run never changes under its feet when the manifest is edited: it runs the definition
it stored, and the sweeper rebuilds any step row a crashed start left out from it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from functions.sdk.protocol import DURABLE_PREFIX
from orchestrator.engine.policies import GroupPolicy, OnFailure, ThrottlePolicy
from orchestrator.manifest.graph import topological_order
from orchestrator.manifest.shell import COMMAND_KEY, RUN_ROUTE, SHELL

__all__ = ["CALL_RETRIES", "DRIVER", "DURABLE_PREFIX", "Definition", "Gate", "Limit", "StepSpec",
           "Throttle", "Trigger"]

# A durable run's one step: the row that drives it (engine/durable.py).
DRIVER = "$run"

# How many times a durable workflow's call is retried in a row when it fails (the
# endpoint down, a 5xx): with the backoff doubling up to 5 minutes, about an hour.
CALL_RETRIES = 16


@dataclass(frozen=True)
class StepSpec:
    """What the engine needs to know about one declared step."""

    name: str
    backend: str
    route: str
    deps: tuple[str, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    retry_max: int = 3
    retry_strategy: str = "linear"
    retry_delay: float = 1.0
    retry_max_delay: float = 300.0
    timeout: float = 60.0
    # `if:` as written: evaluated when the dependencies are done (None: always runs).
    condition: str | None = None
    # An approval step's gate: {prompt, timeout (seconds), approvers, link} (None: a call).
    approval: Mapping[str, Any] | None = None
    # `lock:` as written (a template over input): held while the step runs.
    lock: str | None = None
    # A fan_out step's {items, max_parallel, rate, tolerate} (None: one call).
    fan_out: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Definition:
    """The steps (in declaration order), the failure policy, and for a rerun the steps
    it reuses (step -> the run whose output it takes)."""

    steps: tuple[StepSpec, ...]
    on_failure: OnFailure = OnFailure.HALT
    reused: Mapping[str, str] = field(default_factory=dict)
    # A durable workflow's name at its backend: the run has one step, its driver.
    durable: str | None = None
    # A `script:` workflow's {"name", "sha256"}: the bash text the run was started with
    # (the orchestrator sends that text with each call; None: not a script).
    script: Mapping[str, str] | None = None

    @property
    def ndeps(self) -> dict[str, int]:
        return {s.name: len(s.deps) for s in self.steps}

    @cached_property
    def dependants(self) -> dict[str, tuple[str, ...]]:
        """Each step's dependants, in declaration order (computed once)."""
        out: dict[str, list[str]] = {s.name: [] for s in self.steps}
        for s in self.steps:
            for d in s.deps:
                out.setdefault(d, []).append(s.name)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def specs(self) -> dict[str, StepSpec]:
        return {s.name: s for s in self.steps}

    @cached_property
    def places(self) -> dict[str, dict[str, int]]:
        """Each step's dependencies by name: their place in its `dependsOn`, from 0
        (computed once). A wide join's count names its dependencies by these numbers."""
        return {s.name: {d: i for i, d in enumerate(s.deps)} for s in self.steps if s.deps}

    @property
    def sinks(self) -> set[str]:
        return {s.name for s in self.steps} - {d for s in self.steps for d in s.deps}

    def order(self) -> list[str]:
        """Steps in topological order (declaration order if the stored graph is bad)."""
        try:
            return topological_order({s.name: s.deps for s in self.steps})
        except ValueError:
            return [s.name for s in self.steps]

    def reusing(self, reused: Mapping[str, str]) -> Definition:
        return Definition(self.steps, self.on_failure, dict(reused), self.durable, self.script)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "steps": {
                s.name: {
                    "backend": s.backend,
                    "route": s.route,
                    "dependsOn": list(s.deps),
                    "payload": dict(s.payload),
                    "retry": {
                        "max": s.retry_max,
                        "strategy": s.retry_strategy,
                        "delay": s.retry_delay,
                        "maxDelay": s.retry_max_delay,
                    },
                    "timeout": s.timeout,
                    **({"if": s.condition} if s.condition is not None else {}),
                    **({"approval": dict(s.approval)} if s.approval is not None else {}),
                    **({"lock": s.lock} if s.lock is not None else {}),
                    **({"fanOut": dict(s.fan_out)} if s.fan_out is not None else {}),
                }
                for s in self.steps
            },
            "onFailure": self.on_failure.value,
        }
        if self.reused:
            doc["reused"] = dict(self.reused)
        if self.durable is not None:
            doc["durable"] = self.durable
        if self.script is not None:
            doc["script"] = dict(self.script)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Definition:
        steps = []
        for name, st in (doc.get("steps") or {}).items():
            retry = st.get("retry") or {}
            steps.append(
                StepSpec(
                    name=name,
                    backend=st["backend"],
                    route=st["route"],
                    deps=tuple(st.get("dependsOn") or ()),
                    payload=st.get("payload") or {},
                    retry_max=int(retry.get("max", 3)),
                    retry_strategy=retry.get("strategy", "linear"),
                    retry_delay=float(retry.get("delay", 1.0)),
                    retry_max_delay=float(retry.get("maxDelay", 300.0)),
                    timeout=float(st.get("timeout") or 60.0),
                    condition=st.get("if"),
                    approval=st.get("approval"),
                    lock=st.get("lock"),
                    fan_out=st.get("fanOut"),
                )
            )
        script = doc.get("script")
        return cls(
            tuple(steps), OnFailure(doc.get("onFailure") or "halt"), dict(doc.get("reused") or {}),
            doc.get("durable"), dict(script) if script else None,
        )

    @classmethod
    def of(cls, workflow: Any, backends: Mapping[str, Any], default_timeout: float,
           name: str = "") -> Definition:
        """A manifest workflow's definition (`name`: its name in the manifest), with each
        step's timeout resolved. A `run:` step becomes a call of its shell backend's
        `/run` with the command (a template, as written) in the payload as `command`; a
        `script:` workflow, a durable one served under `name` by its shell backend."""
        script = getattr(workflow, "script", None)
        if getattr(workflow, "backend", None) is not None or script is not None:
            served = name if script is not None else workflow.workflow or name
            at = workflow.backend or _shell_backend(backends)
            backend = backends.get(at)
            timeout = workflow.timeout or (backend.timeout if backend is not None else None)
            driver = StepSpec(
                name=DRIVER, backend=at, route=DURABLE_PREFIX + served,
                retry_max=CALL_RETRIES, retry_strategy="exponential", retry_delay=1.0,
                retry_max_delay=300.0, timeout=timeout or default_timeout,
            )
            held = None if script is None else {"name": served,
                                                "sha256": workflow.script_sha256 or ""}
            return cls((driver,), OnFailure.HALT, durable=served, script=held)
        steps = []
        for name, st in workflow.steps.items():
            command = getattr(st, "run", None)
            at = st.backend or (_shell_backend(backends) if command is not None else "")
            backend = backends.get(at)
            timeout = st.timeout or (backend.timeout if backend is not None else None)
            steps.append(
                StepSpec(
                    name=name,
                    backend=at,
                    route=RUN_ROUTE if command is not None else st.route or "",
                    deps=tuple(st.depends_on),
                    payload=dict(st.payload) if command is None
                    else {**st.payload, COMMAND_KEY: command},
                    # A `run:` step retries its command only when it says so (a
                    # reference pipeline's job without `retry:` runs once).
                    retry_max=(0 if command is not None and "retry" not in st.model_fields_set
                               else st.retry.max),
                    retry_strategy=st.retry.strategy,
                    retry_delay=st.retry.delay,
                    retry_max_delay=st.retry.max_delay,
                    timeout=timeout or default_timeout,
                    condition=st.if_,
                    approval=None if st.approval is None else {
                        "prompt": st.approval.prompt, "timeout": st.approval.timeout,
                        "approvers": list(st.approval.approvers), "link": st.approval.link},
                    lock=st.lock,
                    fan_out=None if st.fan_out is None else {
                        "items": st.fan_out.items, "max_parallel": st.fan_out.max_parallel,
                        "rate": st.fan_out.rate, "tolerate": st.fan_out.tolerate},
                )
            )
        return cls(tuple(steps), OnFailure(workflow.on_failure))


def _shell_backend(backends: Mapping[str, Any]) -> str:
    """The first backend declaring `shell` ("" if none: the manifest refuses that, so
    only a hand-built workflow gets here)."""
    return next((name for name, b in backends.items()
                 if SHELL in (getattr(b, "capabilities", None) or ())), "")


@dataclass(frozen=True)
class Throttle:
    key: str
    limit: int
    period: float
    burst: int = 1
    policy: ThrottlePolicy = ThrottlePolicy.QUEUE

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "limit": self.limit, "period": self.period,
                "burst": self.burst, "policy": self.policy.value}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Throttle:
        return cls(
            key=str(doc.get("key", "")), limit=int(doc["limit"]), period=float(doc["period"]),
            burst=int(doc.get("burst", 1)), policy=ThrottlePolicy(doc.get("policy") or "queue"),
        )


@dataclass(frozen=True)
class Limit:
    """One concurrency limit a run must fit: at most `limit` running runs per rendered
    (`group`, `key`); `turns` is the key its waiting runs take turns by (its own key,
    or, for a limit without one, the key of the run's keyed limit)."""

    group: str
    key: str = ""
    limit: int = 1
    policy: GroupPolicy = GroupPolicy.QUEUE
    turns: str = ""

    @property
    def line_id(self) -> str:
        return f"{self.group}#{self.key}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"group": self.group, "key": self.key,
                               "policy": self.policy.value}
        if self.limit != 1:
            doc["limit"] = self.limit
        if self.turns != self.key:
            doc["turns"] = self.turns
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Limit:
        key = str(doc.get("key", ""))
        return cls(group=str(doc["group"]), key=key, limit=int(doc.get("limit", 1)),
                   policy=GroupPolicy(doc.get("policy") or "queue"),
                   turns=str(doc.get("turns", key)))


@dataclass(frozen=True)
class Gate:
    """The admission a run needs: its concurrency limits (the first one's fields are
    `group`, `key`, `policy` and `limit`, the others `more`; a run goes when it fits
    every one), its throttle, and its priority among the runs waiting with it."""

    group: str | None = None
    key: str = ""
    policy: GroupPolicy = GroupPolicy.QUEUE
    throttle: Throttle | None = None
    limit: int = 1
    turns: str | None = None
    more: tuple[Limit, ...] = ()
    priority: int = 0

    @property
    def group_id(self) -> str:
        return "" if not self.group else f"{self.group}#{self.key}"

    @property
    def limits(self) -> tuple[Limit, ...]:
        """Every concurrency limit of the run, the first one first."""
        if not self.group:
            return ()
        first = Limit(self.group, self.key, self.limit, self.policy,
                      self.key if self.turns is None else self.turns)
        return (first, *self.more)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.group:
            doc = {"group": self.group, "key": self.key, "policy": self.policy.value}
            if self.limit != 1:
                doc["limit"] = self.limit
            if self.turns is not None and self.turns != self.key:
                doc["turns"] = self.turns
            if self.more:
                doc["more"] = [m.to_json() for m in self.more]
        if self.throttle is not None:
            doc["throttle"] = self.throttle.to_json()
        if self.priority:
            doc["priority"] = self.priority
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Gate:
        throttle = doc.get("throttle")
        turns = doc.get("turns")
        return cls(
            group=doc.get("group") or None,
            key=str(doc.get("key", "")),
            policy=GroupPolicy(doc.get("policy") or "queue"),
            throttle=Throttle.from_json(throttle) if throttle else None,
            limit=int(doc.get("limit", 1)),
            turns=None if turns is None else str(turns),
            more=tuple(Limit.from_json(m) for m in doc.get("more") or ()),
            priority=int(doc.get("priority", 0)),
        )


@dataclass(frozen=True, eq=False)
class Trigger(Mapping[str, Any]):
    """Where a run came from: `source` (api, webhook, event, schedule, manual, rerun)
    and the ids that go with it (webhook and delivery id, event, tick and key, the run
    rerun). A read-only mapping of its JSON, so it compares equal to that JSON."""

    source: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, **self.detail}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Trigger:
        return cls(str(doc.get("source", "api")), {k: v for k, v in doc.items() if k != "source"})

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return 1 + len(self.detail)
