"""Lines no wider than the terminal, and nothing cut (README, "Watching a run"): a line
too wide is wrapped at its spaces, its next lines indented under its own; a word wider
than a line (a run id, an error's compact JSON) is broken after a comma, a dash, a colon
or a slash where one falls in the line's second half, else where it must. Widths are
counted in terminal cells (a wide glyph, ⌛, takes two). A width of None leaves every
line as it is. A date and its time stay on one line.

Pure: text in, lines out."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.cells import cell_len

__all__ = ["cells", "flow", "wrap"]

# Words, and the space before each; a date and its time are one word (never split).
_WORDS = re.compile(r"(\s*)(\d{4}-\d\d-\d\d \d\d:\d\d\S*|\S+)")
_BREAKS = ",:-/"  # a long word is broken after one of these, the first found first
_ROOM = 8  # a word that must break starts on its line if this many cells are left


def cells(text: str) -> int:
    """How many terminal cells `text` takes."""
    return cell_len(text)


def _head(word: str, room: int) -> int:
    """How many characters of `word` fill `room` cells (one at least: a line holds
    something), ending after a break character where one falls in the second half."""
    used, end = 0, 0
    for ch in word:
        size = cells(ch)
        if used + size > room and end:
            break
        used += size
        end += 1
    if end < len(word):
        for c in _BREAKS:
            cut = word.rfind(c, 0, end) + 1
            if cut > end // 2:
                return cut
    return end


def wrap(line: str, width: int | None, hang: int = 2) -> list[str]:
    """`line` as lines of at most `width` cells: its words and the spaces between
    them kept, except where it breaks; each next line indented as `line` is, and `hang`
    more. An indent more than half the width is cut to half, so words fit beside it."""
    if width is None or cells(line) <= width:
        return [line]
    width = max(1, width)
    body = line.lstrip(" ")
    half = width // 2
    lead = " " * min(len(line) - len(body), half)
    rest = " " * min(len(lead) + hang, half)
    out: list[str] = []
    current, empty = lead, True
    for gap, word in _WORDS.findall(body):
        joined = current + word if empty else current + gap + word
        if cells(joined) <= width:
            current, empty = joined, False
            continue
        if not empty:
            if cells(rest + word) <= width or width - cells(current + gap) < _ROOM:
                out.append(current)
                current, empty = rest, True
            else:  # it breaks anyway: its head fills this line
                current += gap
        while cells(current + word) > width:  # what is left of it is wider than a line
            n = _head(word, width - cells(current))
            out.append(current + word[:n])
            current, word = rest, word[n:]
        current, empty = current + word, empty and not word
    if not empty or not out:
        out.append(current)
    return out


def flow(items: Sequence[str], width: int | None, sep: str = "  ", indent: str = ""
         ) -> list[str]:
    """`items` side by side, `sep` between two, on as few lines of at most `width`
    cells as they take, each line after the first starting with `indent`; an item is
    wrapped only where it is wider than a line itself."""
    lines: list[str] = []
    current = ""
    for item in items:
        joined = f"{current}{sep}{item}" if current else item
        if width is None or cells(joined) <= width:
            current = joined
            continue
        if current:
            lines.append(current)
            item = indent + item
        *done, current = wrap(item, width)
        lines += done
    return [*lines, current] if current or not lines else lines
