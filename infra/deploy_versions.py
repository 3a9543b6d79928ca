"""A deploy's new functions code as a version of its backends (README "Deploying new
code"): after the change set has updated the stack's functions Lambda (FunctionsFunction),
`release` publishes it as a version with an alias and a Function URL of its own
(infra/function_versions.py), registers that URL in the stack's registry (the control
table) for each backend the functions app serves, checks every open durable run against
it, and makes it current only if all are compatible (they move to it), as
`orchestrator versions promote` does.

- Which backends: those of the manifest, loaded with the deployed Lambda functions'
  environment, whose `url` is the functions app's (`${FUNCTIONS_URL}`, perhaps with a
  path after it) and that a durable workflow names, less those that declare `versions:`
  (their URLs are theirs). Registry rows are keyed by these names, as every run's pin is.
- Code unchanged since a version: Lambda publishes none and that version's alias is the
  label (promoted now if an earlier deploy could not). Otherwise `--version-label`, or
  `v<N>` with N Lambda's version number.
- A backend's first version becomes current at once (its open runs, if any, started
  unversioned on `$LATEST`: they stay so). Then every open run of every backend is
  checked first; one diverging (or not checked) stops the promotion of all, nothing
  moves, unless `pin_incompatible`: the compatible move, the others stay pinned.
- A version stays published (alias, URL, Lambda version) while it is live in a registry:
  runs may be pinned to it. One retired (`orchestrator versions retire`) loses its alias
  and URL at the next deploy.

Nothing here runs code: the check replays journals at the new URL (services/versions/)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from botocore.exceptions import ClientError

from infra.function_versions import AliasUrl, FunctionVersions, check_label
from orchestrator.adapters.invoker import Invoker
from orchestrator.adapters.store import Store
from orchestrator.errors import Code, Conflict, UsageError
from orchestrator.services.versions import Checker, Moves, Target, Verdict, Versions
from orchestrator.settings import ResourceNames, Settings

__all__ = ["FUNCTIONS_APP", "READY_TIMEOUT", "Served", "planned", "precheck", "release",
           "render", "served_backends", "verdict_line"]

# The functions app's logical id in template.yaml.
FUNCTIONS_APP = "FunctionsFunction"
# FUNCTIONS_URL as the manifest is read here: what marks the backends the app serves.
_APP_URL = "https://functions-app.deploy.invalid"
# A new Function URL answers within seconds on AWS, not at once: the check waits for it
# this long (a run checked against a URL that does not answer yet is not checked).
READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Served:
    """A backend the deployed functions app serves: `path` is what its URL adds to the
    app's (usually nothing); `secret` signs its calls, as the deployed manifest says."""

    backend: str
    path: str
    secret: str | None


def served_backends(manifest: Path, parameters: Mapping[str, str]) -> list[Served]:
    """The manifest's backends at the functions app, read as the deployed functions read
    it (their environment: template.yaml's Globals and FUNCTIONS_URL)."""
    from orchestrator.manifest.loader import load_manifest

    environ = {"ORCH_PREFIX": parameters.get("Prefix", "orch"),
               "ORCH_MANIFEST": "orchestrator.yml", "FUNCTIONS_URL": _APP_URL,
               "SCRIPTS_URL": "https://scripts.deploy.invalid",
               **{name: parameters.get(key, "") for name, key in (
                   ("FUNCTIONS_SECRET", "FunctionsSecret"), ("WEBHOOK_SECRET", "WebhookSecret"),
                   ("SCRIPTS_SECRET", "ScriptsSecret"))}}
    loaded = load_manifest(manifest, environ)
    durable = {str(wf.backend) for wf in loaded.workflows.values()
               if getattr(wf, "backend", None) is not None}
    out = []
    for name in sorted(durable):
        backend = loaded.backends.get(name)
        if backend is None or backend.versions or not backend.url.startswith(_APP_URL):
            continue
        out.append(Served(name, backend.url[len(_APP_URL):].rstrip("/"), backend.secret or None))
    return out


def _function_name(clients: Any, stack: str) -> str | None:
    """The stack's functions app's function name (None: it deploys none, or no stack)."""
    kwargs: dict[str, Any] = {"StackName": stack}
    while True:
        try:
            page = clients.cloudformation.list_stack_resources(**kwargs)
        except ClientError:
            return None  # no such stack
        for resource in page.get("StackResourceSummaries", []):
            if resource.get("LogicalResourceId") == FUNCTIONS_APP:
                name = resource.get("PhysicalResourceId")
                return str(name) if name else None
        if not page.get("NextToken"):
            return None
        kwargs["NextToken"] = page["NextToken"]


def _tables_exist(clients: Any, names: ResourceNames) -> bool:
    try:
        clients.dynamodb.describe_table(TableName=names.control_table)
    except ClientError:
        return False
    return True


def planned(manifest: Path, parameters: Mapping[str, str], label: str | None) -> str:
    """What a deploy will do about versions, for the dry run's plan."""
    if parameters.get("FunctionsApp") == "":
        return "versions: none (FunctionsApp is empty: no functions app deployed)"
    served = served_backends(manifest, parameters)
    if not served:
        return ("versions: none (no durable workflow's backend is the functions app,"
                " url: ${FUNCTIONS_URL})")
    return (f"versions: the functions code, if changed, published as version"
            f" {label or 'v<N>'} of {', '.join(s.backend for s in served)} (a Lambda"
            " version, an alias and its Function URL), made current if every open durable"
            " run replays on it")


def precheck(clients: Any, stack: str, manifest: Path, parameters: Mapping[str, str],
             label: str | None) -> None:
    """Before anything is deployed: UsageError for a label that cannot name a version,
    Conflict for one a live version or an alias has already."""
    if label is None:
        return
    check_label(label)
    function = _function_name(clients, stack)
    if function is not None and any(a.label == label for a in
                                    FunctionVersions(clients.lambda_, function).aliases()):
        raise Conflict(Code.VERSION_TAKEN, f"--version-label {label!r}: the functions app"
                       f" {function} has an alias {label!r} already: give another label")
    names = ResourceNames(stack)
    if not _tables_exist(clients, names):
        return  # a new stack: no version yet
    versions = Versions(Store(clients.dynamodb, names), time.time)
    for served in served_backends(manifest, parameters):
        if label in versions.registry(served.backend).live:
            raise Conflict(Code.VERSION_TAKEN, f"--version-label {label!r}: {served.backend}"
                           f" has a live version {label!r} already: give another label")


def release(clients: Any, stack: str, manifest: Path, parameters: Mapping[str, str], *,
            label: str | None = None, pin_incompatible: bool = False,
            transport: Any = None, clock: Callable[[], float] = time.time,
            threads: int = 16) -> dict[str, Any]:
    """Publish the functions app's code as a version and make it current where every
    open run allows (see the module's docstring). The report: `ok` False when a
    promotion was refused. `transport`: the check's HTTP transport (a test's)."""
    function = _function_name(clients, stack)
    if function is None:
        return {"ok": True, "skipped": "the stack deploys no functions app (FunctionsApp"
                " is empty)"}
    served = served_backends(manifest, parameters)
    if not served:
        return {"ok": True, "function": function, "skipped": "no durable workflow's backend"
                " is the functions app (url: ${FUNCTIONS_URL})"}
    lam = FunctionVersions(clients.lambda_, function)
    store = Store(clients.dynamodb, ResourceNames(stack))
    versions = Versions(store, clock)
    code_sha = lam.code_sha()
    number = lam.publish(code_sha)
    notes: list[str] = []
    named = next((a for a in lam.aliases() if a.version == number and a.ours), None)
    if named is not None:
        if label is not None and label != named.label:
            notes.append(f"the functions code is unchanged since version {named.label}:"
                         f" --version-label {label} is not used")
        label = named.label
    else:
        label = label or f"v{number}"
        check_label(label)
        for s in served:
            if label in versions.registry(s.backend).live:
                raise Conflict(Code.VERSION_TAKEN, f"{s.backend} has a live version {label!r}"
                               " already: deploy again with --version-label")
        lam.alias(label, number)
    base = _url(versions, served, label, lam)
    if not base.own:
        notes.append(f"this endpoint keeps no Function URL per alias (its Lambda answered"
                     f" the function's): {label} is registered at the URL it answered")
    for s in served:
        versions.register(s.backend, label, base.url + s.path, code_sha)
    invoker = Invoker(max_body=Settings().output_hard_cap, clock=clock, transport=transport)
    try:
        backends = _promote(store, versions, invoker, served, label, pin_incompatible,
                            clock, threads)
    finally:
        invoker.close()
    removed = _remove_retired(lam, versions, served, label, notes)
    return {"ok": all(b["promoted"] for b in backends), "function": function,
            "version": label, "lambda_version": number, "url": base.url,
            "new": named is None, "backends": backends, "removed": removed, "notes": notes}


def _url(versions: Versions, served: list[Served], label: str,
         lam: FunctionVersions) -> AliasUrl:
    """The alias's URL: the one registered already (a deploy run again), else made."""
    first = served[0]
    known = versions.url_of(first.backend, label)
    if known is not None:
        return AliasUrl(known[:len(known) - len(first.path)] if first.path else known, True)
    return lam.url(label)


def _promote(store: Store, versions: Versions, invoker: Invoker, served: list[Served],
             label: str, pin: bool, clock: Callable[[], float],
             threads: int) -> list[dict[str, Any]]:
    def no_cancel(run_id: str, why: str) -> None:
        raise UsageError("a deploy cancels no run")

    moves = Moves(store, versions, Checker(store, invoker, clock, threads=threads), clock,
                  secrets={s.backend: s.secret for s in served}, cancel=no_cancel)
    out: list[dict[str, Any]] = []
    checked: dict[str, list[Verdict]] = {}
    for s in served:
        current = versions.registry(s.backend).current
        if current is None:  # the backend's first version
            versions.make_current(s.backend, label)
        if current is None or current == label:
            out.append({"backend": s.backend, "version": label, "was": current,
                        "current": label, "promoted": True, "checked": 0, "moved": [],
                        "pinned": [], "diverging": [], "unchecked": []})
            continue
        url = versions.url_of(s.backend, label)
        assert url is not None  # registered just now
        if not checked:
            _wait_served(invoker.client, url, READY_TIMEOUT)
        checked[s.backend] = moves.check(s.backend, Target(url, s.secret, label))
    refused = not pin and any(not v.compatible for vs in checked.values() for v in vs)
    for backend, verdicts in checked.items():
        if refused:
            bad = [v for v in verdicts if not v.compatible]
            was = versions.registry(backend).current
            out.append({"backend": backend, "version": label, "was": was, "current": was,
                        "promoted": False, "checked": len(verdicts),
                        "compatible": len(verdicts) - len(bad),
                        "diverging": [v.doc() for v in bad if v.status == "diverging"],
                        "unchecked": [v.doc() for v in bad if v.status == "unchecked"]})
        else:
            out.append(moves.promote(backend, label, pin_incompatible=pin,
                                     verdicts=verdicts))
    return out


def _wait_served(client: httpx.Client, url: str, timeout: float) -> None:
    """Until a functions app answers at `url` (its OpenAPI document), or `timeout`."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        try:
            if client.get(url.rstrip("/") + "/openapi.json", timeout=10.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() + delay > deadline:
            return  # the check reports the runs it could not check
        time.sleep(delay)  # a new URL's DNS and permissions are being set up
        delay = min(delay * 2, 5.0)


def _remove_retired(lam: FunctionVersions, versions: Versions, served: list[Served],
                    label: str, notes: list[str]) -> list[str]:
    """Remove the aliases (and URLs) a deploy made whose version no served backend has
    live any more (retired); keep a Lambda version another alias still names."""
    live = {label}
    for s in served:
        live |= set(versions.registry(s.backend).live)
    aliases = lam.aliases()
    removed = []
    for alias in aliases:
        if not alias.ours or alias.label in live:
            continue
        others = any(a.version == alias.version and a.label != alias.label for a in aliases)
        notes.extend(lam.remove(alias, keep_version=others))
        removed.append(alias.label)
    return removed


def render(report: dict[str, Any]) -> list[str]:
    """The report for a person: one line per backend, one per run that blocked it."""
    if "skipped" in report:
        return [f"versions: none published: {report['skipped']}"]
    lines = [f"functions {report['function']}: version {report['version']} (Lambda version"
             f" {report['lambda_version']}{', new' if report['new'] else ', code unchanged'})"
             f" at {report['url']}"]
    for b in report["backends"]:
        if b["promoted"]:
            moved = (f"; moved {len(b['moved'])} runs" if b["checked"] else "")
            pinned = (f", {len(b['pinned'])} stay pinned to their version"
                      if b.get("pinned") else "")
            lines.append(f"{b['backend']}: {b['current']} is current (was {b['was'] or '-'})"
                         f"{moved}{pinned}")
            continue
        lines.append(f"{b['backend']}: {b['version']} NOT current ({b['was']} stays):"
                     f" {len(b['diverging']) + len(b['unchecked'])} of {b['checked']} open"
                     " runs do not replay on it (--pin-incompatible to promote anyway)")
        for v in b["diverging"] + b["unchecked"]:
            lines.append("  " + verdict_line(v))
    lines += [f"removed the alias and URL of retired version {x}" for x in report["removed"]]
    return lines + [f"note: {n}" for n in report["notes"]]


def verdict_line(v: dict[str, Any]) -> str:
    """One run that blocks a promotion: where it diverges, with both operations."""
    if v.get("recorded") is not None or v.get("issued") is not None:
        rec, iss = v.get("recorded") or {}, v.get("issued") or {}
        pos = (v.get("position") or {}).get("pos")
        return (f"{v['run_id']} ({v['workflow']}, on {v['version']}) diverging at position"
                f" {pos}: recorded {rec.get('kind')} {rec.get('name')!r}, issued"
                f" {iss.get('kind')} {iss.get('name')!r}")
    return f"{v['run_id']} ({v['workflow']}, on {v['version']}) {v['status']}: {v.get('message')}"
