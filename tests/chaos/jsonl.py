"""What every process of the harness writes and the checker reads: JSON lines, one
record per line, appended and flushed at once (a SIGKILLed writer loses no line it
finished writing), and the one digest of a JSON value."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["JsonlWriter", "digest", "read_jsonl"]


def digest(value: Any) -> str:
    """SHA-256 (16 hex digits) of the canonical JSON of `value`: key order and spacing
    do not matter, so the bytes a function sent and the row's copy of them compare."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class JsonlWriter:
    """Appends one JSON object per line; safe across threads of one process. Each line
    goes to the OS in one write(), so a SIGKILL cuts no line in half."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one file; a torn last line (a writer killed mid-write) is skipped."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
