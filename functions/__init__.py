"""Step functions: stateless HTTP endpoints the orchestrator calls.

`functions.sdk` is the SDK to write them (`functions.sdk.durable` for durable workflows,
whose names users import as `functions.durable`); `functions.examples` holds example apps.
Each SDK module has one import path, under `functions.sdk`."""
