"""Where a script's text comes from: the call's `script` (a `ScriptRef`: the text inline,
or a presigned URL to GET it), else `<name>.sh` in the host's directory. Texts are cached
by their SHA-256, and a text whose hash is not the one the call names is refused (the
run would replay on another script)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from functions.sdk.failures import TerminalError
from functions.sdk.protocol import ScriptRef

__all__ = ["Script", "Texts", "sha256"]

MAX_CACHED = 256


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Script:
    """A script's name, text and the hash of its text."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self.sha256 = sha256(text)


class Texts:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._cache: dict[str, str] = {}

    def listed(self) -> list[str]:
        """The names of the directory's scripts (`<name>.sh`)."""
        if self.directory is None:
            return []
        return sorted(p.stem for p in self.directory.glob("*.sh") if p.is_file())

    async def get(self, name: str, ref: ScriptRef | None) -> Script:
        """The script a call of workflow `name` runs; TerminalError if there is none."""
        if ref is not None:
            return Script(ref.name, await self._by_ref(ref))
        path = None if self.directory is None else self.directory / f"{name}.sh"
        if path is None or not path.is_file():
            where = (f"the host's directory {self.directory} has no {name}.sh"
                     if self.directory is not None else "the host serves no directory")
            raise TerminalError(f"no script named {name!r}: {where}, and the call carries no"
                                " script text", code="script_not_found")
        return Script(name, path.read_text())

    async def _by_ref(self, ref: ScriptRef) -> str:
        known = self._cache.get(ref.sha256)
        if known is not None:
            return known
        if ref.text is not None:
            text = ref.text
        elif ref.url:
            text = await _fetch(ref)
        else:
            raise TerminalError(f"script {ref.name!r} ({ref.sha256[:12]}): the call gives"
                                " neither its text nor a URL to fetch it",
                                code="script_not_found")
        got = sha256(text)
        if got != ref.sha256:
            raise TerminalError(f"script {ref.name!r}: its text hashes to {got[:12]}, not to"
                                f" {ref.sha256[:12]} as the call says: refused",
                                code="script_hash_mismatch")
        if len(self._cache) >= MAX_CACHED:
            self._cache.pop(next(iter(self._cache)))
        self._cache[ref.sha256] = text
        return text


async def _fetch(ref: ScriptRef) -> str:
    url = str(ref.url)
    if not url.startswith(("http://", "https://")):
        raise TerminalError(f"script {ref.name!r}: {url[:80]!r} is not an http(s) URL",
                            code="script_not_found")
    try:
        async with httpx.AsyncClient(timeout=30.0) as client:
            resp = await client.get(url)
            resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise TerminalError(f"script {ref.name!r}: could not fetch its text: {exc}",
                            code="script_unavailable") from exc
    return resp.text
