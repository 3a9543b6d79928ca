"""4 · Apply the engine's decisions through the adapters: the executor (one method per
command), starting / viewing / cancelling / rerunning runs, admission (concurrency groups
and throttles), schedules, events, webhooks, idempotency keys and API keys."""
