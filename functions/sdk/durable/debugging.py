"""A replay that stops in the debugger: a call in mode `replay` (`orchestrator runs
replay RUN --break OP`) replays the journal as `check` does, running nothing, and in the
process serving the call it calls `breakpoint()` (so PYTHONBREAKPOINT picks the debugger,
pdb by default, and `PYTHONBREAKPOINT=0` turns it off):

- right before the operation named (or whose id is) `break_at` is issued, the first
  time the workflow issues it;
- at the first replay mismatch, before it is reported, when no `break_at` is given or
  the mismatch comes before it.

The debugger starts in this module's frame; the workflow's line that issues the
operation is a few frames up (the banner says how many: `up N`). Each stop is reported
in the answer (`stops`), whether a debugger ran or not. The server's event loop waits
while the debugger does: this is for a functions app run on a laptop, in a terminal."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from functions.sdk.durable.call import Place

__all__ = ["Stops"]

# Frames of these modules are the SDK's own, between the stop and the workflow's code.
_OWN = ("functions.sdk.", "asyncio.")


def _workflow_frame(frame: FrameType | None) -> tuple[int, FrameType | None]:
    """How many frames up from `frame` the first one outside the SDK is, and that frame."""
    n = 0
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if n > 0 and not name.startswith(_OWN):
            return n, frame
        frame = frame.f_back
        n += 1
    return 0, None


@dataclass
class Stops:
    """Where a replay call stops (`break_at`: an operation's name or id)."""

    break_at: str | None = None
    reached: bool = False
    stops: list[dict[str, Any]] = field(default_factory=list)

    def before(self, place: Place) -> None:
        """`place` is about to be issued: stop if it is the one asked for (once)."""
        if self.reached or self.break_at is None or self.break_at not in (place.name,
                                                                          place.id):
            return
        self.reached = True
        self._stop("break", place.doc(), None)

    def diverged(self, recorded: dict[str, Any], issued: Place) -> None:
        """The workflow issued `issued` where the journal records `recorded`: stop,
        unless the operation asked for was met before (the report shows the mismatch)."""
        if self.break_at is not None and self.reached:
            return
        self._stop("mismatch", issued.doc(), recorded)

    def _stop(self, reason: str, operation: dict[str, Any],
              recorded: dict[str, Any] | None) -> None:
        self.stops.append({"reason": reason, **operation})
        ups, frame = _workflow_frame(sys._getframe())
        where = ("" if frame is None
                 else f" at {frame.f_code.co_filename}:{frame.f_lineno} (`up {ups}`)")
        what = f"{operation['kind']} {operation['name']!r}"
        if reason == "break":
            text = f"replay: stopped before {what}{where}"
        else:
            text = (f"replay: mismatch: the code issues {what}{where} where the journal"
                    f" records {recorded.get('kind') if recorded else None}"
                    f" {recorded.get('name') if recorded else None!r}")
        print(f"{text}; `p operation`, `p recorded`; `c` goes on", file=sys.stderr,
              flush=True)
        breakpoint()  # PYTHONBREAKPOINT decides which debugger (0: none)
        return
