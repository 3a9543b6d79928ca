"""The stack's counters in the control table (`counts`, one item a workflow), for
`GET /metrics`: every process adds what it counted since its last beat
(adapters/tallies.py) with one `ADD` per workflow it saw, and the API reads them all
with one query.

`ADD` is not idempotent: a request retried after it landed counts twice. botocore
retries only requests that failed (throttled, a dropped connection), so a count may
come out a little high then, never an invented run."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control_keys import STACK_COUNTS, Sk, counts_sk, sk_of
from orchestrator.adapters.store.control_table import ControlTable

__all__ = ["StackCounts"]

PAGE = 100


class StackCounts:
    def __init__(self, control: ControlTable) -> None:
        self.control = control

    def add(self, workflow: str, counts: Mapping[str, float]) -> None:
        """Add `counts` (attribute -> amount) to the workflow's item, in one request."""
        amounts = {a: n for a, n in counts.items() if n}
        if not amounts:
            return
        names = {f"#a{i}": attr for i, attr in enumerate(amounts)}
        values = {f":v{i}": num(n) for i, n in enumerate(amounts.values())}
        update = "ADD " + ", ".join(f"#a{i} :v{i}" for i in range(len(amounts)))
        self.control.update(STACK_COUNTS, counts_sk(workflow), update=update, values=values,
                            names=names)

    def read(self, now: float) -> dict[str, dict[str, float]]:
        """Every workflow's counters: workflow -> attribute -> amount."""
        out: dict[str, dict[str, float]] = {}
        after: Sk | None = None
        while True:
            items = self.control.query(STACK_COUNTS, now=now, limit=PAGE, after=after)
            for item in items:
                out[sk_of(item)] = {k: float(v["N"]) for k, v in item.items() if "N" in v}
            if len(items) < PAGE:
                return out
            after = sk_of(items[-1])
