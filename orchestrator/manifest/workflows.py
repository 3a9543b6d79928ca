"""The DAG half of the manifest: a `Workflow` of `Step`s (each one POST to a backend
route, with its `RetryPolicy`: retries.py), its optional `ForEach` fan-out, and the
backend-reference check (`backend_problems`) that the models and the loader share; the
graph's checks are graph.py's.

A `Workflow` checks its own graph (known dependencies, no self-dependency, no cycle), so
every instance, including one read back with `Workflow.from_json`, is a valid DAG. What
starts a workflow and what paces it (schedule, `on:` triggers, concurrency, throttle) is
in `triggers`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from orchestrator.expressions import ExpressionError
from orchestrator.expressions.conditions import compile_condition
from orchestrator.manifest.event_flow import Batch, CancelOnList
from orchestrator.manifest.fields import (
    Duration,
    ManifestModel,
    Name,
    checks_deferred,
    did_you_mean,
)
from orchestrator.manifest.graph import condition_problems, graph_problems, topological_order
from orchestrator.manifest.retries import RetryPolicy
from orchestrator.manifest.shell import (
    COMMAND_KEY,
    VALUES_KEY,
    check_command,
    command_problems,
)
from orchestrator.manifest.triggers import (
    Concurrency,
    ConcurrencyGroup,
    EventTrigger,
    KeyTemplate,
    Overlap,
    Priority,
    Schedule,
    Throttle,
    one_or_list,
)
from orchestrator.manifest.yamlsafe import YamlPath, dotted

__all__ = [
    "MAX_FAN_OUT",
    "RESERVED_PAYLOAD_KEYS",
    "Approval",
    "Debounce",
    "FanOut",
    "ForEach",
    "Step",
    "Workflow",
    "backend_problems",
]


# The request body sent to a function already uses these keys (see DESIGN.md, "The
# function contract"); a static payload must not shadow them.
RESERVED_PAYLOAD_KEYS = ("input", "steps", "run")


def _payload_key(value: str) -> str:
    if value in RESERVED_PAYLOAD_KEYS:
        raise ValueError(
            f"payload key {value!r} is reserved: the request body already carries "
            f"{', '.join(RESERVED_PAYLOAD_KEYS)}"
        )
    return value


def _route(value: str) -> str:
    if not value.startswith("/") or any(ch.isspace() for ch in value):
        raise ValueError(f"route {value!r} must start with '/' and contain no spaces")
    return value


Route = Annotated[str, AfterValidator(_route)]
PayloadKey = Annotated[str, AfterValidator(_payload_key)]


def _condition_syntax(value: str) -> str:
    """A step's `if:` parses and reads only `input` and `steps` (which steps it may
    read is the workflow's check: `condition_problems`)."""
    try:
        compile_condition(value, None)
    except ExpressionError as err:
        raise ValueError(str(err)) from None
    return value


StepCondition = Annotated[str, AfterValidator(_condition_syntax)]
# A `run:` command: a template over `input` and ancestors' `steps.<name>.output`.
Command = Annotated[str, AfterValidator(check_command)]


class Approval(ManifestModel):
    """A gate a person answers: `prompt` is what they are asked, `timeout` how long the
    gate stays open (then it succeeds with `timed_out: true`), `approvers` the names of
    the API keys that may answer (empty: any key), `link` whether it also gets a
    single-use answer link for people without a key."""

    prompt: str = Field(min_length=1, max_length=2000)
    timeout: Duration
    approvers: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=100)
    link: bool = False

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be longer than 0s")
        return value


class Debounce(ManifestModel):
    """A burst of triggers with one rendered `key` (a template over the run's input;
    empty: one burst for the workflow) starts one run, on the last trigger's input, once
    `period` passes without another; `max_wait` bounds the wait from the burst's first
    trigger."""

    key: KeyTemplate = ""
    period: Duration
    max_wait: Duration | None = None

    @model_validator(mode="after")
    def _periods(self) -> Self:
        if self.period <= 0:
            raise ValueError("period must be longer than 0s")
        if self.max_wait is not None and self.max_wait < self.period:
            raise ValueError(f"maxWait ({self.max_wait:g}s) is shorter than period "
                             f"({self.period:g}s)")
        return self


# The most items one fan_out step takes (beyond: forEach, or child runs).
MAX_FAN_OUT = 1000


class FanOut(ManifestModel):
    """Call the step's route once per item of `items` (an expression over `input` and
    ancestors' `steps.<name>.output` giving a list), at most `max_parallel` at once and
    `rate` starts per second; the output is the results in item order. More than
    `tolerate` failed items fail the step (once the others have settled)."""

    items: StepCondition
    max_parallel: int = Field(default=10, ge=1, le=100, strict=True)
    rate: float | None = Field(default=None, gt=0)
    tolerate: int = Field(default=0, ge=0, strict=True)


class Step(ManifestModel):
    """One POST to `backend`'s `route`, after every step in `depends_on` succeeded,
    if its condition `if` (over `input` and ancestors' `steps.<name>.output`) holds; or,
    with `approval`, a gate a person answers (no backend, no route); or, with `run`, a
    shell command that a backend with `capabilities: [shell]` runs (no route: the
    loader fills in `backend` when it is not named; see shell.py)."""

    backend: str | None = None
    route: Route | None = None
    # `depends_on` is accepted too, as pipelines copied from reference 002 spell it.
    depends_on: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("dependsOn", "depends_on"))
    payload: dict[PayloadKey, Any] = Field(default_factory=dict)
    retry: RetryPolicy = RetryPolicy()
    timeout: Duration | None = None
    if_: StepCondition | None = Field(default=None, alias="if")
    approval: Approval | None = None
    # A lock held while the step runs (its attempts and their backoff): a template over
    # `input`, e.g. "customer-${{ input.customer }}"; steps and runs asking for one key
    # take it in arrival order.
    lock: KeyTemplate | None = None
    fan_out: FanOut | None = None
    run: Command | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_call_needs_its_target(cls, data: Any) -> Any:
        """A step that is not an approval or a `run:` calls `backend` + `route`: each is
        required (reported at its own place, as a missing field)."""
        if isinstance(data, Mapping) and "dependsOn" in data and "depends_on" in data:
            raise ValueError("dependsOn and depends_on are one field: give one of them")
        if (isinstance(data, Mapping) and data.get("approval") is None
                and data.get("run") is None):
            missing = [f for f in ("backend", "route") if f not in data]
            if missing:
                raise ValidationError.from_exception_data("Step", [
                    InitErrorDetails(type="missing", loc=(f,), input=data) for f in missing])
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        self._a_command_only()
        if self.approval is not None and (self.backend is not None or self.route is not None):
            raise ValueError("an approval step calls nothing: drop backend and route")
        if self.approval is not None and self.fan_out is not None:
            raise ValueError("a step is an approval or a fan_out, not both")
        if self.lock is not None and (self.fan_out is not None or self.approval is not None):
            raise ValueError("lock: is for a step that calls its route once")
        return self

    def _a_command_only(self) -> None:
        """A `run:` step has no route, approval, fan-out or payload command of its own."""
        if self.run is not None:
            if self.route is not None:
                raise ValueError("run: and route exclude each other: a run: step calls "
                                 "its shell backend's /run route")
            if self.approval is not None:
                raise ValueError("a step is an approval or a run: command, not both")
            if self.fan_out is not None:
                raise ValueError("run: runs one command: drop fanOut")
            for key in (COMMAND_KEY, VALUES_KEY):
                if key in self.payload:
                    raise ValueError(f"payload.{key} is what run: sends: drop it "
                                     "from payload")


class ForEach(ManifestModel):
    """Fan a workflow out: one run per row.

    Rows come from `items`, or from a POST to `backend` + `route` that answers a list.
    `query` is accepted for compatibility with reference manifests but cannot be
    executed here (lint warns)."""

    query: str | None = None
    backend: str | None = None
    route: Route | None = None
    items: list[Any] | None = None
    key: str = "id"

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.backend is None) != (self.route is None):
            raise ValueError("forEach.backend and forEach.route go together")
        sources = [
            name
            for name, present in (
                ("query", self.query is not None),
                ("backend+route", self.backend is not None),
                ("items", self.items is not None),
            )
            if present
        ]
        if len(sources) > 1:
            raise ValueError(f"give at most one row source, not {' and '.join(sources)}")
        return self


_GROUP_OVERLAP: dict[str, Literal["skip", "replace", "queue"]] = {
    "queue": "queue",
    "skip": "skip",
    "cancel-running": "replace",
}


class Workflow(ManifestModel):
    """A DAG of named steps; declaration order is irrelevant, `dependsOn` decides. Or
    a durable workflow written in code: `backend` serves it (at POST
    /durable/<workflow>, `workflow` defaulting to this workflow's own name), each call
    bounded by `timeout`.

    `concurrency` is either a policy for scheduled fires (`skip`, `allow`, `replace`:
    what a fire does while the previous run for the same forEach key is still going) or
    a `ConcurrencyGroup` mapping; see the `overlap` and `group` properties."""

    steps: dict[Name, Step] = Field(default_factory=dict)
    backend: Name | None = None
    workflow: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._~\-]{1,128}$")
    timeout: Duration | None = None
    on_failure: Literal["halt", "continue-independent"] = "halt"
    schedule: Schedule | None = None
    for_each: ForEach | None = None
    concurrency: Concurrency = Overlap.SKIP
    priority: Priority = 0
    throttle: Throttle | None = None
    debounce: Debounce | None = None
    on: Annotated[list[EventTrigger], BeforeValidator(one_or_list)] = Field(
        default_factory=list
    )
    # Events gathered into one run; events that cancel open runs (event_flow.py).
    batch: Batch | None = None
    cancel_on: CancelOnList = Field(default_factory=list)
    description: str | None = None
    # A durable workflow written in bash: the path of the file, relative to the
    # manifest. The loader reads it (shell.read_script); the text is not part of the
    # stored JSON, runs carry its sha256 (engine/definition.py).
    script: str | None = Field(default=None, min_length=1)
    _script_text: str | None = PrivateAttr(default=None)
    _script_sha256: str | None = PrivateAttr(default=None)

    @property
    def overlap(self) -> str:
        """What a new run does while an earlier one it collides with is still going:
        the string form of `concurrency` as written, or for a group its policy as
        `queue`, `skip` or `replace` (= `cancel-running`)."""
        first = self.group
        if first is not None:
            return _GROUP_OVERLAP[first.policy]
        return cast(Overlap, self.concurrency).value

    @property
    def limits(self) -> list[ConcurrencyGroup]:
        """The concurrency limits, when `concurrency` is a mapping or a list of them."""
        if isinstance(self.concurrency, ConcurrencyGroup):
            return [self.concurrency]
        return list(self.concurrency) if isinstance(self.concurrency, list) else []

    @property
    def group(self) -> ConcurrencyGroup | None:
        """The first concurrency limit, when `concurrency` is a mapping or a list."""
        limits = self.limits
        return limits[0] if limits else None

    @field_validator("steps")
    @classmethod
    def _some_steps(cls, value: dict[str, Step]) -> dict[str, Step]:
        if not value:
            raise ValueError("must not be empty")
        return value

    @property
    def durable(self) -> bool:
        """Whether this is a durable workflow written in code (no steps): served by
        `backend`, or a `script`."""
        return self.backend is not None or self.script is not None

    @property
    def script_text(self) -> str | None:
        """A `script:` workflow's bash text as read when the manifest loaded (None for
        other workflows, and for one not read by the loader)."""
        return self._script_text

    @property
    def script_sha256(self) -> str | None:
        """The hex sha256 of `script_text` (None with it)."""
        return self._script_sha256

    def with_script(self, text: str, sha256: str) -> Self:
        """This `script:` workflow holding the text read from its file."""
        if self.script is None:
            raise ValueError("only a script: workflow holds a script's text")
        copy = self.model_copy()
        copy._script_text, copy._script_sha256 = text, sha256
        return copy

    @model_validator(mode="before")
    @classmethod
    def _a_batch_needs_events(cls, data: Any) -> Any:
        """`batch:` gathers the events that start the workflow: it needs `on:`, and
        excludes `debounce:` (both make one run of many triggers) and `throttle:` (its
        start is the batch's). Reported at `batch`."""
        if isinstance(data, Mapping) and data.get("batch") is not None:
            why = ("needs on: (the events it gathers): a batch is of events"
                   if not data.get("on") else
                   "batch and debounce exclude each other: each makes one run of many"
                   " triggers" if data.get("debounce") is not None else
                   "batch and throttle exclude each other: a batch starts when it is full"
                   " or its timeout passes, which a throttle would delay again"
                   if data.get("throttle") is not None else None)
            if why is not None:
                raise ValidationError.from_exception_data("Workflow", [InitErrorDetails(
                    type=PydanticCustomError("batch", why), loc=("batch",), input=data)])
        return data

    @model_validator(mode="after")
    def _check_graph(self, info: ValidationInfo) -> Self:
        if self.script is not None and self.steps:
            raise ValueError("steps and script exclude each other: steps declare a DAG, "
                             "script is a durable workflow written in bash")
        if self.script is not None and self.workflow is not None:
            raise ValueError("a script: workflow is served under its own name: drop "
                             "workflow")
        if not self.durable and not self.steps:
            raise ValueError("a workflow needs steps (a DAG) or backend (a durable workflow "
                             "written in code, served by that backend) or script (a durable "
                             "workflow written in bash)")
        if self.backend is not None and self.steps:
            raise ValueError("steps and backend exclude each other: steps declare a DAG, "
                             "backend serves a durable workflow written in code")
        if self.debounce is not None and self.throttle is not None:
            raise ValueError("debounce and throttle exclude each other: a debounced burst"
                             " starts one run, whose start a throttle would delay again")
        if not self.durable and (self.workflow is not None or self.timeout is not None):
            raise ValueError("workflow and timeout belong to a durable workflow: add backend")
        if not checks_deferred(info):
            deps = {name: step.depends_on for name, step in self.steps.items()}
            problems = graph_problems(deps)
            if not problems:
                problems = condition_problems(
                    deps, {n: s.if_ for n, s in self.steps.items() if s.if_ is not None})
                problems += condition_problems(
                    deps, {n: s.fan_out.items for n, s in self.steps.items()
                           if s.fan_out is not None}, field="fanOut.items")
                problems += command_problems(
                    deps, {n: s.run for n, s in self.steps.items() if s.run is not None})
            if problems:
                raise ValueError("; ".join(f"{dotted(p)}: {m}" for p, m in problems))
        return self

    def roots(self) -> list[str]:
        """Steps without dependencies, in declaration order."""
        return [name for name, step in self.steps.items() if not step.depends_on]

    def dependants(self) -> dict[str, list[str]]:
        """Reverse edges: every step -> the steps that depend on it (declaration order)."""
        out: dict[str, list[str]] = {name: [] for name in self.steps}
        for name, step in self.steps.items():
            for dep in dict.fromkeys(step.depends_on):
                out[dep].append(name)
        return out

    def topological_order(self) -> list[str]:
        """Every step after its dependencies; ties keep declaration order."""
        return topological_order({n: s.depends_on for n, s in self.steps.items()})

    def to_json(self) -> str:
        """The definition as JSON (camelCase keys), as stored with each run. A durable
        workflow leaves out its (empty) steps, which `steps:` as written may not be."""
        return self.model_dump_json(
            by_alias=True, exclude={"steps"} if self.durable and not self.steps else None)

    @classmethod
    def from_json(cls, text: str | bytes) -> Workflow:
        """Read back `to_json` output (all checks run again)."""
        return cls.model_validate_json(text)


def backend_problems(workflow: Any, backends: Sequence[str]) -> list[tuple[YamlPath, str]]:
    """Steps (and forEach) of a raw workflow mapping that name an undeclared backend."""
    problems: list[tuple[YamlPath, str]] = []
    if not isinstance(workflow, Mapping):
        return problems
    targets: list[tuple[YamlPath, Any]] = []
    steps = workflow.get("steps")
    if isinstance(steps, Mapping):
        for name, step in steps.items():
            if isinstance(step, Mapping):
                targets.append((("steps", name, "backend"), step.get("backend")))
    for_each = workflow.get("forEach")
    if isinstance(for_each, Mapping):
        targets.append((("forEach", "backend"), for_each.get("backend")))
    if "backend" in workflow:
        targets.append((("backend",), workflow.get("backend")))
    for at, backend in targets:
        if isinstance(backend, str) and backend not in backends:
            problems.append(
                (
                    at,
                    f"unknown backend {backend!r}{did_you_mean(backend, backends)}"
                    f" (declared: {', '.join(backends) or 'none'})",
                )
            )
    return problems
