"""A bulk rerun's new run id (services/bulk.py rerun_id): the same for the same run and
job, another for another job or run, however long their ids."""

from __future__ import annotations

from orchestrator.services.bulk import rerun_id


def test_a_generated_job_names_its_reruns_by_its_own_digits() -> None:
    assert rerun_id("orders-1", "bulk-0123456789ab") == "orders-1.0123456789ab"
    assert rerun_id("orders-1", "bulk-0123456789ab") == rerun_id("orders-1", "bulk-0123456789ab")


def test_jobs_whose_ids_share_a_beginning_rerun_apart() -> None:
    a = rerun_id("r1", "nightly-rerun-2024-06-01")
    b = rerun_id("r1", "nightly-rerun-2024-06-02")
    assert a != b and a.startswith("r1.") and len(a) == len("r1.") + 12
    assert a == rerun_id("r1", "nightly-rerun-2024-06-01")


def test_run_ids_that_share_their_first_180_characters_rerun_apart() -> None:
    base = "x" * 185
    a, b = rerun_id(base + "-a", "bulk-0123456789ab"), rerun_id(base + "-b", "bulk-0123456789ab")
    assert a != b and len(a) == len(b) == 167 + 1 + 12 + 1 + 12
    assert rerun_id("y" * 180, "bulk-0123456789ab") == "y" * 180 + ".0123456789ab"
