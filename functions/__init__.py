"""Step functions: stateless HTTP endpoints the orchestrator calls.

`functions.sdk` is the SDK to write them (`functions.sdk.durable`, also imported as
`functions.durable`, for durable workflows); `functions.examples` holds example apps. The
other modules here are the SDK modules' paths from before it was a package."""
