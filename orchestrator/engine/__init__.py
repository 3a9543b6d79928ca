"""2 · Pure decisions. Given rows, a clock reading and a random number, the engine says
what must change, as frozen command objects; it never does I/O (an import-linter contract
keeps boto3, botocore, httpx and starlette out). States and their transition table,
records, attempts (classify, backoff, retry or fail), the run's transitions (halt,
continue-independent, kill, finish), planning, reconciliation, schedule ticks, admission
slot math and rerun planning. The durable-workflow journal will live here too."""
