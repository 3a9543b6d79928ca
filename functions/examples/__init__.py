"""Example step functions, each a `create_app(...) -> FunctionApp` factory.

- `monthly_report`: the five steps of the monthly-report workflow, doing real work on the
  sample CSVs in `data/` (extracts, a report, a local Slack outbox, a gzip archive); its
  app serves the durable examples too (what `orchestrator dev` serves).
- `durable`: durable workflows written in Python (welcome mail, an order saga, a
  batch fan-out, a hook approval, a trial deadline, retries with backoff, fan-out and
  collect, a booking saga), doing real work on files under a data directory.
- `noop`: one route that returns at once; the benchmarks' baseline.
"""
