"""The stack's health, for the operator's console: each process's heartbeat, which also
adds what the process counted to the stack's counters (heartbeat.py), and what the
dashboard's health page, `GET /health` and `GET /metrics` read (overview.py); a
workflow's health over a day or week from its hourly counters (workflow_stats.py, with
the latency percentiles of latency.py)."""
