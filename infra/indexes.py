"""A deployed table's global secondary indexes brought to what template.yaml says, one
index created or deleted per step: DynamoDB's UpdateTable, and so CloudFormation's update
of a table, takes one index creation or deletion at a time, and cannot change an index's
keys or projection in place.

    index_steps(have, want)             # the index lists to pass through
    staged_templates(template, tables)  # the whole template once per step (deploy.py)
    index_update(before, after)         # one step as UpdateTable's argument (stack.py)

Pure: the callers read the tables and make the updates.

Order: every index `want` adds is created first, one at a time, while the ones it
replaces still answer; then the ones it drops are deleted. DynamoDB backfills a new
index from the table's items before it is ACTIVE (CloudFormation waits for that), so
nothing is copied by hand. The code reads either (adapters/store/run_listing.py: the
listing indexes' keys are the same, and the old index is read while the new one is
missing or backfilling), so every step serves: issue 22's migration from the
ALL-projected `by-workflow` and `recent` to the KEYS_ONLY `by-workflow-keys` and
`recent-keys` is four steps (create, create, delete, delete). An index that keeps its
name but changes is deleted, then created (it is missing in between)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["attributes", "index_steps", "index_update", "normalized", "staged_templates",
           "table_name"]

Index = dict[str, Any]
_SUB = re.compile(r"\$\{([^}]+)\}")


def normalized(index: Mapping[str, Any]) -> Index:
    """An index as its definition says it (a template's, or DescribeTable's answer
    without its status, sizes and throughput)."""
    projection = dict(index.get("Projection") or {"ProjectionType": "ALL"})
    if "NonKeyAttributes" in projection:
        projection["NonKeyAttributes"] = sorted(projection["NonKeyAttributes"])
    return {"IndexName": index["IndexName"], "KeySchema": list(index["KeySchema"]),
            "Projection": projection}


def index_steps(have: Sequence[Mapping[str, Any]],
                want: Sequence[Mapping[str, Any]]) -> list[list[Index]]:
    """The index lists to pass through from `have` to `want` (the last is `want`'s),
    each one creation or deletion away from the one before (none if they agree)."""
    now = {i["IndexName"]: normalized(i) for i in have}
    target = {i["IndexName"]: normalized(i) for i in want}
    changed = [n for n in target if n in now and now[n] != target[n]]
    steps: list[list[Index]] = []

    def step() -> None:
        steps.append([copy.deepcopy(now[n]) for n in sorted(now)])

    for name in target:
        if name not in now:
            now[name] = target[name]
            step()
    for name in changed:  # cannot change in place: away, then back as wanted
        del now[name]
        step()
        now[name] = target[name]
        step()
    for name in sorted(set(now) - set(target)):
        del now[name]
        step()
    return steps


def attributes(props: Mapping[str, Any], indexes: Sequence[Index],
               known: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The attribute definitions a table with `indexes` needs: those of its keys and
    its indexes' keys (DynamoDB refuses any other), their types from `known`."""
    types = {a["AttributeName"]: a["AttributeType"] for a in known}
    types.update({a["AttributeName"]: a["AttributeType"]
                  for a in props.get("AttributeDefinitions", [])})
    used = [k["AttributeName"] for k in props["KeySchema"]]
    used += [k["AttributeName"] for i in indexes for k in i["KeySchema"]]
    return [{"AttributeName": n, "AttributeType": types[n]} for n in dict.fromkeys(used)]


def table_name(props: Mapping[str, Any], parameters: Mapping[str, str]) -> str:
    """A table resource's name with the stack's parameters put in."""
    name = props["TableName"]
    if isinstance(name, dict) and "Fn::Sub" in name:
        return _SUB.sub(lambda m: parameters.get(m.group(1), m.group(0)), str(name["Fn::Sub"]))
    return str(name)


def staged_templates(template: Mapping[str, Any],
                     tables: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`template` once per step of its tables' index migrations from what `tables`
    holds (logical id -> {"indexes", "attributes"}: DescribeTable's
    GlobalSecondaryIndexes and AttributeDefinitions of the deployed table), the last
    being `template` itself: deployed in order, each update creates or deletes one
    index. One template if no table needs more than one change."""
    plans: list[tuple[str, list[list[Index]]]] = []
    for logical_id, deployed in tables.items():
        props = template["Resources"][logical_id]["Properties"]
        steps = index_steps(deployed["indexes"], props.get("GlobalSecondaryIndexes", []))
        if len(steps) > 1:
            plans.append((logical_id, steps))
    out: list[dict[str, Any]] = []
    # Tables not yet migrated stay as deployed; each step moves one table by one index.
    current = {lid: [normalized(i) for i in tables[lid]["indexes"]] for lid, _ in plans}
    for logical_id, steps in plans:
        for indexes in steps[:-1]:
            current[logical_id] = indexes
            staged = copy.deepcopy(dict(template))
            for lid, now in current.items():
                props = staged["Resources"][lid]["Properties"]
                props["AttributeDefinitions"] = attributes(props, now,
                                                           tables[lid]["attributes"])
                if now:
                    props["GlobalSecondaryIndexes"] = now
                else:
                    props.pop("GlobalSecondaryIndexes", None)
            out.append(staged)
        current[logical_id] = steps[-1]
    out.append(copy.deepcopy(dict(template)))
    return out


def index_update(before: Sequence[Mapping[str, Any]],
                 after: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One step of index_steps as UpdateTable's GlobalSecondaryIndexUpdates entry."""
    was = {i["IndexName"] for i in before}
    now = {i["IndexName"]: normalized(i) for i in after}
    created, deleted = set(now) - was, was - set(now)
    if len(created) + len(deleted) != 1:
        raise ValueError(f"not one step: {sorted(created)} created, {sorted(deleted)} deleted")
    if created:
        return {"Create": now[created.pop()]}
    return {"Delete": {"IndexName": deleted.pop()}}
