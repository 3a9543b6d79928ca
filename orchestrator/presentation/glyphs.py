"""Each status's glyph, as the terminal diagram, `watch` and the dashboard draw it: (the
Unicode glyph, its plain-ASCII stand-in)."""

from __future__ import annotations

__all__ = ["DURABLE_GLYPHS", "GLYPHS"]

GLYPHS = {
    "success": ("✔", "ok"),
    "failed": ("✖", "FAIL"),
    "killed": ("✖", "KILL"),
    "running": ("◐", "run"),
    "dispatched": ("◐", "run"),
    "ready": ("◐", "run"),
    "queued": ("◌", "wait"),
    "blocked": ("○", "--"),
    "skipped": ("⊘", "skip"),
    "waiting": ("◔", "wait"),
    "paused": ("⏸", "PAUS"),
}
# A durable operation's statuses besides those.
DURABLE_GLYPHS = {"retrying": ("↻", "retr"), "timed_out": ("⌛", "tout")}
