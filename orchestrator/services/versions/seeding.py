"""The versions a stack registers when it starts: those its manifest declares
(`versions:`, `current:`), and for a backend of durable workflows that declares none,
its code as it is now, labelled by a hash of what it publishes. A version to become
current where another one is goes through a promotion: every open run checked first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.published import published
from orchestrator.errors import OrchestratorError, StoreError
from orchestrator.services.versions.moves import Moves
from orchestrator.services.versions.registry import Versions, digest_label

__all__ = ["register_at_start"]


def register_at_start(versions: Versions, moves: Callable[[], Moves], manifest: Any
                      ) -> list[str]:
    """Register the manifest's versions; one line for a person per backend. An endpoint
    that cannot keep them (no transactions: dynalite) registers none, and says so: its
    durable runs then record no version, as before versions existed."""
    try:
        return _register(versions, moves, manifest)
    except StoreError as exc:
        return [f"none registered ({exc.message}): durable runs record no version"]


def _register(versions: Versions, moves: Callable[[], Moves], manifest: Any) -> list[str]:
    lines: list[str] = []
    promote = versions.seed(manifest.backends)
    durable = {wf.backend for wf in manifest.workflows.values()
               if getattr(wf, "backend", None) is not None}
    for name in sorted(durable):
        backend = manifest.backends.get(name)
        if backend is None or backend.versions:
            continue
        try:
            label = digest_label(published(backend.url))
        except OrchestratorError as exc:
            lines.append(f"{name}: no version ({exc.message}): its runs record none")
            continue
        versions.register(name, label, backend.url, label)
        current = versions.registry(name).current
        if current is None:
            versions.make_current(name, label)
        elif current != label:
            promote[name] = label
    for name, label in sorted(promote.items()):
        report = moves().promote(name, label)
        if not report["promoted"]:
            lines.append(f"{name}: {label} NOT current: {len(report['diverging'])} open runs"
                         f" diverge from it (orchestrator runs check --version {label})")
    for name in sorted(set(manifest.backends)):
        registry = versions.registry(name)
        if registry.live:
            lines.append(f"{name}: {registry.current} current"
                         f" ({len(registry.live)} live: {', '.join(sorted(registry.live))})")
    return lines
