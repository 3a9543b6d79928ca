"""What durable runs use besides their calls: signals (signals.py), waits for events
(event_waits.py), hooks (hooks.py), child runs (children.py), and an operator's hand on
a run: resume and reset (admin.py)."""
