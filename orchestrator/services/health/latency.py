"""Step latency percentiles estimated from the duration histogram's buckets
(adapters/tallies.py): the exact durations are never kept, only how many fell in each
bucket, so a percentile is an estimate, made as Prometheus's `histogram_quantile` makes
it:

- the rank is `q` times the count; the bucket is the first whose cumulative count
  reaches the rank;
- inside it the durations are taken as spread evenly: the estimate is its lower bound
  (the previous bucket's bound, 0 for the first) plus its width times the share of the
  bucket's count below the rank;
- in the last bucket (past the last bound, `+Inf`) nothing is known but that they took
  longer: the estimate is the last bound (a lower bound on the truth).

Pure functions, nothing else."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.adapters.tallies import DURATION_BUCKETS, bucket_attr

__all__ = ["bucket_counts", "quantile"]


def bucket_counts(counts: Mapping[str, float]) -> list[float]:
    """A workflow's counts' histogram: the durations in each bucket (not cumulative),
    `len(DURATION_BUCKETS) + 1` of them, `+Inf` last."""
    return [counts.get(bucket_attr(i), 0.0) for i in range(len(DURATION_BUCKETS) + 1)]


def quantile(q: float, buckets: Sequence[float],
             bounds: Sequence[float] = DURATION_BUCKETS) -> float | None:
    """The `q` quantile (0 < q <= 1) of the durations counted in `buckets` (each
    bucket's own count, `len(bounds) + 1` of them), in seconds; None when there are
    none."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    below = 0.0
    for i, n in enumerate(buckets):
        if n > 0 and below + n >= rank:
            if i >= len(bounds):
                return bounds[-1]
            lower = bounds[i - 1] if i else 0.0
            return lower + (bounds[i] - lower) * (rank - below) / n
        below += n
    return bounds[-1]
