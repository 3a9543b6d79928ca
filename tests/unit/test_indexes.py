"""A table's indexes are migrated one index created or deleted per step (infra/indexes.py):
CloudFormation and UpdateTable take one at a time. Issue 22's migration of the runs table
(the ALL-projected listing indexes replaced by KEYS_ONLY ones under new names) is four
steps that each leave an index of either layout to list from."""

from __future__ import annotations

from typing import Any

import pytest

from infra.indexes import index_steps, index_update, normalized, staged_templates
from infra.template import load_template
from tests.support.legacy import RUNS_INDEXES_BEFORE_22

OLD_ATTRIBUTES = [{"AttributeName": n, "AttributeType": t} for n, t in (
    ("run_id", "S"), ("workflow", "S"), ("created_at", "N"), ("active", "S"), ("listed", "S"),
    ("wake_shard", "N"), ("wake_at", "N"))]


def names(indexes: list[dict[str, Any]]) -> list[str]:
    return sorted(i["IndexName"] for i in indexes)


def runs_indexes() -> list[dict[str, Any]]:
    indexes: list[dict[str, Any]] = load_template()["Resources"]["RunsTable"]["Properties"][
        "GlobalSecondaryIndexes"]
    return indexes


def test_the_runs_listing_indexes_are_replaced_in_four_steps_that_each_can_list() -> None:
    steps = index_steps(RUNS_INDEXES_BEFORE_22, runs_indexes())
    assert [names(s) for s in steps] == [
        ["active", "by-workflow", "by-workflow-keys", "recent", "wake"],
        ["active", "by-workflow", "by-workflow-keys", "recent", "recent-keys", "wake"],
        ["active", "by-workflow-keys", "recent", "recent-keys", "wake"],
        ["active", "by-workflow-keys", "recent-keys", "wake"],
    ]
    before = RUNS_INDEXES_BEFORE_22
    for after in steps:
        index_update(before, after)  # one creation or deletion, or it raises
        have = set(names(after))
        assert have & {"by-workflow", "by-workflow-keys"} and have & {"recent", "recent-keys"}
        before = after
    assert steps[-1] == sorted((normalized(i) for i in runs_indexes()),
                               key=lambda i: i["IndexName"])
    assert index_steps(runs_indexes(), runs_indexes()) == []


def test_an_index_changed_under_its_name_is_deleted_then_created() -> None:
    keys = [{**i, "Projection": {"ProjectionType": "KEYS_ONLY"}} if i["IndexName"] == "recent"
            else i for i in RUNS_INDEXES_BEFORE_22]
    steps = index_steps(RUNS_INDEXES_BEFORE_22, keys)
    assert [names(s) for s in steps] == [["active", "by-workflow", "wake"],
                                         ["active", "by-workflow", "recent", "wake"]]
    assert index_update(RUNS_INDEXES_BEFORE_22, steps[0]) == {"Delete": {"IndexName": "recent"}}
    with pytest.raises(ValueError):
        index_update(RUNS_INDEXES_BEFORE_22, runs_indexes())  # four changes at once


def test_a_deploy_is_staged_one_index_at_a_time_and_ends_with_the_template() -> None:
    template = load_template()
    staged = staged_templates(template, {
        "RunsTable": {"indexes": RUNS_INDEXES_BEFORE_22, "attributes": OLD_ATTRIBUTES},
        "StepsTable": {"indexes": template["Resources"]["StepsTable"]["Properties"][
            "GlobalSecondaryIndexes"], "attributes": []},
    })
    assert len(staged) == 4 and staged[-1] == template
    before = RUNS_INDEXES_BEFORE_22
    for t in staged:
        props = t["Resources"]["RunsTable"]["Properties"]
        index_update(before, props["GlobalSecondaryIndexes"])
        before = props["GlobalSecondaryIndexes"]
        keys = {k["AttributeName"] for k in props["KeySchema"]} | {
            k["AttributeName"] for i in before for k in i["KeySchema"]}
        assert {a["AttributeName"] for a in props["AttributeDefinitions"]} == keys
        # Everything else is the template's from the first step on (the new code).
        assert {k: v for k, v in t["Resources"].items() if k != "RunsTable"} == {
            k: v for k, v in template["Resources"].items() if k != "RunsTable"}
    assert staged_templates(template, {}) == [template]
