"""`${VAR}` / `${VAR:-default}` substitution in a raw manifest, from the environment the
loader was given. The loader applies it to `backends:` string values and to
`webhooks.*.verify.secrets` entries, nowhere else, so `${{ expr }}` templates in
workflows are never touched."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestrator.manifest.problems import Findings
from orchestrator.manifest.yamlsafe import YamlPath

__all__ = ["Variables"]

_VAR_REF = re.compile(r"\$\$\{|\$\{(?P<body>[^}]*)(?P<close>\}?)")
_VAR_BODY = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


class Variables:
    """Expands variable references in raw manifest values, reporting each bad one."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def substitute_secrets(self, raw: Any, at: YamlPath, found: Findings) -> Any:
        """`substitute` on each `verify.secrets` entry of a raw webhook. An entry that
        becomes empty is dropped, so `${OLD_SECRET:-}` makes a rotation secret optional;
        an entry whose substitution failed stays as written, so it is reported once."""
        if not isinstance(raw, dict) or not isinstance(raw.get("verify"), dict):
            return raw
        verify: dict[str, Any] = raw["verify"]
        secrets = verify.get("secrets")
        if not isinstance(secrets, list):
            return raw
        expanded = []
        for index, secret in enumerate(secrets):
            before = len(found.items)
            value = self.substitute(secret, (*at, "verify", "secrets", index), found)
            if len(found.items) > before:
                expanded.append(secret)
            elif value != "" or secret == "":
                expanded.append(value)
        return {**raw, "verify": {**verify, "secrets": expanded}}

    def substitute(self, raw: Any, at: YamlPath, found: Findings) -> Any:
        """Expand `${VAR}` / `${VAR:-default}` in string values; `$${` is a literal `${`."""
        if isinstance(raw, dict):
            return {key: self.substitute(value, (*at, key), found) for key, value in raw.items()}
        if isinstance(raw, list):
            return [self.substitute(value, (*at, i), found) for i, value in enumerate(raw)]
        if not isinstance(raw, str):
            return raw

        def expand(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            if match.group("body").startswith("{"):
                found.add(
                    at,
                    "'${{ ... }}' expressions are not evaluated here: only ${NAME} and "
                    "${NAME:-default} are substituted ($${ for a literal ${)",
                )
                return match.group(0)
            body = _VAR_BODY.fullmatch(match.group("body"))
            if not match.group("close") or body is None:
                found.add(
                    at,
                    f"malformed variable reference {match.group(0)!r} (write "
                    "${NAME} or ${NAME:-default}; $${ for a literal ${)",
                )
                return match.group(0)
            value = self.environ.get(body.group("name"))
            if value:
                return value
            if body.group("default") is not None:
                return body.group("default")
            if value is None:
                found.add(
                    at,
                    f"environment variable {body.group('name')} is not set (set it, "
                    f"or give a default: ${{{body.group('name')}:-value}})",
                )
            return ""

        return _VAR_REF.sub(expand, raw)
