"""Reading runs as the API shows them: a run's view (views.py), what a follower reads
of a DAG run's rows (step_follow.py) or a durable run's journal (journal_follow.py),
and what a run cost (cost.py)."""
