"""A serverless-style orchestrator: durable DAG workflows over stateless HTTP functions,
with all run state in DynamoDB (changed only by conditional writes) and SQS for dispatch."""

__version__ = "0.1.0"
