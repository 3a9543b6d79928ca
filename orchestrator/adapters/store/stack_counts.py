"""The stack's counters in the control table (`counts`, one item a workflow), for
`GET /metrics`: every process adds what it counted since its last beat
(adapters/tallies.py) with one `ADD` per workflow it saw, and the API reads them all
with one query.

A workflow the stack does not declare (an ad-hoc script's, `POST /scripts/runs`, whose
name its client chooses) is counted under ADHOC: each new name would otherwise add an
item that never expires, and a label to every scrape.

`ADD` is not idempotent: a request retried after it landed counts twice. botocore
retries only requests that failed (throttled, a dropped connection), so a count may
come out a little high then, never an invented run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import STACK_COUNTS, Sk, counts_sk, sk_of
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["ADHOC", "StackCounts"]

PAGE = 100
# The workflow the runs of undeclared workflows are counted under (no workflow's name:
# a name has no parentheses).
ADHOC = "(ad-hoc)"


class StackCounts:
    def __init__(self, control: ControlTable,
                 declared: Callable[[str], bool] | None = None) -> None:
        self.control = control
        # Whether a workflow is the manifest's (or a stored script's); None: all are.
        self.declared = declared

    def label(self, workflow: str) -> str:
        """The workflow a count of `workflow` is added under: itself, or ADHOC."""
        if self.declared is None or workflow == ADHOC or self.declared(workflow):
            return workflow
        return ADHOC

    def add(self, workflow: str, counts: Mapping[str, float]) -> None:
        """Add `counts` (attribute -> amount) to the workflow's item (ADHOC's if it is
        not declared), in one request."""
        amounts = {a: n for a, n in counts.items() if n}
        if not amounts:
            return
        workflow = self.label(workflow)
        names = {f"#a{i}": attr for i, attr in enumerate(amounts)}
        values = {f":v{i}": num(n) for i, n in enumerate(amounts.values())}
        update = "ADD " + ", ".join(f"#a{i} :v{i}" for i in range(len(amounts)))
        self.control.update(STACK_COUNTS, counts_sk(workflow), update=update, values=values,
                            names=names)

    def read(self, now: float) -> dict[str, dict[str, float]]:
        """Every workflow's counters: workflow -> attribute -> amount (an undeclared
        workflow's item, written before they were counted under ADHOC, summed into
        ADHOC's)."""
        out: dict[str, dict[str, float]] = {}
        after: Sk | None = None
        while True:
            items = self.control.query(STACK_COUNTS, now=now, limit=PAGE, after=after)
            for item in items:
                counts = out.setdefault(self.label(sk_of(item)), {})
                for k, v in item.items():
                    if "N" in v:
                        counts[k] = counts.get(k, 0.0) + float(v["N"])
            if len(items) < PAGE:
                return out
            after = sk_of(items[-1])
