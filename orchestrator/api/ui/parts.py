"""The run page's parts that follow the run, besides its live part: the status glyph of
its heading, its facts (status, times, how long it took), its outcome (error, result),
its cost, its lineage and its actions. The page draws them (pages.run) and its live
stream draws them again (live.run_stream), from the same macros (templates/
_run_parts.html), and sends each when it changed, so a page left open while its run
ends shows one status, its end time and cost, and no Cancel button.

The page names what it drew in its stream's URL (`shown`: a short digest of each
part), so the stream, or its reconnection, sends no part the page already shows: an
action's form is swapped only when the run moved on (never under the user's typing
because the stream opened), and a page opened on an ended run is sent nothing but its
live part. The lineage costs reads (ui/reads.py): the page reads it, and the stream
again only once, when the run ended while the page was open."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from orchestrator.api.ui.render import macros

__all__ = ["FOLLOWING", "digest", "draw", "read_shown", "shown"]

# The parts drawn from the run's view alone, at every drawing of the live part.
FOLLOWING = ("glyph", "facts", "outcome", "cost", "actions")


def draw(view: dict[str, Any], family: dict[str, Any] | None = None) -> dict[str, Markup]:
    """Each part's content for `view`; the lineage too when `family` is given."""
    parts = macros("_run_parts.html")
    drawn = {name: getattr(parts, name)(view) for name in FOLLOWING}
    if family is not None:
        drawn["lineage"] = parts.lineage(view, family)
    return drawn


def digest(html: str) -> str:
    """A part's short name for what it shows (8 hex digits: enough to tell a change)."""
    return hashlib.blake2b(html.encode(), digest_size=4).hexdigest()


def shown(drawn: Mapping[str, str]) -> str:
    """What a page shows, for its stream's URL: `glyph:1a2b3c4d,facts:...`."""
    return ",".join(f"{name}:{digest(html)}" for name, html in drawn.items())


def read_shown(raw: str | None) -> dict[str, str]:
    """`shown` read back (a part it does not name, or a garbled one, is sent)."""
    pairs = (item.partition(":") for item in (raw or "").split(",") if item)
    return {name: value for name, _, value in pairs if name and value}
