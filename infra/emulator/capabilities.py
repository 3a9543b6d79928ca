"""What the embedded emulator reaches inside its dependencies, checked at start-up.

moto documents its decorators and its server, not the classes behind them; botocore
documents its events, not a client's signer. The emulator reaches past both in a few named
places: each speed-up of `speedups/`, the in-process dispatch of `inprocess.InProcess`,
and the unsigned requests of `Emulator.attach`. Each of those is a `Capability`: a name,
what it buys, and the `Reach`es it depends on. A reach is one private attribute (a dotted
path), with the fingerprints of its code in every release it was checked against. A
speed-up that reproduces or short-cuts a moto function is only right while that function
is the code that was read: a release that changes it (or drops it) switches the speed-up
off, never the emulator.

`check(capability)` answers None (usable) or why not, in one line; `record` keeps the
verdict of each piece this process applied or switched off, with one log line for each
switched off, and `report()` lists them for `orchestrator doctor`, `--version` and the
`dev` banner, the facts users paste into a bug report.

    moto 5.2.5: speed-up json-request switched off: moto.core.responses:normalize_request
    is missing (moto 5.2.4 normalizes every request before the handler)

A fingerprint is the first 12 hex digits of the SHA-256 of the object's source text, as
`inspect.getsource` gives it: the same on every Python, and a new one for any change in
the code. `python -m infra.capabilities` prints the fingerprints of this install, to add
after a new moto release has been read and tested."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import platform
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any

__all__ = [
    "Capability",
    "Reach",
    "Verdict",
    "check",
    "facts",
    "fingerprint",
    "forget",
    "record",
    "report",
    "resolve",
    "versions",
]

log = logging.getLogger("orchestrator.emulator")


@dataclass(frozen=True)
class Reach:
    """One private attribute of a dependency: `module:Attr.attr` (the part after the colon
    a chain of getattr). `known`: the fingerprints of its code in the releases checked;
    empty means that its presence is all that is relied on."""

    path: str
    known: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Capability:
    name: str  # e.g. "speedup:update-parse", "in-process", "unsigned"
    what: str  # what it buys, in a few words
    reaches: tuple[Reach, ...]


@dataclass(frozen=True)
class Verdict:
    name: str
    what: str
    active: bool
    reason: str = ""  # why it is off ("" when active)


_lock = threading.Lock()
_verdicts: dict[str, Verdict] = {}
_MISSING = object()


def resolve(path: str) -> Any:
    """The object at `module:Attr.attr`; raises LookupError naming what is missing."""
    module_name, _, chain = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise LookupError(f"{module_name} cannot be imported ({exc})") from exc
    for part in chain.split(".") if chain else ():
        # The class's own entry first (a property or classmethod as such), then getattr.
        own = vars(obj).get(part, _MISSING) if isinstance(obj, type) else _MISSING
        obj = getattr(obj, part, _MISSING) if own is _MISSING else own
        if obj is _MISSING:
            raise LookupError(f"{path} is missing")
    return obj


def fingerprint(obj: Any) -> str | None:
    """The fingerprint of an object's source (None: it has none to read)."""
    for attr in ("fget", "__func__"):  # a property's getter, a classmethod's function
        obj = getattr(obj, attr, obj)
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def check(capability: Capability) -> str | None:
    """None if every reach of the capability is there, as checked; else why not."""
    for reach in capability.reaches:
        try:
            obj = resolve(reach.path)
        except LookupError as exc:
            return str(exc)
        if reach.known:
            seen = fingerprint(obj)
            if seen is None:
                return f"{reach.path} has no source to check"
            if seen not in reach.known:
                return f"{reach.path} changed (fingerprint {seen}, not a release checked)"
    return None


def record(capability: Capability, reason: str | None) -> Verdict:
    """Keep the verdict on one piece; log one line if it is switched off."""
    verdict = Verdict(capability.name, capability.what, reason is None, reason or "")
    with _lock:
        before = _verdicts.get(capability.name)
        _verdicts[capability.name] = verdict
    if reason is not None and before != verdict:
        log.warning("moto %s: %s switched off: %s", versions().get("moto", "?"),
                    capability.name, reason)
    return verdict


def forget(prefix: str = "") -> None:
    """Drop the verdicts whose name starts with `prefix` (all by default)."""
    with _lock:
        for name in [n for n in _verdicts if n.startswith(prefix)]:
            del _verdicts[name]


def report() -> list[Verdict]:
    """Every verdict of this process, by name."""
    with _lock:
        return [_verdicts[name] for name in sorted(_verdicts)]


def facts() -> str:
    """One line on the emulator as this process runs it, for a bug report: moto's version,
    how many speed-ups are on, whether this process's calls skip the socket, and which
    pieces are off. Read once the clients are attached (`report()`)."""
    verdicts = report()
    speedups = [v for v in verdicts if v.name.startswith("speedup:")]
    inprocess = next((v for v in verdicts if v.name == "in-process"), None)
    # Which pieces are off (each speed-up by name, unless none is on).
    listed = [v for v in verdicts if not v.name.startswith("speedup:")]
    if any(v.active for v in speedups):
        listed += speedups
    off = [v.name.removeprefix("speedup:") for v in listed if not v.active]
    out = [f"moto {versions().get('moto', '?')}"]
    if speedups:
        out.append(f"speed-ups {sum(v.active for v in speedups)}/{len(speedups)} on")
    if inprocess is not None:
        out.append("in-process calls" if inprocess.active else "calls over HTTP")
    if off:
        out.append(f"off: {', '.join(off)} (`orchestrator doctor` says why)")
    return " · ".join(out)


def versions() -> dict[str, str]:
    """The versions a bug report needs: Python and the emulator's dependencies."""
    out = {"python": platform.python_version()}
    for dist in ("orchestrator", "moto", "boto3", "botocore", "werkzeug"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
