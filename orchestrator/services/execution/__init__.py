"""Applying the engine's decisions to a run's rows: an attempt's outcome (executor.py),
its dependants' promotion (promotions.py), a stop (run_stops.py), the run's finish
(run_finishes.py), and the counts attempts end with (tally.py, folds.py)."""
