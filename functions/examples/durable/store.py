"""The examples' state: small JSON files under a data directory, safe to share between
threads and processes.

- `Records` is one JSON object in one file. `change()` holds an exclusive lock while
  the caller edits it and writes it back atomically (temp file + rename), so readers see
  the state before or after a change, never half of one. `apply(key, effect)` runs an
  effect once per idempotency key: the effect and the key land in the same write, so a
  step that runs again (a retry, a worker that died before its result was recorded) gets
  the first answer back instead of charging, booking or reserving twice.
- `Log` is an append-only JSON-lines file: what a service was asked to do, call by call
  (the tests read it to count calls and measure overlap)."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Log", "Records", "write_atomic"]

# Where a Records file keeps the answers of the effects it applied, by idempotency key.
APPLIED = "_applied"


def write_atomic(path: Path, content: bytes) -> None:
    """Replace `path` with `content`: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (a lock file beside the data): between threads too,
    since each holder opens the file anew."""
    lock = path.with_name(f".{path.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed
        yield


class Records:
    """One JSON object in `path`; `seed()` gives its content before the first change."""

    def __init__(self, path: Path, seed: Callable[[], dict[str, Any]] | None = None) -> None:
        self.path = path
        self._seed = seed or dict

    def read(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return self._seed()
        return data

    @contextmanager
    def change(self) -> Iterator[dict[str, Any]]:
        """The object, to edit in place; written back if the block ends without error."""
        with _locked(self.path):
            doc = self.read()
            before = copy.deepcopy(doc)
            yield doc
            if doc != before or not self.path.exists():
                text = json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
                write_atomic(self.path, text.encode())

    def apply(self, key: str, effect: Callable[[dict[str, Any]], Any]) -> Any:
        """`effect(doc)`'s answer, run once for `key`: a repeat returns the first answer
        and changes nothing. An effect that raises changes nothing either."""
        with self.change() as doc:
            applied = doc.setdefault(APPLIED, {})
            if key in applied:
                return copy.deepcopy(applied[key])
            answer = effect(doc)
            applied[key] = answer
            return copy.deepcopy(answer)

    def applied(self, key: str) -> bool:
        return key in self.read().get(APPLIED, {})


class Log:
    """An append-only JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, **entry: Any) -> None:
        with _locked(self.path), self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self, **match: Any) -> list[dict[str, Any]]:
        """Every entry, oldest first; with `match`, those whose fields equal it."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.strip()]
        return [e for e in out if all(e.get(k) == v for k, v in match.items())]
