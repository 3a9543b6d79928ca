"""Coordination between runs and people: approval gates and the inbox (approvals.py),
locks (locks.py) and durable state cells (state_cells.py)."""
