"""SDK for writing step functions: stateless HTTP endpoints the orchestrator calls."""
