"""1 · What was declared: the manifest YAML (read safely, with line numbers) turned into a
typed `Manifest` (models, fields, workflows, triggers, shell, variables, routes) or a list of
problems, each naming its file, line and field. Pure: no AWS, no HTTP."""

from __future__ import annotations

from orchestrator.manifest.loader import (
    LintReport,
    lint_manifest,
    lint_text,
    load_manifest,
    manifest_from_text,
)

__all__ = ["LintReport", "lint_manifest", "lint_text", "load_manifest", "manifest_from_text"]
