"""Versions of a backend's code: which are live and which is current (registry.py), every
open durable run checked against code (check.py), and the moves between versions that
the check allows: migrate, promote, retire (moves.py)."""

from orchestrator.services.versions.check import Checker, Target, Verdict
from orchestrator.services.versions.moves import Moves
from orchestrator.services.versions.registry import Versions, digest_label

__all__ = ["Checker", "Moves", "Target", "Verdict", "Versions", "digest_label"]
