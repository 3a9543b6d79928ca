"""The durable runner: a durable run's driver row, advanced call after call (driver.py),
each call's checkpoints read as they stream in (exchange.py)."""

from orchestrator.runners.durable.driver import Durable, Target

__all__ = ["Durable", "Target"]
