"""The versions of each backend's code, in the control table: one partition a backend
(`versions#<backend>`), its head item (`-`: `current`, the version new runs start on)
and one item per version (`v#<label>`: its URL, the digest of what it published, when
it was registered; `retiring` while a retire counts the runs pinned to it, `used` the
runs that called it meanwhile; `retired` once retired).

A label names one URL for good: registering it again, with another URL or after its
retire (the item stays as a tombstone), is refused. The head moves only to a live
version that is not being retired, and a version is retired only while it is not
current, its retire's mark still holds, and no run used it since the mark (one
transaction each), so no run starts on a version being retired once its retire has
marked it.

A retire's mark is a lease: one older than RETIRE_LEASE is its retire's, dead (its
process killed between the mark and the end), and counts as no mark.

A run that started on a version just before its retire marked it may still be written
after the retire counted the runs pinned to it. So a worker reads the version afresh
at the run's first call (`get`), and calls a version being retired only once it has
noted the use on the version's item (`use`, with the run's id); the retire retires the
version only if no run still pinned to it used it since its mark: the retire is
refused, or the worker finds the version retired and calls nothing. A run is moved
only onto a live version that is not being retired (`move_run`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.aws import translate_errors as _translate
from orchestrator.adapters.store.codec import num
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import NO_SK, sk_of, version_sk, versions_key
from orchestrator.adapters.store.tables import history_clause, step_key
from orchestrator.errors import ConditionFailed

__all__ = ["RETIRE_LEASE", "Registry", "Version", "VersionRows"]

_PREFIX = "v#"
# How long a retire's mark holds: longer than a retire takes (a check of every open run,
# then the moves), so that one whose process died frees its version in the end.
RETIRE_LEASE = 900.0
# A condition: no retire's mark, or a stale one (`:stale`: now - RETIRE_LEASE).
_NOT_RETIRING = "(attribute_not_exists(retiring) OR retiring < :stale)"
_LIVE = f"attribute_exists(pk) AND attribute_not_exists(retired) AND {_NOT_RETIRING}"


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


def _version(item: dict[str, Any], now: float) -> Version | None:
    """The version an item holds (None: a retired one's tombstone); a stale mark is
    no mark."""
    if "retired" in item:
        return None
    mark = item.get("retiring", {}).get("N")
    retiring = None if mark is None or float(mark) < now - RETIRE_LEASE else float(mark)
    return Version(label=str(sk_of(item))[len(_PREFIX):], url=item["url"]["S"],
                   digest=item.get("digest", {}).get("S"),
                   registered_at=float(item.get("at", {}).get("N", "0")),
                   retiring=retiring)


def _stale(now: float) -> dict[str, Any]:
    return {":stale": num(now - RETIRE_LEASE)}


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

    def read(self, backend: str, now: float) -> Registry:
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
                version = _version(item, now)
                if version is not None:
                    live[version.label] = version
        return Registry(backend, current, live)

    def get(self, backend: str, label: str, now: float) -> Version | None:
        """One version as it is now (strongly consistent), None if it is not live."""
        item = self._item(backend, label)
        return None if item is None else _version(item, now)

    def _item(self, backend: str, label: str) -> dict[str, Any] | None:
        with _translate(f"version {backend}/{label}: read"):
            item: dict[str, Any] | None = self.ddb.get_item(
                TableName=self.table, Key=self._key(backend, label),
                ConsistentRead=True).get("Item")
        return item

    def use(self, backend: str, label: str, run_id: str) -> bool:
        """Note that run `run_id` is about to call `label`, which is being retired: its
        retire then cannot retire it while the run is pinned to it. False if it was
        retired already (nothing to call)."""
        try:
            with _translate(f"version {backend}/{label}: use"):
                self.ddb.update_item(
                    TableName=self.table, Key=self._key(backend, label),
                    UpdateExpression="ADD used :r",
                    ConditionExpression="attribute_exists(pk) AND attribute_not_exists(retired)",
                    ExpressionAttributeValues={":r": {"SS": [run_id]}})
        except ConditionFailed:
            return False
        return True

    def users(self, backend: str, label: str) -> set[str]:
        """The runs that noted a use of `label` since its retire's mark."""
        item = self._item(backend, label) or {}
        return set(item.get("used", {}).get("SS", []))

    def forget_users(self, backend: str, label: str, mark: float, runs: set[str]) -> None:
        """Drop `runs` (ended, or moved off) from the uses noted since `mark`."""
        with _translate(f"version {backend}/{label}: forget uses"):
            self.ddb.update_item(
                TableName=self.table, Key=self._key(backend, label),
                UpdateExpression="DELETE used :r", ConditionExpression="retiring = :t",
                ExpressionAttributeValues={":r": {"SS": sorted(runs)}, ":t": num(mark)})

    def register(self, backend: str, label: str, url: str, digest: str | None,
                 now: float) -> bool:
        """Make `label` a live version at `url`. True if this call registered it, False
        if it was already (same URL); ConditionFailed (with the item) if the label
        names another URL, or was retired (labels are never used again)."""
        item = {**self._key(backend, label), "url": {"S": url}, "at": num(now)}
        if digest:
            item["digest"] = {"S": digest}
        try:
            with _translate(f"version {backend}/{label}: register"):
                self.ddb.put_item(TableName=self.table, Item=item,
                                  ConditionExpression="attribute_not_exists(pk)")
            return True
        except ConditionFailed as exc:
            old = self._item(backend, label)
            if old is not None and old["url"]["S"] == url and "retired" not in old:
                return False
            raise ConditionFailed(exc.message, item=old) from None

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
                    "ConditionExpression": _LIVE,
                    "ExpressionAttributeValues": _stale(now)}},
                {"Update": head}])

    def _not_current(self, backend: str, label: str) -> dict[str, Any]:
        return {"ConditionCheck": {
            "TableName": self.table, "Key": self._key(backend),
            "ConditionExpression": "attribute_not_exists(#c) OR #c <> :v",
            "ExpressionAttributeNames": {"#c": "current"},
            "ExpressionAttributeValues": {":v": {"S": label}}}}

    def mark_retiring(self, backend: str, label: str, now: float) -> None:
        """Mark `label` as being retired: from now on it cannot become current, so no
        run starts on it. ConditionFailed if it is current, not live, or marked (by a
        retire still within its lease)."""
        with _translate(f"version {backend}/{label}: mark retiring"):
            self.ddb.transact_write_items(TransactItems=[
                self._not_current(backend, label),
                {"Update": {
                    "TableName": self.table, "Key": self._key(backend, label),
                    "UpdateExpression": "SET retiring = :t REMOVE used",
                    "ConditionExpression": _LIVE,
                    "ExpressionAttributeValues": {":t": num(now), **_stale(now)}}}])

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

    def remove(self, backend: str, label: str, mark: float, now: float) -> None:
        """Retire the version its retire marked (`mark`), still not current and used
        by no run since the mark: its item stays, as a tombstone, so that its label is
        never used again. ConditionFailed otherwise."""
        with _translate(f"version {backend}/{label}: retire"):
            self.ddb.transact_write_items(TransactItems=[
                self._not_current(backend, label),
                {"Update": {
                    "TableName": self.table, "Key": self._key(backend, label),
                    "UpdateExpression": "SET retired = :now REMOVE retiring",
                    "ConditionExpression": "retiring = :t AND attribute_not_exists(used)",
                    "ExpressionAttributeValues": {":t": num(mark), ":now": num(now)}}}])

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
                    "ConditionExpression": _LIVE,
                    "ExpressionAttributeValues": _stale(now)}},
                {"Update": {
                    "TableName": self.runs, "Key": {"run_id": {"S": run_id}},
                    "UpdateExpression": f"SET #v = :to, updated_at = :now, {hist}",
                    "ConditionExpression": f"#s IN (:r, :q) AND {was}",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values}}])
