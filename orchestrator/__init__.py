"""A serverless-style orchestrator: durable DAG workflows over stateless HTTP functions,
with all run state in DynamoDB (changed only by conditional writes) and SQS for dispatch.

The stages, each importing only those before it (see README.md here): manifest/ →
engine/ → adapters/ → services/ → worker.py · sweeper.py (the Lambda handlers will be
their peer) → runtime.py → presentation/ (how a run is drawn) → api/ → cli/."""

__version__ = "0.1.0"
