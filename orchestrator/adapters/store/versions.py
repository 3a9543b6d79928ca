"""The versions of each backend's code, in the control table: one partition a backend
(`versions#<backend>`), its head item (`-`: `current`, the version new runs start on)
and one item per live version (`v#<label>`: its URL, the digest of what it published,
when it was registered, and `retiring` while a retire counts the runs pinned to it).

A label names one URL for good: registering it again with another URL is refused. The
head moves only to a live version that is not being retired, and a version is deleted
only while it is not current and its retire's mark still holds (one transaction each),
so no run can start on a version being retired once its retire has marked it.

A run that started on a version just before its retire marked it may still be written
after the retire counted the runs pinned to it. So a worker reads its run's version
each time it claims the run (`get`), and calls a version being retired only once it
has noted the use on the version's item (`use`); the retire deletes the version only
if no use was noted since its mark: the retire is refused, or the worker finds the
version gone and calls nothing. A run is moved only onto a live version that is not
being retired (`move_run`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import NO_SK, sk_of, version_sk, versions_key
from orchestrator.adapters.store.tables import history_clause, step_key
from orchestrator.errors import ConditionFailed

__all__ = ["Registry", "Version", "VersionRows"]

_PREFIX = "v#"


@dataclass(frozen=True)
class Version:
    label: str
    url: str
    digest: str | None
    registered_at: float
    retiring: float | None = None

    def doc(self) -> dict[str, Any]:
        return {"version": self.label, "url": self.url, "digest": self.digest,
                "registered_at": self.registered_at, "retiring": self.retiring is not None}


@dataclass(frozen=True)
class Registry:
    """A backend's versions as read: the current one's label (None: none yet) and every
    live version by label."""

    backend: str
    current: str | None
    live: dict[str, Version]

    @property
    def current_version(self) -> Version | None:
        return None if self.current is None else self.live.get(self.current)


def _version(item: dict[str, Any]) -> Version:
    retiring = item.get("retiring", {}).get("N")
    return Version(label=str(sk_of(item))[len(_PREFIX):], url=item["url"]["S"],
                   digest=item.get("digest", {}).get("S"),
                   registered_at=float(item.get("at", {}).get("N", "0")),
                   retiring=None if retiring is None else float(retiring))


class VersionRows:
    def __init__(self, control: Control, runs_table: str, steps_table: str) -> None:
        self.control = control
        self.ddb = control.ddb
        self.table = control.table
        self.runs = runs_table
        self.steps = steps_table

    def _key(self, backend: str, label: str | None = None) -> dict[str, Any]:
        return self.control.key(versions_key(backend),
                                NO_SK if label is None else version_sk(label))

    def read(self, backend: str) -> Registry:
        """The backend's head and live versions: one strongly consistent Query."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table, "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": versions_key(backend)}}}
        while True:
            with _translate(f"versions of {backend}: read"):
                resp = self.ddb.query(**kwargs)
            items.extend(resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        current = None
        live: dict[str, Version] = {}
        for item in items:
            if sk_of(item) == NO_SK:
                current = item.get("current", {}).get("S")
            elif str(sk_of(item)).startswith(_PREFIX):
                version = _version(item)
                live[version.label] = version
        return Registry(backend, current, live)

    def get(self, backend: str, label: str) -> Version | None:
        """One version as it is now (strongly consistent), None if it is not live."""
        with _translate(f"version {backend}/{label}: read"):
            item = self.ddb.get_item(TableName=self.table, Key=self._key(backend, label),
                                     ConsistentRead=True).get("Item")
        return None if item is None else _version(item)

    def use(self, backend: str, label: str, now: float) -> bool:
        """Note that a run is about to call `label`, which is being retired: its retire
        then cannot delete it. False if it was deleted already (nothing to call)."""
        try:
            with _translate(f"version {backend}/{label}: use"):
                self.ddb.update_item(
                    TableName=self.table, Key=self._key(backend, label),
                    UpdateExpression="SET used = :now", ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":now": num(now)})
        except ConditionFailed:
            return False
        return True

    def register(self, backend: str, label: str, url: str, digest: str | None,
                 now: float) -> bool:
        """Make `label` a live version at `url`. True if this call registered it, False
        if it was already (same URL); ConditionFailed if the label names another URL."""
        item = {**self._key(backend, label), "url": {"S": url}, "at": num(now)}
        if digest:
            item["digest"] = {"S": digest}
        try:
            with _translate(f"version {backend}/{label}: register"):
                self.ddb.put_item(TableName=self.table, Item=item,
                                  ConditionExpression="attribute_not_exists(pk)")
            return True
        except ConditionFailed:
            with _translate(f"version {backend}/{label}: read"):
                old = self.ddb.get_item(TableName=self.table, Key=self._key(backend, label),
                                        ConsistentRead=True).get("Item")
            if old is not None and old["url"]["S"] == url:
                return False
            raise

    def make_current(self, backend: str, label: str, now: float,
                     expected: str | None = None) -> None:
        """Move the head to `label`, a live version not being retired (and from
        `expected`, if given). ConditionFailed otherwise."""
        head: dict[str, Any] = {
            "TableName": self.table, "Key": self._key(backend),
            "UpdateExpression": "SET #c = :v, #a = :now",
            "ExpressionAttributeNames": {"#c": "current", "#a": "at"},
            "ExpressionAttributeValues": {":v": {"S": label}, ":now": num(now)}}
        if expected is not None:
            head["ConditionExpression"] = "#c = :was"
            head["ExpressionAttributeValues"][":was"] = {"S": expected}
        with _translate(f"version {backend}/{label}: make current"):
            self.ddb.transact_write_items(TransactItems=[
                {"ConditionCheck": {
                    "TableName": self.table, "Key": self._key(backend, label),
                    "ConditionExpression": "attribute_exists(pk) AND"
                                           " attribute_not_exists(retiring)"}},
                {"Update": head}])

    def mark_retiring(self, backend: str, label: str, now: float) -> None:
        """Mark `label` as being retired: from now on it cannot become current, so no
        run starts on it. ConditionFailed if it is current, not live, or marked."""
        with _translate(f"version {backend}/{label}: mark retiring"):
            self.ddb.transact_write_items(TransactItems=[
                {"ConditionCheck": {
                    "TableName": self.table, "Key": self._key(backend),
                    "ConditionExpression": "attribute_not_exists(#c) OR #c <> :v",
                    "ExpressionAttributeNames": {"#c": "current"},
                    "ExpressionAttributeValues": {":v": {"S": label}}}},
                {"Update": {
                    "TableName": self.table, "Key": self._key(backend, label),
                    "UpdateExpression": "SET retiring = :t REMOVE used",
                    "ConditionExpression": "attribute_exists(pk) AND"
                                           " attribute_not_exists(retiring)",
                    "ExpressionAttributeValues": {":t": num(now)}}}])

    def unmark_retiring(self, backend: str, label: str, mark: float) -> None:
        """Take back a retire's mark (runs were found pinned to the version)."""
        try:
            with _translate(f"version {backend}/{label}: keep"):
                self.ddb.update_item(
                    TableName=self.table, Key=self._key(backend, label),
                    UpdateExpression="REMOVE retiring, used",
                    ConditionExpression="retiring = :t",
                    ExpressionAttributeValues={":t": num(mark)})
        except ConditionFailed:
            pass  # taken back already

    def remove(self, backend: str, label: str, mark: float) -> None:
        """Delete the version its retire marked (`mark`), still not current and used by
        no run since the mark. ConditionFailed otherwise."""
        with _translate(f"version {backend}/{label}: retire"):
            self.ddb.transact_write_items(TransactItems=[
                {"ConditionCheck": {
                    "TableName": self.table, "Key": self._key(backend),
                    "ConditionExpression": "attribute_not_exists(#c) OR #c <> :v",
                    "ExpressionAttributeNames": {"#c": "current"},
                    "ExpressionAttributeValues": {":v": {"S": label}}}},
                {"Delete": {
                    "TableName": self.table, "Key": self._key(backend, label),
                    "ConditionExpression": "retiring = :t AND attribute_not_exists(used)",
                    "ExpressionAttributeValues": {":t": num(mark)}}}])

    def move_run(self, run_id: str, driver: str, backend: str, frm: str | None, to: str,
                 claimed_at: float | None, now: float) -> None:
        """Move an open run from version `frm` to `to` of `backend`, in one transaction
        guarded by its driver row as the check found it: not held, and not claimed
        since (`claimed_at`: its last claim then, None if never), so the journal checked
        is the journal the new version replays; and by `to`: live and not being retired
        (a retire that counted its runs already would miss this one). ConditionFailed
        otherwise (or if the run ended, or another move came first)."""
        values: dict[str, Any] = {":to": {"S": to}, ":now": num(now),
                                  ":r": {"S": "running"}, ":q": {"S": "queued"}}
        names = {"#s": "status", "#h": "history", "#v": "version"}
        hist = history_clause(values, now, "run.migrated", **{"from": frm, "to": to})
        if frm is None:
            was = "attribute_not_exists(#v)"
        else:
            was = "#v = :from"
            values[":from"] = {"S": frm}
        guard: dict[str, Any] = {"TableName": self.steps, "Key": step_key(run_id, driver)}
        if claimed_at is None:
            guard["ConditionExpression"] = "attribute_not_exists(attempt_started)"
        else:
            guard["ConditionExpression"] = ("attribute_not_exists(lease_owner)"
                                            " AND attempt_started = :t")
            guard["ExpressionAttributeValues"] = {":t": num(claimed_at)}
        with _translate(f"run {run_id}: move to version {to}"):
            self.ddb.transact_write_items(TransactItems=[
                {"ConditionCheck": guard},
                {"ConditionCheck": {
                    "TableName": self.table, "Key": self._key(backend, to),
                    "ConditionExpression": "attribute_exists(pk) AND"
                                           " attribute_not_exists(retiring)"}},
                {"Update": {
                    "TableName": self.runs, "Key": {"run_id": {"S": run_id}},
                    "UpdateExpression": f"SET #v = :to, updated_at = :now, {hist}",
                    "ConditionExpression": f"#s IN (:r, :q) AND {was}",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values}}])
