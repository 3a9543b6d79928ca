"""Public on-demand prices (AWS, us-east-1, as listed on the services' pricing pages on
2026-12-01): one dated table for every estimate in the project, a run's cost
(services/reads/cost.py), a deployed stack's cost standing idle (infra/idle_cost.py) and the
benchmarks' bills (tests/bench/). Data only: it imports nothing, so any layer may read it,
and the Lambda package (orchestrator/ and functions/, never infra/) carries it."""

from __future__ import annotations

__all__ = ["ADDED", "PRICES", "PRICES_DATE"]

PRICES_DATE = "2026-12-01"
PRICES = {
    "lambda_request": 0.20 / 1e6,  # per invocation
    "lambda_gb_second": 0.0000166667,  # x86_64
    "dynamodb_write_unit": 0.625 / 1e6,  # on-demand write request unit
    "dynamodb_read_unit": 0.125 / 1e6,  # on-demand read request unit
    "sqs_request": 0.40 / 1e6,  # standard queue, per 64 KB chunk
    "cloudwatch_alarm_month": 0.10,  # standard resolution, per alarm
    "logs_ingest_gb": 0.50,
    "step_functions_standard_transition": 25.0 / 1e6,
    "step_functions_express_request": 1.00 / 1e6,
    "step_functions_express_gb_second": 0.00001667,  # first 1,000 GB-hours a month
    # Added 2026-12-02 for the cost benchmark (tests/bench/cost.py); sources in ADDED.
    "apigw_http_request": 1.00 / 1e6,  # HTTP API, first 300 million a month
    "s3_put_request": 0.005 / 1000,  # S3 Standard PUT, COPY, POST, LIST
    "s3_get_request": 0.0004 / 1000,  # S3 Standard GET and the rest
    "lambda_gb_second_arm": 0.0000133334,  # arm64 (Graviton), first tier
    "lambda_durable_operation": 8.00 / 1e6,  # a step, wait or callback
    "lambda_durable_data_written_gb": 0.25,
    "lambda_durable_data_retained_gb_month": 0.15,
}
# Where the entries added after PRICES_DATE come from, and when they were looked up. The
# durable-functions rates were not read on AWS's own pricing page (it renders its rates
# client-side); they are as two secondary sources quote that page.
ADDED = {
    "apigw_http_request": "2026-12-02, Amazon API Gateway pricing (HTTP APIs)",
    "s3_put_request": "2026-12-02, Amazon S3 pricing (S3 Standard requests)",
    "s3_get_request": "2026-12-02, Amazon S3 pricing (S3 Standard requests)",
    "lambda_gb_second_arm": "2026-12-02, AWS Lambda pricing (Arm price, first tier)",
    "lambda_durable_operation": "2026-12-02, AWS Lambda pricing (durable functions), as "
                                "quoted by secondary sources: not verified on AWS's page",
    "lambda_durable_data_written_gb": "2026-12-02, as lambda_durable_operation",
    "lambda_durable_data_retained_gb_month": "2026-12-02, as lambda_durable_operation",
}
