"""The ways a run starts besides the API: events (events.py), signed webhooks
(webhooks.py) and schedules (scheduler.py). Each builds admission's request."""
