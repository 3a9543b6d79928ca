"""The dashboard's search and bulk actions over real HTTP (the browser test drives the
same pages in chromium): the runs page finds runs by what they carried, a bad query is
shown as a problem; ticked runs or every matching run go through a confirmation page
with the count to a job page that shows what it did to each run."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.harness import Harness
from tests.support.polling import until
from tests.support.served import api_client

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  gated:
    steps:
      check: { backend: fn, route: /gate, retry: { max: 0 } }
"""


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    with api_client(h) as c:
        yield h, c


def _done_page(c: httpx.Client, path: str) -> str | None:
    """The job's page once the job is done (its state, not a run's outcome, says so)."""
    text = c.get(path).text
    return text if 'jobstate s-success">done<' in text else None


def _ids(page: str) -> list[str]:
    return re.findall(r'name="run_id" value="([^"]+)"', page)


def test_search_then_rerun_every_match_through_a_confirmation(
        stack: tuple[Harness, httpx.Client]) -> None:
    h, c = stack
    acme = [h.start("gated", {"ok": False, "customer": "acme", "i": i}) for i in range(3)]
    other = h.start("gated", {"ok": False, "customer": "globex"})
    for r in [*acme, other]:
        h.wait(r)
    page = c.get("/ui/runs", params={"q": 'input.customer = "acme"'})
    assert page.status_code == 200 and _ids(page.text) == acme[::-1]
    assert 'value="input.customer = &#34;acme&#34;"' in page.text  # the box keeps it
    bad = c.get("/ui/runs", params={"q": "customer = acme"})
    assert bad.status_code == 200
    assert "search: &#39;customer&#39;: a path starts with one of input" in bad.text

    confirm = c.post("/ui/bulk", data={
        "which": "matching", "q": 'input.customer = "acme"', "status": "failed",
        "action": "rerun", "input": '{"ok": true}'})
    assert confirm.status_code == 200, confirm.text
    assert "Rerun 3 runs?" in confirm.text
    spec = html.unescape(re.search(r'name="spec" value="([^"]+)"', confirm.text)[1])  # type: ignore[index]
    assert json.loads(spec) == {"action": "rerun", "q": 'input.customer = "acme"',
                                "status": "failed", "input": {"ok": True}}
    started = c.post("/ui/bulk/confirm", data={"spec": spec, "expected": "3"})
    assert started.status_code == 303
    job_page = started.headers["location"]
    done = until("the job done", lambda: _done_page(c, job_page))
    text = " ".join(done.split())
    assert "3 of 3 runs · 3 done · 0 skipped · 0 failed" in text
    for r in acme:
        assert f'href="/ui/runs/{r}"' in done
    assert other not in done


def test_ticked_runs_are_cancelled_and_a_bad_form_comes_back(
        stack: tuple[Harness, httpx.Client]) -> None:
    h, c = stack
    done = [h.start("gated", {"ok": True}) for _ in range(2)]
    for r in done:
        h.wait(r)
    confirm = c.post("/ui/bulk", data={"which": "selected", "run_id": done,
                                       "action": "cancel", "reason": "tidy"})
    assert "Cancel 2 runs?" in confirm.text
    spec = html.unescape(re.search(r'name="spec" value="([^"]+)"', confirm.text)[1])  # type: ignore[index]
    job_id = re.search(r'name="job_id" value="([^"]+)"', confirm.text)[1]  # type: ignore[index]
    job = c.post("/ui/bulk/confirm", data={"spec": spec, "job_id": job_id}).headers["location"]
    # The confirmation sent again (a double click): the same job, not a second one.
    again = c.post("/ui/bulk/confirm", data={"spec": spec, "job_id": job_id})
    assert again.headers["location"] == job == f"/ui/bulk/{job_id}"
    assert [j["job_id"] for j in c.get("/bulk-actions").json()["jobs"]] == [job_id]
    page = until("the job done", lambda: _done_page(c, job))
    bad = c.post("/ui/bulk/confirm", data={"spec": spec, "job_id": "../other"})
    assert "job_id: &#39;../other&#39; is not a job id" in c.get(bad.headers["location"]).text
    assert "0 done · 2 skipped" in " ".join(page.split()) and "already success" in page
    # Nothing ticked; a rerun's input that is not JSON; a time range with "every run".
    for form, says in [
        ({"which": "selected", "action": "cancel"}, "tick the runs"),
        ({"which": "selected", "run_id": done[0], "action": "rerun", "input": "{"},
         "new input: not JSON"),
        ({"which": "matching", "status": "failed", "since": "2026-01-01T00:00",
          "action": "cancel"}, "created after/before"),
    ]:
        back = c.post("/ui/bulk", data=form)
        assert back.status_code == 303, back.text
        shown = c.get(back.headers["location"]).text
        assert says in html.unescape(shown), shown[:2000]
    assert c.get("/ui/bulk/no-such-job").status_code == 404
