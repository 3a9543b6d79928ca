"""`orchestrator doctor`, and the facts `orchestrator --version` adds: what a bug report
needs, each checked. Paste the output into the report.

  versions   Python, the orchestrator, moto, boto3, botocore, werkzeug
  emulator   every piece the embedded emulator applies or switches off on this install, from
             a throwaway emulator on a free port (`infra.emulator.self_check`). A speed-up
             switched off, or in-process calls falling back to HTTP, only makes the local
             stack slower: shown with its reason, never a failure
  endpoints  where AWS_ENDPOINT_URL (and _DYNAMODB, _SQS, _S3) point, and whether DynamoDB,
             SQS and S3 answer a listing there. Nothing set and no AWS credentials is a note
             (`orchestrator dev` runs a local emulator); an endpoint set that does not answer
             is a failure. The API at $ORCHESTRATOR_URL, when set, with $ORCHESTRATOR_API_KEY
  manifest   it loads and lints: its workflows, or each problem as file:line
  backends   each function backend's URL answers HTTP (any status counts)

Exit 0 when no check failed, 1 otherwise. `--json` prints the same facts as one object."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import EXIT_OK, EXIT_RUN_FAILED, json_option, manifest_option
from orchestrator.settings import KEY_VARIABLE, URL_VARIABLE, environment

__all__ = ["COMMANDS", "speedups_summary", "version_lines"]

OK, FAIL, OFF, NOTE = "ok", "fail", "off", "note"
MARKS = {OK: ("✔", "ok"), FAIL: ("✖", "FAIL"), OFF: ("○", "off"), NOTE: ("·", "--")}
TIMEOUT = 3.0  # seconds, for each HTTP probe
# The listing each service is asked for: (method, API name, arguments).
LISTINGS = {
    "dynamodb": ("list_tables", "ListTables", {"Limit": 1}),
    "sqs": ("list_queues", "ListQueues", {}),
    "s3": ("list_buckets", "ListBuckets", {}),
}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, FAIL, OFF (a speed-up switched off) or NOTE (a fact, not a check)
    detail: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, **self.facts}


# ---- versions and speed-ups (also `orchestrator --version`) -----------------------------

def versions() -> dict[str, str]:
    from infra.emulator.capabilities import versions as of_install

    return of_install()


def speedups_summary(verdicts: list[Any]) -> str:
    """`12 of 13 on; off: json-request (why)`, from `infra.emulator.capabilities.report()`."""
    speedups = [v for v in verdicts if v.name.startswith("speedup:")]
    if not speedups:
        return "none reported"
    off = [v for v in speedups if not v.active]
    text = f"{len(speedups) - len(off)} of {len(speedups)} on"
    why: dict[str, list[str]] = {}  # reason -> the speed-ups it switched off
    for v in off:
        why.setdefault(v.reason, []).append(v.name.removeprefix("speedup:"))
    if len(off) == len(speedups) and len(why) == 1:
        return f"{text}; off: all ({off[0].reason})"
    if not off:
        return text
    return f"{text}; off: " + ", ".join(f"{', '.join(names)} ({reason})"
                                        for reason, names in why.items())


def _quiet() -> None:
    """The emulator logs each piece it switches off: here the output says it already."""
    logging.getLogger("orchestrator.emulator").setLevel(logging.ERROR)


def version_lines() -> list[str]:
    """The lines `--version` prints after click's own: the versions, one a line, and the
    speed-ups as they would apply on this install (applied here, no server started)."""
    _quiet()
    found = versions()
    lines = [f"{name}: {found[name]}" for name in ("python", "moto", "boto3", "botocore",
                                                   "werkzeug") if name in found]
    try:
        from infra.emulator import capabilities, speedups

        speedups.install()
        summary = speedups_summary(capabilities.report())
    except Exception as exc:  # a broken moto install is itself what the report needs
        summary = f"unknown ({type(exc).__name__}: {exc})"
    return [*lines, f"speed-ups: {summary}"]


# ---- the checks -----------------------------------------------------------------------

def emulator_checks() -> list[Check]:
    try:
        from infra.emulator import self_check

        verdicts = self_check()
    except Exception as exc:
        return [Check("start", FAIL, f"the embedded emulator failed: {type(exc).__name__}: {exc}")]
    if not verdicts:
        return [Check("capabilities", NOTE, "none reported by this install")]
    return [Check(v.name, OK if v.active else OFF,
                  v.what if v.active else f"{v.what}; off: {v.reason}",
                  {"what": v.what, "active": v.active, "reason": v.reason})
            for v in verdicts]


def _get(url: str, headers: Mapping[str, str] | None = None,
         params: Mapping[str, Any] | None = None) -> tuple[int | None, str]:
    """(HTTP status, "") of a GET, or (None, why there was no answer)."""
    import httpx

    try:
        answer = httpx.get(url, headers=headers, params=params, timeout=TIMEOUT)
    except httpx.TimeoutException:
        return None, f"no answer within {TIMEOUT:g}s"
    except httpx.HTTPError as exc:
        return None, str(exc) or type(exc).__name__
    return answer.status_code, ""


def _has_aws_credentials() -> bool:
    import boto3

    try:
        return boto3.session.Session().get_credentials() is not None
    except Exception:  # a broken profile: as good as none, for this note
        return False


def _listing(service: str, client: Any, where: str, url: str | None) -> Check:
    from botocore.exceptions import BotoCoreError, ClientError

    method, api, kwargs = LISTINGS[service]
    try:
        getattr(client, method)(**kwargs)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "?")
        return Check(service, FAIL, f"{where} refused {api}: {code}", {"url": url})
    except BotoCoreError as exc:
        return Check(service, FAIL, f"{where} does not answer {api}: {exc}", {"url": url})
    return Check(service, OK, f"{where} answers {api}", {"url": url})


def endpoint_checks(env: Mapping[str, str]) -> list[Check]:
    from orchestrator.adapters.aws import make_clients
    from orchestrator.settings import SERVICE_ENDPOINT_VARIABLES, Settings

    try:
        settings = Settings.from_env(env)
    except ValueError as exc:
        return [Check("settings", FAIL, str(exc))]
    checks: list[Check] = []
    clients: Any = None
    credentials: bool | None = None
    for service in LISTINGS:
        url = settings.endpoint_for(service)
        where = url or f"AWS ({settings.region})"
        if url is None:
            credentials = _has_aws_credentials() if credentials is None else credentials
            if not credentials and not settings.has_endpoint:
                checks.append(Check(service, NOTE, "not configured: `orchestrator dev` runs a"
                                    " local one", {"url": None}))
                continue
            if not credentials:
                checks.append(Check(service, FAIL, f"no endpoint set"
                                    f" ({SERVICE_ENDPOINT_VARIABLES[service]}) and no AWS"
                                    " credentials", {"url": None}))
                continue
        else:
            status, why = _get(url)
            if status is None:
                checks.append(Check(service, FAIL, f"{url} does not answer: {why}",
                                    {"url": url}))
                continue
        clients = clients or make_clients(settings)
        checks.append(_listing(service, getattr(clients, service), where, url))
    return [*checks, api_check(env)]


def api_check(env: Mapping[str, str]) -> Check:
    url = (env.get(URL_VARIABLE) or "").rstrip("/")
    if not url:
        return Check("api", NOTE, f"{URL_VARIABLE} not set: not checked", {"url": None})
    facts = {"url": url}
    status, why = _get(url + "/healthz")
    if status != 200:
        said = why or f"HTTP {status} from /healthz"
        return Check("api", FAIL, f"{url} does not answer: {said}", facts)
    key = env.get(KEY_VARIABLE) or None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, why = _get(url + "/runs", headers, {"limit": 1})
    if status == 401:
        whose = (f"the key in {KEY_VARIABLE}" if key
                 else f"calls without a key: set {KEY_VARIABLE}")
        return Check("api", FAIL, f"{url} answers, but refuses {whose}", facts)
    if status != 200:
        return Check("api", FAIL, f"{url} answers, but GET /runs: {why or f'HTTP {status}'}",
                     facts)
    return Check("api", OK, f"{url} answers" + (", key accepted" if key else ""), facts)


def manifest_checks(path: str, env: Mapping[str, str]) -> tuple[list[Check], Any]:
    """The checks, and the manifest (None if it did not load)."""
    from orchestrator.errors import ManifestError
    from orchestrator.manifest.loader import lint_manifest

    if not Path(path).is_file():
        return [Check(path, FAIL, "manifest not found (use --manifest PATH)")], None
    try:
        report = lint_manifest(path, env)
    except ManifestError as exc:
        return [_problem(path, problem) for problem in exc.problems], None
    names = list(report.manifest.workflows)
    n = len(names)
    checks = [Check(path, OK, f"{n} workflow{'s' if n != 1 else ''}: {', '.join(names)}",
                    {"workflows": names})]
    checks += [Check(path, NOTE, f"warning: {w}") for w in report.warnings]
    return checks, report.manifest


def _problem(path: str, problem: str) -> Check:
    """`file:line: field: message` as a check named `file:line`."""
    where = re.match(r"(.*?:\d+): (.*)", problem, re.S)
    if where is None:
        return Check(path, FAIL, problem, {"problem": problem})
    return Check(where.group(1), FAIL, where.group(2), {"problem": problem})


def backend_checks(manifest: Any) -> list[Check]:
    if manifest is None:
        return [Check("backends", NOTE, "not checked: the manifest did not load")]
    answers: dict[str, tuple[int | None, str]] = {}
    checks = []
    for name, backend in manifest.backends.items():
        url = backend.url
        if url not in answers:
            answers[url] = _get(url)
        status, why = answers[url]
        details: dict[str, Any] = {"url": url}
        limits = backend.limits.model_dump(exclude_none=True) if backend.limits else {}
        # Its limits (Flow control), said where the backend is.
        shown = f"; limits {_limits_text(limits)}" if limits else ""
        if limits:
            details["limits"] = limits
        if status is None:
            checks.append(Check(name, FAIL, f"{url} unreachable: {why}{shown}", details))
        else:
            checks.append(Check(name, OK, f"{url} answers (HTTP {status}){shown}", details))
    return checks


def _limits_text(limits: Mapping[str, Any]) -> str:
    """`4 in flight, 10/1s`."""
    parts = []
    if "concurrency" in limits:
        parts.append(f"{limits['concurrency']} in flight")
    if "rate" in limits:
        parts.append(str(limits["rate"]))
    return ", ".join(parts)


# ---- the command ----------------------------------------------------------------------

def diagnose(manifest_path: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Every section's checks, by section."""
    manifest_part, manifest = manifest_checks(manifest_path, env)
    return {
        "emulator": emulator_checks(),
        "endpoints": endpoint_checks(env),
        "manifest": manifest_part,
        "backends": backend_checks(manifest),
    }


def render(found: dict[str, str], sections: dict[str, list[Check]], ascii_only: bool) -> str:
    lines = ["versions", "  " + ", ".join(f"{k} {v}" for k, v in found.items())]
    for title, checks in sections.items():
        speedups = [c for c in checks if c.name.startswith("speedup:")]
        if title == "emulator" and speedups:
            on = sum(c.status == OK for c in speedups)
            title += (f"   (a throwaway one on a free port): speed-ups {on} of"
                      f" {len(speedups)} on")
        lines.append(title)
        width = max(len(c.name) for c in checks)
        for c in checks:
            mark = MARKS[c.status][1 if ascii_only else 0]
            lines.append(f"  {mark:<{4 if ascii_only else 1}} {c.name:<{width}}  {c.detail}")
    failed = [f"{title} {c.name}" for title, checks in sections.items()
              for c in checks if c.status == FAIL]
    lines.append(f"doctor: {len(failed)} failed: {'; '.join(failed)}" if failed
                 else "doctor: no check failed")
    return "\n".join(lines)


@click.command()
@manifest_option
@json_option
@click.option("--ascii", "ascii_only", is_flag=True, default=None,
              help="Plain ASCII marks (the default when stdout is not a terminal).")
def doctor(manifest_path: str, as_json: bool, ascii_only: bool | None) -> None:
    """Check this install for a bug report: versions, the emulator's speed-ups, the AWS
    endpoints and the API, the manifest and its function backends. Exits 1 if a check
    failed."""
    _quiet()
    env = environment()
    found = versions()
    sections = diagnose(manifest_path, env)
    failed = any(c.status == FAIL for checks in sections.values() for c in checks)
    if as_json:
        click.echo(json.dumps({
            "ok": not failed, "versions": found,
            **{title: [c.as_json() for c in checks] for title, checks in sections.items()},
        }, indent=2, ensure_ascii=False))
    else:
        plain = not sys.stdout.isatty() if ascii_only is None else ascii_only
        click.echo(render(found, sections, plain))
    sys.exit(EXIT_RUN_FAILED if failed else EXIT_OK)


COMMANDS = [doctor]
