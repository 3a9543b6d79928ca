"""Acting on many runs at once: cancel, rerun (with or without a new input) or resume
every run a selection names, as a job of its own (`POST /bulk-actions`,
`orchestrator runs cancel --where …`, the dashboard's runs page).

A selection is run ids, or a search (`q`, engine/search.py) and/or today's filters
(workflow, status): the runs created before the job, as the listing or the search pages
them. A job goes a page (PAGE runs) at a time, each page a message (`BulkPage`) that any
worker takes: it reads the job, claims its page (a guarded write with an expiry, so two
copies of a message never act at once), reads the page's runs from the job's cursor and
keeps them on the job before acting, acts on each run the page has not acted on yet,
records what it did per run, moves the job's page on under a guard, and sends the next
page's message. So a job has no coordinator, survives the death of any process, and
shows its progress in its item.

Idempotent: each action is (a cancelled run is not cancelled again; a rerun's new run
id derives from the job and the run, so doing it twice finds the first; a resume of a
run that is not paused only wakes it); a page done again (its worker died before it
moved the job on) acts on the runs it kept, only those it has no outcome for, and a
run's outcome is written once. A message for a page another worker holds comes back
when the claim ends (that worker may have died); one for a page already done sends the
next page's message only if that one never went (its sender died first); a sweeper
sends the page message of a job that has not moved for STALLED seconds (a message lost
or dead-lettered)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.adapters.messages import BulkPage
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.bulk_jobs import BulkJob, BulkJobs, RunOutcome
from orchestrator.engine.records import RunRecord
from orchestrator.engine.search import parse_query
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Conflict, NotFound, OrchestratorError, UsageError
from orchestrator.strict_json import dumps

__all__ = ["ACTIONS", "PAGE", "BulkActions"]

ACTIONS = ("cancel", "rerun", "resume")
# Runs a page of a job acts on.
PAGE = 50
# A running job whose page has not moved for this long is sent its message again (by a
# sweeper's pass, at most every NUDGE_EVERY seconds).
STALLED = 300.0
NUDGE_EVERY = 60.0
# Runs of a page acted on at once.
THREADS = 8
# How long a worker holds a page it acts on: a page of PAGE runs takes a second or two;
# past this, another worker may take it over (the holder died).
CLAIM_FOR = 60.0
# Run ids a job may name, and their length in all (the job keeps them in its item,
# under DynamoDB's 400 KB).
MAX_IDS = 10_000
MAX_IDS_BYTES = 200_000
# A job's spec in all (its ids and its new input), as its item keeps it.
MAX_SPEC_BYTES = 300_000
# A selection's count (dry run) reads at most this many runs, in at most this many
# pages of the selection (a search that matches few runs reads candidates, not runs).
MAX_COUNT = 100_000
MAX_COUNT_PAGES = 50
# A job id a client chooses.
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")


class BulkActions:
    """Bulk jobs: their selection counted, started, done page by page, read."""

    def __init__(
        self,
        store: Store,
        queues: Queues,
        jobs: BulkJobs,
        *,
        cancel: Callable[[str, str], bool],
        rerun: Callable[..., tuple[RunRecord, bool]],
        resume: Callable[[str], dict[str, Any]],
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.queues = queues
        self.jobs = jobs
        self.cancel = cancel
        self.rerun = rerun
        self.resume = resume
        self.clock = clock
        # Runs a page of a job takes (its message's work); a count's pages, and how many.
        self.page_size = PAGE
        self.count_page = 100
        self.count_pages = MAX_COUNT_PAGES
        self._next_nudge = 0.0

    # ---- the selection --------------------------------------------------------------

    @staticmethod
    def checked(spec: dict[str, Any]) -> dict[str, Any]:
        """`spec` (action, run_ids | q, workflow, status, reason, input) as a job keeps
        it; UsageError naming the field that is wrong."""
        action = spec.get("action")
        if action not in ACTIONS:
            raise UsageError(f"action: {action!r} is not one of {', '.join(ACTIONS)}")
        ids = spec.get("run_ids")
        q = spec.get("q")
        if ids is not None:
            if q or spec.get("workflow") or spec.get("status"):
                raise UsageError("run_ids: names the runs itself; leave out q, workflow,"
                                 " status")
            if not ids or len(ids) > MAX_IDS:
                raise UsageError(f"run_ids: 1 to {MAX_IDS} run ids")
            ids = list(dict.fromkeys(ids))
        elif not (q or spec.get("workflow") or spec.get("status")):
            raise UsageError("name the runs: run_ids, q, workflow or status (a bulk action"
                             " over every run is not taken)")
        query = parse_query(q)
        for name in ("workflow", "status"):
            given, written = spec.get(name), query.filters.get(name)
            if given and written and given != written:
                raise UsageError(f"{name}: {given!r}, but the query says {name} = {written}:"
                                 " give one")
        status = spec.get("status") or query.filters.get("status")
        if status is not None and status not in {s.value for s in RunStatus} | {"paused"}:
            raise UsageError(f"status: {status!r} is not a run status")
        if ids is not None and len(dumps(ids)) > MAX_IDS_BYTES:
            raise UsageError(f"run_ids: {len(dumps(ids)):,} bytes of run ids; a job takes at"
                             f" most {MAX_IDS_BYTES:,}: split them over several jobs")
        if "input" in spec and action != "rerun":
            raise UsageError(f"input: only a rerun takes an input, not a {action}")
        if spec.get("reason") and action != "cancel":
            raise UsageError(f"reason: only a cancel takes a reason, not a {action}")
        out = {"action": action, "run_ids": ids, "q": q or None,
               "workflow": spec.get("workflow") or query.filters.get("workflow"),
               "status": status}
        if action == "cancel":
            out["reason"] = spec.get("reason") or "cancelled in bulk"
        if "input" in spec:
            out["input"] = spec["input"]
        if len(dumps(out)) > MAX_SPEC_BYTES:
            raise UsageError(f"input: the job (its run ids and new input) is over"
                             f" {MAX_SPEC_BYTES:,} bytes")
        return out

    def select(self, spec: dict[str, Any], cursor: Any, limit: int,
               until: float) -> tuple[list[tuple[str, RunRecord | None]], Any]:
        """A page of the selection, created at `until` or before, from `cursor`: each
        run id with its run (None: a named run that is not there), and the cursor
        after it (None: no more)."""
        now = self.clock()
        ids = spec.get("run_ids")
        if ids is not None:
            at = int(cursor or 0)
            page = ids[at:at + limit]
            found = self.store.runs.get_runs(page, now)
            return ([(r, found.get(r)) for r in page],
                    at + limit if at + limit < len(ids) else None)
        query = parse_query(spec.get("q"))
        if query:
            runs, nxt = self.store.runs.find_runs(
                query, now, workflow=spec.get("workflow"), status=spec.get("status"),
                limit=limit, start=cursor)
        else:
            runs, nxt = self.store.runs.list_runs(
                spec.get("workflow"), now, status=spec.get("status"), limit=limit,
                start=cursor)
        return [(r.run_id, r) for r in runs if r.created_at <= until], nxt

    def count(self, spec: dict[str, Any], sample: int = 5) -> dict[str, Any]:
        """How many runs the selection names now (a dry run), and the first few."""
        spec = self.checked(spec)
        now = self.clock()
        n, cursor, pages = 0, None, 0
        first: list[str] = []
        while n < MAX_COUNT and pages < self.count_pages:
            runs, cursor = self.select(spec, cursor, self.count_page, now)
            pages += 1
            named = [run_id for run_id, run in runs if run is not None]
            n += len(named)
            first += named[:sample - len(first)]
            if cursor is None:
                break
        return {"count": n, "sample": first, "more": cursor is not None, **spec}

    # ---- a job ----------------------------------------------------------------------

    def start(self, spec: dict[str, Any], job_id: str | None = None, *,
              expected: int | None = None) -> tuple[BulkJob, bool]:
        """Create the job and send its first page's message: (job, created). The same
        job id again with the same spec is that job (created False); with another, 409.
        `expected`: how many runs its dry run counted (shown as its progress's end)."""
        spec = self.checked(spec)
        if job_id is not None and not JOB_ID.fullmatch(job_id):
            raise UsageError(f"job_id: {job_id[:120]!r} is not a job id (1 to 100 letters,"
                             " digits and _ . : -, from a letter or digit)")
        job_id = job_id or self.new_job_id()
        now = self.clock()
        job = self.jobs.create(job_id, spec, now, expected=expected)
        if job is None:
            found = self.jobs.get(job_id, now)
            if found is None:
                raise Conflict("job_gone", f"bulk job {job_id} expired; choose another id")
            if found.spec != spec:
                raise Conflict("job_exists", f"bulk job {job_id} exists with another spec")
            if found.status == "running" and found.sent < found.page:
                self._send(job_id, found.page)  # its creator died before sending it
            return found, False
        self._send(job_id, 0)
        return job, True

    @staticmethod
    def new_job_id() -> str:
        return f"bulk-{uuid.uuid4().hex[:12]}"

    def nudge(self) -> int:
        """A sweeper's task: send again the page message of each running job that has
        not moved for STALLED seconds (its message was lost, or went to the dead-letter
        queue after failing); at most once every NUDGE_EVERY seconds a process. The
        number of jobs nudged."""
        now = self.clock()
        if now < self._next_nudge:
            return 0
        self._next_nudge = now + NUDGE_EVERY
        nudged = 0
        for job_id in self.jobs.running(now):
            job = self.jobs.get(job_id, now)
            if job is None or job.status != "running":
                self.jobs.forget_running(job_id)  # its end's clean-up did not happen
            elif now - (job.updated_at or job.created_at) > STALLED:
                self._send(job.job_id, job.page)
                nudged += 1
        return nudged

    def _send(self, job_id: str, page: int, at: float | None = None) -> None:
        self.queues.timer(BulkPage(job=job_id, page=page, due_at=at), self.clock())
        self.jobs.mark_sent(job_id, page)

    def get(self, job_id: str) -> BulkJob:
        job = self.jobs.get(job_id, self.clock())
        if job is None:
            raise NotFound(f"bulk job {job_id} not found")
        return job

    def page(self, msg: BulkPage) -> None:
        """Do the page `msg` names, if it is the job's next (see the module's doc)."""
        now = self.clock()
        job = self.jobs.get(msg.job, now)
        if job is None or job.status != "running":
            return
        if job.page != msg.page:
            if job.page == msg.page + 1 and job.sent < job.page:
                self._send(job.job_id, job.page)  # its sender died before sending it
            return
        held = self.jobs.claim(job, now, now + CLAIM_FOR)
        if held is None:
            # Another worker holds the page: look again once its claim ends (it may die).
            self._send(job.job_id, job.page, at=now + CLAIM_FOR + 1)
            return
        page = self._runs_of_page(held)
        if page is None:
            return
        runs, nxt = page
        done = self.jobs.outcomes_of_page(held.job_id, held.page, now)

        def one(i: int) -> RunOutcome:
            run_id, run = runs[i]
            outcome = done.get(run_id)
            if outcome is None:
                outcome = self._act(held, run_id, run)
                self.jobs.record(held.job_id, held.page, i, outcome, self.clock())
            return outcome

        # The page's runs side by side: each action is a run's own, and each waits on
        # DynamoDB more than it computes.
        with ThreadPoolExecutor(THREADS) as pool:
            outcomes = list(pool.map(one, range(len(runs))))
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
        if not self.jobs.advance(held, nxt, counts, self.clock(), last=nxt is None):
            return
        if nxt is None:
            self.jobs.forget_running(held.job_id)
        else:
            self._send(held.job_id, held.page + 1)

    def _runs_of_page(
            self, job: BulkJob) -> tuple[list[tuple[str, RunRecord | None]], Any] | None:
        """The runs the job's page acts on, and the selection's cursor after them: read
        from the selection and kept on the job the first time, the kept ones after
        (None: the job moved on meanwhile, its claim taken over)."""
        if job.page_runs is None:
            runs, nxt = self.select(job.spec, job.cursor, self.page_size, job.created_at)
            if self.jobs.hold_page(job, [run_id for run_id, _ in runs], nxt):
                return runs, nxt
            kept = self.jobs.get(job.job_id, self.clock())  # an earlier holder kept them
            if kept is None or kept.page != job.page or kept.page_runs is None:
                return None
            job = kept
        assert job.page_runs is not None
        found = self.store.runs.get_runs(job.page_runs, self.clock())
        return [(r, found.get(r)) for r in job.page_runs], job.page_next

    def _act(self, job: BulkJob, run_id: str, run: RunRecord | None) -> RunOutcome:
        spec = job.spec
        action = spec["action"]
        if run is None:
            return RunOutcome(run_id, "skipped", "no such run (expired or never started)")
        try:
            if action == "cancel":
                if run.status.terminal:
                    return RunOutcome(run_id, "skipped", f"already {run.status.value}")
                if self.cancel(run_id, spec["reason"]):
                    return RunOutcome(run_id, "done", "cancelled")
                return RunOutcome(run_id, "skipped", "already finished")
            if action == "rerun":
                kwargs: dict[str, Any] = {"new_run_id": rerun_id(run_id, job.job_id)}
                if "input" in spec:
                    kwargs["input"] = spec["input"]
                new, created = self.rerun(run_id, **kwargs)
                return RunOutcome(run_id, "done", "rerun" if created else "rerun (already)",
                                  new.run_id)
            result = self.resume(run_id)
            return RunOutcome(run_id, "done",
                              "resumed" if result.get("was_paused") else "woken (not paused)")
        except (Conflict, UsageError, NotFound) as exc:
            return RunOutcome(run_id, "skipped", str(exc))
        except OrchestratorError as exc:
            return RunOutcome(run_id, "failed", f"{type(exc).__name__}: {exc}")


def rerun_id(run_id: str, job_id: str) -> str:
    """A rerun's id in a job: the same for the same run and job (a repeat finds it),
    another for another job or run. A generated job id's own 12 hex digits name the
    job; any other id's digest does; a run id past 180 characters keeps its digest."""
    generated = re.fullmatch(r"bulk-([0-9a-f]{12})", job_id)
    job = generated.group(1) if generated else _digest(job_id)
    if len(run_id) > 180:
        run_id = f"{run_id[:167]}-{_digest(run_id)}"
    return f"{run_id}.{job}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]
