"""The functions app's Lambda versions, as `orchestrator deploy` makes them: the code the
change set left in `$LATEST` published as a numbered version (immutable), an alias that
names it (the version's label), and a Function URL on that alias, public as the stack's
own URL is (every call is signed with FunctionsSecret), so that a run pinned to the label
keeps calling that code while later deploys change `$LATEST`. Every Lambda call of a
deploy is here, each `ClientError` a DeployError naming what was being done.

- An alias a deploy made says so in its description (`MARK`): only those are ever
  removed, with their URL, their permissions and their version (when no other alias
  names it).
- A label is an alias name and a registry label at once: letters, digits, `-` and `_`,
  1 to 64, starting with a letter or digit, not only digits (Lambda reads those as a
  version number).

Capability: an endpoint's Lambda may keep one Function URL per function rather than one
per alias (moto 5.2 ignores the Qualifier of the Function URL calls: it answers the
function's own URL, with the unqualified ARN). Every URL answered is checked against the
alias's ARN: one that is not the alias's own is used as answered (it is all such an
endpoint gives) and `AliasUrl.own` says so; it is never deleted by qualifier, since that
would delete the function's own URL."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from infra.stack import DeployError
from orchestrator.errors import UsageError

__all__ = ["LABEL", "MARK", "Alias", "AliasUrl", "FunctionVersions", "check_label"]

T = TypeVar("T")

MARK = "orchestrator deploy"
LABEL = re.compile(r"^(?![0-9]+$)[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# The two statements a public Function URL needs (as the template's for $LATEST).
_URL_STATEMENTS = (
    ("orchestrator-url", {"Action": "lambda:InvokeFunctionUrl", "FunctionUrlAuthType": "NONE"}),
    ("orchestrator-url-invoke", {"Action": "lambda:InvokeFunction",
                                 "InvokedViaFunctionUrl": True}),
)


def check_label(label: str) -> None:
    """UsageError (naming the label and the rule) unless `label` can name a version."""
    if not LABEL.match(label):
        raise UsageError(
            f"--version-label {label!r}: a version's label is 1 to 64 letters, digits, '-'"
            " and '_', starting with a letter or digit, and not only digits (it names a"
            " Lambda alias)")


@dataclass(frozen=True)
class Alias:
    label: str
    version: str  # the Lambda version number it names
    ours: bool  # made by a deploy (its description is MARK)


@dataclass(frozen=True)
class AliasUrl:
    url: str
    own: bool  # False: the endpoint answered the function's URL, not the alias's own


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class FunctionVersions:
    """The versions, aliases and alias URLs of one Lambda function (`function`, its name)."""

    def __init__(self, lam: Any, function: str) -> None:
        self.lam = lam
        self.function = function

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        try:
            return fn(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DeployError(f"function {self.function}: {what}: {error.get('Code')}:"
                              f" {error.get('Message')}") from exc

    def exists(self) -> bool:
        try:
            self.lam.get_function(FunctionName=self.function)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return False
            raise DeployError(f"function {self.function}: GetFunction: {exc}") from exc
        return True

    def code_sha(self) -> str:
        """The SHA-256 of `$LATEST`'s code package, as Lambda reports it."""
        doc = self._call("GetFunction", self.lam.get_function, FunctionName=self.function)
        return str(doc["Configuration"]["CodeSha256"])

    def publish(self, code_sha: str) -> str:
        """Publish `$LATEST` (whose code must still be `code_sha`): its version number.
        Lambda answers the latest version again when nothing changed since it."""
        doc = self._call("PublishVersion", self.lam.publish_version,
                         FunctionName=self.function, CodeSha256=code_sha,
                         Description=f"{MARK}: code {code_sha[:12]}")
        return str(doc["Version"])

    def aliases(self) -> list[Alias]:
        out: list[Alias] = []
        kwargs: dict[str, Any] = {"FunctionName": self.function}
        while True:
            page = self._call("ListAliases", self.lam.list_aliases, **kwargs)
            out.extend(Alias(a["Name"], str(a["FunctionVersion"]),
                             str(a.get("Description", "")).startswith(MARK))
                       for a in page.get("Aliases", []))
            if not page.get("NextMarker"):
                return out
            kwargs["Marker"] = page["NextMarker"]

    def alias(self, label: str, version: str) -> None:
        """Make alias `label` name `version` (already so: nothing to do)."""
        try:
            self.lam.create_alias(FunctionName=self.function, Name=label,
                                  FunctionVersion=version, Description=MARK)
        except ClientError as exc:
            if _code(exc) not in ("ResourceConflictException", "ConflictException"):
                raise DeployError(f"function {self.function}: CreateAlias {label}: {exc}"
                                  ) from exc
            there = self._call("GetAlias", self.lam.get_alias, FunctionName=self.function,
                               Name=label)
            if str(there["FunctionVersion"]) != version:
                raise DeployError(
                    f"function {self.function}: alias {label!r} names version"
                    f" {there['FunctionVersion']}, not {version}: labels never move") from None

    def url(self, label: str) -> AliasUrl:
        """The Function URL of alias `label`, made public (AuthType NONE) if new."""
        try:
            doc = self.lam.create_function_url_config(
                FunctionName=self.function, Qualifier=label, AuthType="NONE")
        except ClientError as exc:
            if _code(exc) not in ("ResourceConflictException", "ConflictException"):
                raise DeployError(f"function {self.function}: CreateFunctionUrlConfig"
                                  f" {label}: {exc}") from exc
            doc = self._call(f"GetFunctionUrlConfig {label}",
                             self.lam.get_function_url_config, FunctionName=self.function,
                             Qualifier=label)
        alias_arn = str(doc.get("FunctionArn", ""))
        for sid, statement in _URL_STATEMENTS:
            try:
                self.lam.add_permission(FunctionName=self.function, Qualifier=label,
                                        StatementId=sid, Principal="*", **statement)
            except ClientError as exc:
                if _code(exc) != "ResourceConflictException":  # there already
                    raise DeployError(f"function {self.function}: AddPermission {label}:"
                                      f" {exc}") from exc
        return AliasUrl(str(doc["FunctionUrl"]).rstrip("/"),
                        own=alias_arn.endswith(f":{label}"))

    def remove(self, alias: Alias, *, keep_version: bool) -> list[str]:
        """Remove an alias a deploy made: its URL (only the alias's own), the alias, and
        its version unless `keep_version`. What could not be removed, one line each."""
        notes: list[str] = []
        try:
            doc = self.lam.get_function_url_config(FunctionName=self.function,
                                                   Qualifier=alias.label)
        except ClientError as exc:
            if _code(exc) != "ResourceNotFoundException":
                raise DeployError(f"function {self.function}: GetFunctionUrlConfig"
                                  f" {alias.label}: {exc}") from exc
            doc = None
        if doc is not None:
            if str(doc.get("FunctionArn", "")).endswith(f":{alias.label}"):
                self._call(f"DeleteFunctionUrlConfig {alias.label}",
                           self.lam.delete_function_url_config, FunctionName=self.function,
                           Qualifier=alias.label)
            else:
                notes.append(f"{alias.label}: this endpoint keeps no Function URL per alias:"
                             " the function's own URL is left")
        self._call(f"DeleteAlias {alias.label}", self.lam.delete_alias,
                   FunctionName=self.function, Name=alias.label)
        if not keep_version:
            self._call(f"DeleteFunction {alias.version}", self.lam.delete_function,
                       FunctionName=self.function, Qualifier=alias.version)
        return notes
