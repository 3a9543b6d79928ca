"""The step graph of a workflow, given as step -> its dependencies (`dependsOn`): the one
topological sort (`topological_order`), and the checks the models and the loader share:
the graph's own (`graph_problems`: duplicates, self-dependencies, unknown steps, cycles)
and its conditions' (`condition_problems`: a condition reads only its ancestors)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from orchestrator.expressions import ExpressionError
from orchestrator.expressions.conditions import compile_condition
from orchestrator.manifest.fields import did_you_mean
from orchestrator.manifest.yamlsafe import YamlPath

__all__ = ["ancestors", "condition_problems", "graph_problems", "topological_order"]


def topological_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """The one topological sort: every step after its dependencies, ties in declaration
    (mapping) order. Raises ValueError on a cycle or an unknown dependency."""
    index = {name: i for i, name in enumerate(deps)}
    names = list(deps)
    unmet = {name: len(set(ds)) for name, ds in deps.items()}
    dependants: dict[str, list[str]] = {name: [] for name in deps}
    for name, ds in deps.items():
        for dep in dict.fromkeys(ds):
            if dep not in dependants:
                raise ValueError(f"step {name!r} depends on unknown step {dep!r}")
            dependants[dep].append(name)
    ready = [index[name] for name, count in unmet.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for child in dependants[name]:
            unmet[child] -= 1
            if unmet[child] == 0:
                heapq.heappush(ready, index[child])
    if len(order) != len(names):
        raise ValueError("the workflow has a dependency cycle")
    return order


def graph_problems(deps: Mapping[str, Sequence[str]]) -> list[tuple[YamlPath, str]]:
    """Problems in a step graph given as step -> dependencies, each with its path
    relative to the workflow: duplicates, self-dependencies, unknown steps, cycles."""
    problems: list[tuple[YamlPath, str]] = []
    names = list(deps)
    for step, wanted in deps.items():
        seen: set[str] = set()
        for i, dep in enumerate(wanted):
            at: YamlPath = ("steps", step, "dependsOn", i)
            if dep in seen:
                problems.append((at, f"step {step!r} lists {dep!r} more than once"))
            elif dep == step:
                problems.append((at, f"step {step!r} depends on itself"))
            elif dep not in deps:
                others = [n for n in names if n != step]
                problems.append(
                    (
                        at,
                        f"step {step!r} depends on unknown step {dep!r}{did_you_mean(dep, others)}",
                    )
                )
            seen.add(dep)
    for cycle in _cycles(deps):
        problems.append(
            (("steps", cycle[0], "dependsOn"), f"dependency cycle: {' -> '.join(cycle)}")
        )
    return problems


def ancestors(deps: Mapping[str, Sequence[str]], step: str) -> set[str]:
    """Every step `step` comes after, transitively through `dependsOn`."""
    seen: set[str] = set()
    todo = list(deps.get(step, ()))
    while todo:
        dep = todo.pop()
        if dep not in seen and dep in deps:
            seen.add(dep)
            todo.extend(deps[dep])
    return seen


def condition_problems(deps: Mapping[str, Sequence[str]], conditions: Mapping[str, str],
                       field: str = "if") -> list[tuple[YamlPath, str]]:
    """Conditions (`if:`) that read a step which is not an ancestor of theirs: its
    output would not exist when the condition is evaluated. Run on a sound graph."""
    problems: list[tuple[YamlPath, str]] = []
    for step, source in conditions.items():
        at: YamlPath = ("steps", step, *field.split("."))
        try:
            compile_condition(source, None)
        except ExpressionError:
            continue  # the step's own field reports it
        try:
            cond = compile_condition(source, list(deps))
        except ExpressionError as err:
            problems.append((at, str(err)))
            continue
        above = ancestors(deps, step)
        for written, name in cond.refs.items():
            if name not in above:
                problems.append((at, f"steps.{written} reads step {name!r}, which is not an "
                                 f"ancestor of {step!r} (add it to dependsOn, directly or "
                                 "through a step that depends on it)"))
    return problems


def _cycles(deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Cycles found by a depth-first walk in run order (a -> b: b depends on a),
    one per back edge, ignoring self-loops and unknown steps."""
    children: dict[str, list[str]] = {name: [] for name in deps}
    for name, wanted in deps.items():
        for dep in dict.fromkeys(wanted):
            if dep != name and dep in children:
                children[dep].append(name)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    found: list[list[str]] = []
    seen_sets: set[frozenset[str]] = set()
    for start in deps:
        if start in state:
            continue
        path = [start]
        stack = [iter(children[start])]
        state[start] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(child) == 1:
                cycle = [*path[path.index(child) :], child]
                if frozenset(cycle) not in seen_sets:
                    seen_sets.add(frozenset(cycle))
                    found.append(cycle)
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append(iter(children[child]))
    return found
