"""Script texts, kept in the blob store by the SHA-256 of their bytes (content
addressed: a text stored twice is one blob), so a run names its script by hash and a
host fetches it by a presigned URL."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from orchestrator.errors import UsageError

__all__ = ["MAX_SCRIPT_BYTES", "ScriptTexts", "check_script", "digest", "script_url"]

# A script is code, not data: 256 KiB of bash is far past any recipe.
MAX_SCRIPT_BYTES = 256 * 1024
# Texts a process keeps after storing or reading them (they are small and immutable).
_KEPT = 256


def digest(text: str) -> str:
    """The hex SHA-256 of a script's UTF-8 bytes: its identity."""
    return hashlib.sha256(text.encode()).hexdigest()


def check_script(text: Any, where: str) -> str:
    """`text` as a script, or UsageError naming `where` (a file, a field)."""
    if not isinstance(text, str):
        raise UsageError(f"{where}: a script is text, got {type(text).__name__}")
    if not text.strip():
        raise UsageError(f"{where}: the script is empty")
    if "\x00" in text:
        raise UsageError(f"{where}: not a script: it holds a NUL byte (binary data?)")
    if len(text.encode()) > MAX_SCRIPT_BYTES:
        raise UsageError(f"{where}: the script is over {MAX_SCRIPT_BYTES // 1024} KiB")
    return text


def _key(sha: str) -> str:
    return f"scripts/{sha}.sh"


def script_url(blobs: Any, sha: str) -> str:
    """A presigned GET URL of a stored text (a host fetches it without credentials)."""
    return str(blobs.url(_key(sha)))


class ScriptTexts:
    def __init__(self, blobs: Any) -> None:
        self.blobs = blobs
        self._kept: dict[str, str] = {}
        self._lock = threading.Lock()

    def put(self, text: str) -> str:
        """Store `text` (once per process and hash); its hash."""
        sha = digest(text)
        with self._lock:
            if sha in self._kept:
                return sha
        self.blobs.put(_key(sha), text.encode())
        self._keep(sha, text)
        return sha

    def get(self, sha: str) -> str:
        with self._lock:
            text = self._kept.get(sha)
        if text is None:
            text = self.blobs.get(_key(sha)).decode()
            self._keep(sha, text)
        return text

    def url(self, sha: str) -> str:
        """A presigned GET URL of the text (a host fetches it without credentials)."""
        return script_url(self.blobs, sha)

    def _keep(self, sha: str, text: str) -> None:
        with self._lock:
            if len(self._kept) >= _KEPT:
                self._kept.pop(next(iter(self._kept)))
            self._kept[sha] = text
