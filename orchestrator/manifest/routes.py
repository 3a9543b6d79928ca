"""The OpenAPI check of a manifest: every route a step (or forEach) POSTs to on a backend
that declares `openapi:` must be a POST operation in that spec. Specs are read from a
file next to the manifest or over HTTP, at most `MAX_SPEC_BYTES`, once per load."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from functions.sdk.protocol import DURABLE_PREFIX
from orchestrator.errors import ManifestError
from orchestrator.manifest.models import Backend, did_you_mean
from orchestrator.manifest.problems import Findings
from orchestrator.manifest.yamlsafe import YamlPath, load_yaml

__all__ = ["MAX_SPEC_BYTES", "OPENAPI_TIMEOUT", "Call", "SpecRoutes", "read_spec", "route_matches"]

MAX_SPEC_BYTES = 10 * 1024 * 1024
OPENAPI_TIMEOUT = 5.0


@dataclass(frozen=True)
class Call:
    """A route some step (or forEach) POSTs to, as written in the raw manifest."""

    backend: str
    route: str
    path: YamlPath
    label: str


class SpecRoutes:
    """The POST routes of each backend's spec (cached by where the spec is), checked
    against the routes steps call."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.specs: dict[str, set[str] | str] = {}

    def check(
        self, backends: dict[str, Backend], calls: list[Call], found: Findings
    ) -> None:
        """Every route called on a backend with `openapi:` must be a POST in its spec."""
        for name, backend in backends.items():
            if backend.openapi is None:
                continue
            operations = self._spec_routes(backend.openapi)
            if isinstance(operations, str):
                users = ", ".join(call.label for call in calls if call.backend == name)
                needed = f"; it is needed to check steps {users}" if users else ""
                found.add(
                    ("backends", name, "openapi"),
                    f"cannot read OpenAPI spec {backend.openapi!r}: {operations}{needed}",
                )
                continue
            for call in calls:
                if call.backend != name:
                    continue
                if not any(route_matches(call.route, op) for op in operations):
                    route, label = call.route, call.label
                    if route.startswith(DURABLE_PREFIX):
                        served = sorted(op[len(DURABLE_PREFIX):] for op in operations
                                        if op.startswith(DURABLE_PREFIX))
                        found.add(
                            call.path,
                            f"durable workflow {route[len(DURABLE_PREFIX):]!r} is not served "
                            f"by backend {name!r} (its spec {backend.openapi!r} has no POST "
                            f"{route}; it serves {', '.join(served) or 'no durable workflows'})",
                        )
                        continue
                    found.add(
                        call.path,
                        f"step {label} calls POST {route}, which is not a POST "
                        f"operation in backend {name!r}'s spec {backend.openapi!r}"
                        f"{did_you_mean(route, sorted(operations))}",
                    )

    def _spec_routes(self, where: str) -> set[str] | str:
        """POST paths of the spec at `where`, or why it could not be read (cached)."""
        if where not in self.specs:
            self.specs[where] = read_spec(where, self.base_dir)
        return self.specs[where]


def read_spec(where: str, base_dir: Path) -> set[str] | str:
    try:
        if where.startswith(("http://", "https://")):
            response = httpx.get(where, timeout=OPENAPI_TIMEOUT, follow_redirects=True)
            response.raise_for_status()
            if len(response.content) > MAX_SPEC_BYTES:
                return f"spec is larger than {MAX_SPEC_BYTES} bytes"
            text = response.text
        else:
            path = base_dir / where
            if path.stat().st_size > MAX_SPEC_BYTES:
                return f"spec is larger than {MAX_SPEC_BYTES} bytes"
            text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("{"):
            spec = json.loads(text)
        else:
            spec, _ = load_yaml(text, where, max_bytes=MAX_SPEC_BYTES)
    except httpx.HTTPError as err:
        return f"fetching it failed: {err}"
    except OSError as err:
        return err.strerror or str(err)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"not valid JSON: {err}"
    except ManifestError as err:
        return err.message
    paths = spec.get("paths") if isinstance(spec, dict) else None
    if not isinstance(paths, dict):
        return "it has no 'paths' mapping"
    return {route for route, item in paths.items() if isinstance(item, dict) and "post" in item}


def route_matches(route: str, operation: str) -> bool:
    """`/users/42` matches `/users/{id}`; a literal template matches itself."""
    if route == operation:
        return True
    pattern = "".join(
        "[^/]+" if part.startswith("{") else re.escape(part)
        for part in re.split(r"(\{[^}/]*\})", operation)
    )
    return re.fullmatch(pattern, route) is not None
