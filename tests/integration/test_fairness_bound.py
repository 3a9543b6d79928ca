"""Issue 41 §1's fairness bound at the issue's size: with `[{limit: N}, {limit: M, key:
tenant}]`, tenant A queues 10,000 runs, then tenant B queues one; B's run starts within
the next N admissions. On a WorkflowEnv's fake clock (the runs hold their places at an
approval gate until the test ends them), moto and uvicorn; slow (the 10,000 starts).
Nothing is pumped: a start is admitted (or queued) as it is made, and a cancel lets the
next run go as it returns."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from infra.emulator import Emulator
from tests.support.matrix import Calls, ManifestEnv, make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

N = 3
BACKLOG = int(os.environ.get("FAIRNESS_BACKLOG", "10000"))
WORKFLOWS = {"pooled": {
    "concurrency": [{"limit": N}, {"limit": 10, "key": "${{ input.tenant }}"}],
    "steps": {"hold": {"approval": {"prompt": "hold", "timeout": "1h"}},
              "a": {"backend": "app", "route": "/work", "dependsOn": ["hold"]}}}}
LINE = "workflow:pooled#"  # the keyless limit's line: its holders are the runs going


@pytest.fixture
def env(emulator: Emulator) -> Iterator[ManifestEnv]:
    with ManifestEnv(make_app(Calls()), emulator=emulator, dags=WORKFLOWS) as env:
        yield env


def test_behind_ten_thousand_of_one_tenant_a_newcomer_waits_at_most_n_admissions(
    env: ManifestEnv,
) -> None:
    with ThreadPoolExecutor(4) as pool:
        a = list(pool.map(lambda _: env.rt.runs.start("pooled", {"tenant": "huge"})[0].run_id,
                          range(BACKLOG)))
    control = env.rt.store.control
    going = set(control.holders(LINE, env.now).runs)
    assert len(going) == N and going <= set(a)
    b = env.start("pooled", {"tenant": "tiny"})
    assert env.status(b) == "queued"
    admitted: list[str] = []
    while b not in going:
        oldest = min(going, key=lambda r: env.rt.runs.get(r).started_at or 0.0)
        assert env.rt.runs.cancel(oldest, "done holding")
        assert env.status(oldest) == "killed"
        now = set(control.holders(LINE, env.now).runs)
        admitted += sorted(now - going)
        going = now
        assert len(admitted) <= N, admitted
    assert env.status(b) == "running"
    assert len(admitted) <= N and admitted[-1] == b
