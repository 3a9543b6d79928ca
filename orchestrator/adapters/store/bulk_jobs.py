"""Bulk actions' items in the control table (services/bulk.py): a job and what it did to
each run.

| pk                 | sk               | what                                          |
|--------------------|------------------|-----------------------------------------------|
| `bulk#<job>`       | `-`              | the job: its selection, page, cursor, counts  |
| `bulkrun#<job>`    | `<page>#<i>`     | what it did to one run (the report, in order) |
| `bulks`            | `<ms>#<job>`     | the jobs, newest last (a listing)            |
| `bulksrunning`     | `<job>`          | the jobs still running (for the sweeper)      |

A job is created with its listing and running entries in one transaction. A page is
done under a claim (`claim_until`, taken by a guarded write, given back when the page
moves on), so two copies of its message never act at once; the page's runs are written
on the job before any is acted on (`page_runs`, `page_next`: once), so a page done again
after its worker died acts on the same runs, whatever the selection reads by then. The
job's page moves on only under a guard naming the page it leaves (`page = :n`). A run's
outcome is written once (`attribute_not_exists`): a page done again keeps the first.
`sent` is the last page whose message went out, so a message of a page already done
sends the next page's only when its sender died before sending it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import Item, Pk, Sk, ms_key
from orchestrator.adapters.store.control_table import ControlTable
from orchestrator.errors import ConditionFailed
from orchestrator.strict_json import dumps

__all__ = ["BulkJob", "BulkJobs", "RunOutcome"]

# How long a job and its report are kept.
KEEP = 30 * 24 * 3600.0
OUTCOMES = ("done", "skipped", "failed")


@dataclass(frozen=True)
class BulkJob:
    """A bulk action: `spec` (action, selection, reason, input), where it is (`page`,
    `cursor`: the selection's next page, None before the first), its counts by
    outcome, and `status` (running, done)."""

    job_id: str
    spec: dict[str, Any]
    created_at: float
    status: str = "running"
    page: int = 0
    cursor: Any = None
    counts: dict[str, int] = field(default_factory=dict)
    finished_at: float | None = None
    expected: int | None = None  # the runs its dry run counted, if it was given
    updated_at: float | None = None  # when its page last moved
    # The runs its current page acts on and the selection's cursor after them, once a
    # worker has read them (None before); the page's claim, while a worker holds it.
    page_runs: list[str] | None = None
    page_next: Any = None
    claim_until: float | None = None
    sent: int = -1  # the last page whose message was sent

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "action": self.spec["action"], "spec": self.spec,
                "created_at": self.created_at,
                "status": self.status, "pages": self.page,
                "counts": {k: self.counts.get(k, 0) for k in OUTCOMES},
                "processed": sum(self.counts.get(k, 0) for k in OUTCOMES),
                "finished_at": self.finished_at, "expected": self.expected}


@dataclass(frozen=True)
class RunOutcome:
    """What a job did to one run: `outcome` (done, skipped, failed), what it says
    (`detail`), and the run it started (a rerun's)."""

    run_id: str
    outcome: str
    detail: str
    new_run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome, "detail": self.detail,
                "new_run_id": self.new_run_id}


def _job_key(job_id: str) -> Pk:
    return Pk(f"bulk#{job_id}")


def _runs_key(job_id: str) -> Pk:
    return Pk(f"bulkrun#{job_id}")


_JOBS = Pk("bulks")
_RUNNING = Pk("bulksrunning")


def _json_of(item: Item, name: str) -> Any:
    raw = item.get(name, {}).get("S")
    return None if raw is None else json.loads(raw)


def _job(item: Item) -> BulkJob:
    cursor = item.get("cursor", {}).get("S")
    return BulkJob(
        job_id=item["pk"]["S"].partition("#")[2], spec=json.loads(item["doc"]["S"]),
        created_at=float(item["created_at"]["N"]), status=item["status"]["S"],
        page=int(item["page"]["N"]), cursor=None if cursor is None else json.loads(cursor),
        counts={k: int(item[f"n_{k}"]["N"]) for k in OUTCOMES if f"n_{k}" in item},
        finished_at=float(item["finished_at"]["N"]) if "finished_at" in item else None,
        expected=int(item["expected"]["N"]) if "expected" in item else None,
        updated_at=float(item["updated_at"]["N"]) if "updated_at" in item else None,
        page_runs=_json_of(item, "page_runs"), page_next=_json_of(item, "page_next"),
        claim_until=float(item["claim_until"]["N"]) if "claim_until" in item else None,
        sent=int(item["sent"]["N"]) if "sent" in item else -1)


class BulkJobs:
    """Reads and guarded writes of bulk jobs and their reports."""

    def __init__(self, control: ControlTable) -> None:
        self.control = control

    def create(self, job_id: str, spec: dict[str, Any], now: float, *,
               expected: int | None = None) -> BulkJob | None:
        """Create the job with its listing and running entries, in one transaction
        (None: one with this id exists; read it with `get`)."""
        key = self.control.key
        until = num(now + KEEP)
        job = {**key(_job_key(job_id)), "doc": {"S": dumps(spec)}, "created_at": num(now),
               "status": {"S": "running"}, "page": num(0), "expires_at": until}
        if expected is not None:
            job["expected"] = num(expected)
        also = {"job_id": {"S": job_id}, "expires_at": until}
        table = self.control.table
        try:
            with _translate(f"bulk job {job_id}: create"):
                self.control.ddb.transact_write_items(TransactItems=[
                    {"Put": {"TableName": table, "Item": job,
                             # An expired job DynamoDB has not deleted yet counts as absent.
                             "ConditionExpression": "attribute_not_exists(pk) OR"
                                                    " expires_at <= :now",
                             "ExpressionAttributeValues": {":now": num(now)}}},
                    {"Put": {"TableName": table,
                             "Item": {**key(_JOBS, Sk(f"{ms_key(now)}#{job_id}")), **also}}},
                    {"Put": {"TableName": table, "Item": {**key(_RUNNING, Sk(job_id)), **also}}},
                ])
        except ConditionFailed:
            return None
        return BulkJob(job_id, spec, now, expected=expected)

    def running(self, now: float, limit: int = 100) -> list[str]:
        """The ids of jobs still running (an entry may outlive its job's end by a
        crash: the caller reads the job)."""
        items = self.control.query(_RUNNING, now=now, limit=limit)
        return [i["job_id"]["S"] for i in items]

    def forget_running(self, job_id: str) -> None:
        self.control.delete(_RUNNING, Sk(job_id))

    def claim(self, job: BulkJob, now: float, until: float) -> BulkJob | None:
        """Hold the job's page `job.page` until `until` (None: it moved on, the job
        ended, or another worker holds it): the job as it is now."""
        try:
            item = self.control.update(
                _job_key(job.job_id), update="SET claim_until = :until",
                values={":n": num(job.page), ":until": num(until), ":now": num(now),
                        ":running": {"S": "running"}},
                names={"#pg": "page", "#s": "status"},
                condition="#pg = :n AND #s = :running AND"
                          " (attribute_not_exists(claim_until) OR claim_until < :now)")
        except ConditionFailed:
            return None
        return _job(item)

    def hold_page(self, job: BulkJob, runs: list[str], nxt: Any) -> bool:
        """Keep the runs page `job.page` acts on and the cursor after them, once (False:
        an earlier holder of the page kept them first)."""
        return self.control.update_if(
            _job_key(job.job_id), "SET page_runs = :runs, page_next = :next",
            {":n": num(job.page), ":runs": {"S": dumps(runs)}, ":next": {"S": dumps(nxt)}},
            "#pg = :n AND attribute_not_exists(page_runs)", names={"#pg": "page"})

    def mark_sent(self, job_id: str, page: int) -> None:
        """Page `page`'s message went out."""
        self.control.update_if(
            _job_key(job_id), "SET sent = :p", {":p": num(page)},
            "attribute_not_exists(sent) OR sent < :p")

    def get(self, job_id: str, now: float) -> BulkJob | None:
        item = self.control.get(_job_key(job_id), now=now)
        return None if item is None else _job(item)

    def recent(self, now: float, limit: int = 20) -> list[str]:
        """The newest jobs' ids, newest first."""
        items = self.control.query(_JOBS, now=now, limit=limit, newest_first=True)
        return [i["job_id"]["S"] for i in items]

    def advance(self, job: BulkJob, cursor: Any, counts: dict[str, int], now: float,
                *, last: bool) -> bool:
        """Move the job past its page `job.page` (to `cursor`, adding `counts`; the
        page's runs and claim dropped); done if `last`. False: another worker moved it
        first."""
        values: Item = {":n": num(job.page), ":n1": num(job.page + 1), ":now": num(now)}
        # Every name by a placeholder: `cursor` and `status` are DynamoDB reserved words.
        names = {"#pg": "page", "#up": "updated_at"}
        sets = ["#pg = :n1", "#up = :now"]
        if cursor is not None:
            values[":c"] = {"S": dumps(cursor)}
            names["#cur"] = "cursor"
            sets.append("#cur = :c")
        if last:
            values[":finished"] = {"S": "done"}
            names.update({"#s": "status", "#fin": "finished_at"})
            sets += ["#s = :finished", "#fin = :now"]
        adds = []
        for k in OUTCOMES:
            if counts.get(k):
                values[f":n_{k}"] = num(counts[k])
                names[f"#n_{k}"] = f"n_{k}"
                adds.append(f"#n_{k} :n_{k}")
        update = "SET " + ", ".join(sets) + (" ADD " + ", ".join(adds) if adds else "") \
            + " REMOVE page_runs, page_next, claim_until"
        try:
            self.control.update(_job_key(job.job_id), update=update, values=values,
                                names=names, condition="#pg = :n")
        except ConditionFailed:
            return False
        return True

    def outcomes_of_page(self, job_id: str, page: int, now: float) -> dict[str, RunOutcome]:
        """What a page did so far, by run (a page done again keeps these)."""
        items = self.control.query(_runs_key(job_id), now=now, limit=1000,
                                   after=Sk(f"{page:06d}#"))
        found = {}
        for item in items:
            if not item["sk"]["S"].startswith(f"{page:06d}#"):
                break
            o = _outcome(item)
            found[o.run_id] = o
        return found

    def record(self, job_id: str, page: int, i: int, outcome: RunOutcome, now: float) -> None:
        """Keep what the job did to a run (once: a second record of it is dropped)."""
        attrs: Item = {"run_id": {"S": outcome.run_id}, "outcome": {"S": outcome.outcome},
                       "detail": {"S": outcome.detail[:500]}}
        if outcome.new_run_id is not None:
            attrs["new_run_id"] = {"S": outcome.new_run_id}
        self.control.put_new(_runs_key(job_id), Sk(f"{page:06d}#{i:04d}"), now=now,
                             attrs=attrs, expires_at=now + KEEP)

    def report(self, job_id: str, now: float, *, after: str | None = None,
               limit: int = 100) -> tuple[list[RunOutcome], str | None]:
        """What the job did, run by run in its order, `limit` at a time after `after`
        (the cursor a page returned)."""
        items = self.control.query(_runs_key(job_id), now=now, limit=limit,
                                   after=None if after is None else Sk(after))
        more = items[-1]["sk"]["S"] if len(items) == limit else None
        return [_outcome(i) for i in items], more


def _outcome(item: Item) -> RunOutcome:
    new = item.get("new_run_id", {}).get("S")
    return RunOutcome(item["run_id"]["S"], item["outcome"]["S"], item["detail"]["S"], new)

