"""Terminal transitions counted while attempts end, written as one counter write per run
when the tally is flushed (`Executor.flush`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Tally"]


@dataclass
class Tally:
    """Terminal transitions counted locally and folded into one write per run."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, run_id: str, n: int = 1) -> None:
        if n:
            self.counts[run_id] = self.counts.get(run_id, 0) + n
