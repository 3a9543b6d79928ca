"""Example step functions, each a `create_app(...) -> FunctionApp` factory.

- `monthly_report`: the five steps of the monthly-report workflow, doing real work on the
  sample CSVs in `data/` (extracts, a report, a local Slack outbox, a gzip archive).
- `noop`: one route that returns at once; the benchmarks' baseline.
"""
