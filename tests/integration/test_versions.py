"""Versions of a backend's code served at once: every durable run is called on the
version it started on; `runs check` replays every open run against a version (or a URL)
running nothing; `versions promote` makes a version current only once every open run was
checked against it, moving the compatible ones; `versions retire` refuses while runs are
pinned. Three FunctionApps over real HTTP, moto through boto3, the API and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.control_keys import version_sk, versions_key
from orchestrator.adapters.store.versions import RETIRE_LEASE
from orchestrator.api.app import create_app as create_api
from tests.integration.test_cli_durable import until
from tests.support.cli import cli, out_json
from tests.support.harness import Harness
from tests.support.versioned_fns import CALLS, waiting_for_signal
from tests.support.versioned_fns import MANIFEST as BASE
from tests.support.versioned_fns import create_app as create_fns

MANIFEST = BASE + """\
  placed:
    backend: shop
    workflow: order
    on: { event: order.placed }
    concurrency: { group: "tenant-${{ input.data.tenant }}" }
"""


@pytest.fixture
def stack(build_harness: Any, tmp_path: Any) -> Iterator[tuple[Harness, str, dict[str, str]]]:
    servers = [BackgroundServer(create_fns(v)) for v in (1, 2, 3)]
    urls = {f"v{i + 1}": s.__enter__().url for i, s in enumerate(servers)}
    h = build_harness(MANIFEST, tmp_path, {k.upper(): u for k, u in urls.items()})
    assert h.rt.versions.seed(h.rt.manifest.backends) == {}
    h.start_workers(1, threads=4)
    try:
        with BackgroundServer(create_api(h.rt)) as api:
            yield h, api.url, urls
    finally:
        h.close()
        for s in servers:
            s.__exit__(None, None, None)


def _waiting(h: Harness, run_id: str) -> bool:
    return waiting_for_signal(h.rt.store, run_id)


def _start(h: Harness, n: int) -> list[str]:
    ids = [h.start("order", {"n": i}) for i in range(n)]
    for run_id in ids:
        until(lambda rid=run_id: _waiting(h, rid))
    return ids


def test_runs_are_checked_promoted_and_called_on_their_version(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    h, api, urls = stack
    old = _start(h, 3)
    assert all(h.rt.store.runs.get_run(r, h.rt.clock()).version == "v1" for r in old)
    assert all(CALLS.of(r) == [("reserve", 1)] for r in old)
    shown = cli("show", old[0], "--url", api, "--ascii")
    assert "version: v1" in shown.stdout.splitlines(), shown.output
    assert httpx.get(f"{api}/runs/{old[0]}").json()["version"] == "v1"

    listed = out_json(cli("versions", "--json", "--url", api))
    (shop,) = listed["backends"]
    assert shop["current"] == "v1"
    assert {v["version"]: v["open_runs"] for v in shop["versions"]} == {"v1": 3, "v2": 0,
                                                                       "v3": 0}
    ok = cli("runs", "check", "--version", "v2", "--json", "--url", api)
    assert ok.exit_code == 0, ok.output
    assert out_json(ok)["compatible"] == 3
    bad = cli("runs", "check", "--version", "v3", "--url", api)
    assert bad.exit_code == 1, bad.output
    assert "diverging at position 1: recorded signal 'go', issued step 'audit'" in bad.stdout
    by_url = cli("runs", "check", "--functions-url", urls["v3"], "--json", "--url", api)
    assert by_url.exit_code == 1 and json.loads(by_url.stdout)["diverging"] == 3

    # Not promoted while a run diverges: nothing moves, v1 stays current.
    refused = cli("versions", "promote", "v3", "--url", api)
    assert refused.exit_code == 1, refused.output
    assert "not promoted: v1 stays current" in refused.stdout
    assert h.rt.versions.registry("shop").current == "v1"
    promoted = cli("versions", "promote", "v2", "--json", "--url", api)
    assert promoted.exit_code == 0, promoted.output
    assert sorted(out_json(promoted)["moved"]) == sorted(old)
    assert all(h.rt.store.runs.get_run(r, h.rt.clock()).version == "v2" for r in old)

    # v1 has no run left: it retires; the current one does not.
    assert cli("versions", "retire", "v1", "--url", api).exit_code == 0
    current = cli("versions", "retire", "v2", "--url", api)
    assert current.exit_code == 2 and "current version" in current.stderr
    for run_id in old:
        h.rt.signals.send(run_id, "go", {})
    for run_id in old:
        assert h.wait(run_id)["output"] == {"charged_by": 2}
        assert CALLS.of(run_id) == [("reserve", 1), ("charge", 2)]


def test_incompatible_runs_stay_pinned_and_block_their_versions_retire(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    h, api, _ = stack
    (a,) = _start(h, 1)
    pinned = cli("versions", "promote", "v3", "--pin-incompatible", "--json", "--url", api)
    assert pinned.exit_code == 0, pinned.output
    assert out_json(pinned)["pinned"] == [a]
    (b,) = _start(h, 1)  # a new run starts on the new current version
    assert h.rt.store.runs.get_run(b, h.rt.clock()).version == "v3"
    retire = cli("versions", "retire", "v1", "--url", api)
    assert retire.exit_code == 2, retire.output
    assert "1 open run is pinned to version 'v1'" in retire.stderr
    assert "v1" in h.rt.versions.registry("shop").live
    for run_id in (a, b):
        h.rt.signals.send(run_id, "go", {})
    assert h.wait(a)["output"] == {"charged_by": 1}
    assert h.wait(b)["output"] == {"charged_by": 3}
    assert CALLS.of(a) == [("reserve", 1), ("charge", 1)]
    assert CALLS.of(b) == [("reserve", 3), ("audit", 3), ("charge", 3)]
    # Once its last run ended, v1 retires.
    assert cli("versions", "retire", "v1", "--url", api).exit_code == 0


def test_retire_cancel_and_migrate_move_the_runs_off_first(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    h, api, _ = stack
    a, b = _start(h, 2)
    h.rt.moves().promote("shop", "v3", pin_incompatible=True)
    moved = cli("versions", "retire", "v1", "--cancel", "--json", "--url", api)
    assert moved.exit_code == 0, moved.output
    assert sorted(out_json(moved)["cancelled"]) == sorted([a, b])
    assert h.wait(a)["status"] == "killed"


def test_bad_input_gets_a_clear_error_and_changes_nothing(
        stack: tuple[Harness, str, dict[str, str]], testfns: str) -> None:
    h, api, urls = stack
    unknown = cli("runs", "check", "--version", "v9", "--url", api)
    assert unknown.exit_code == 4 and "no live version 'v9'" in unknown.stderr
    not_app = cli("runs", "check", "--functions-url", testfns, "--url", api)
    assert not_app.exit_code == 2 and "not a functions app" in not_app.stderr
    both = cli("runs", "check", "--url", api)
    assert both.exit_code == 2
    taken = cli("versions", "register", urls["v3"], "--version", "v1", "--url", api)
    assert taken.exit_code == 2 and "served elsewhere already" in taken.stderr
    assert cli("versions", "promote", "v9", "--url", api).exit_code == 4
    assert cli("versions", "nope", "--url", api).exit_code == 4
    registry = h.rt.versions.registry("shop")
    assert registry.current == "v1" and set(registry.live) == {"v1", "v2", "v3"}
    # Registering by what the code publishes: the label is its hash, and stays put.
    new = out_json(cli("versions", "register", urls["v2"], "--json", "--url", api))
    assert new["version"].startswith("h-") and new["new"] is True
    again = out_json(cli("versions", "register", urls["v2"], "--json", "--url", api))
    assert again == {**new, "new": False}


def test_a_run_whose_version_is_gone_pauses_and_goes_on_once_migrated(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    """A run pinned to a version that is not live (as a start racing a retire leaves
    one) is paused, never called elsewhere; `runs migrate` checks it, moves it and
    resumes it."""
    h, api, urls = stack
    (a,) = _start(h, 1)
    driver = h.rt.store.drivers.get_driver(a)
    assert driver is not None
    # As a start racing a retire leaves it (test_versions_race.py drives that race):
    # pinned to a version whose item is gone.
    rows = h.rt.store.versions
    rows.register("shop", "v0", urls["v1"], None, h.rt.clock())
    rows.move_run(a, "$run", "shop", "v1", "v0", driver.attempt_started, h.rt.clock())
    rows.ddb.delete_item(TableName=rows.table,
                         Key=rows.control.key(versions_key("shop"), version_sk("v0")))
    h.rt.signals.send(a, "go", {})
    paused = until(lambda: h.rt.store.runs.get_run(a, h.rt.clock()).paused)
    assert paused["code"] == "version_gone" and "'v0'" in paused["message"]
    assert CALLS.of(a) == [("reserve", 1)]
    moved = cli("runs", "migrate", "--to", "v2", "--json", "--url", api)
    assert out_json(moved)["moved"] == [a]
    assert h.wait(a)["output"] == {"charged_by": 2}
    assert CALLS.of(a) == [("reserve", 1), ("charge", 2)]


def test_every_trigger_path_pins_and_a_queued_run_moves_with_a_promotion(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    """Runs started by an event, one of them queued behind its concurrency group's
    holder: both pinned to the current version; a promotion checks and moves the queued
    one too (nothing recorded yet), which then runs on the new version."""
    h = stack[0]
    h.rt.events.emit("order.placed", {"tenant": "t1"})
    h.rt.events.emit("order.placed", {"tenant": "t1"})
    listed = until(lambda: (lambda runs: runs if len(runs) == 2 else None)(
        h.rt.store.runs.list_runs("placed", h.rt.clock(), limit=10)[0]))
    first, queued = (h.rt.store.runs.get_run(r.run_id, h.rt.clock())
                     for r in sorted(listed, key=lambda r: r.created_at))
    assert queued.status.value == "queued" and queued.version == first.version == "v1"
    until(lambda: _waiting(h, first.run_id))
    promoted = h.rt.moves().promote("shop", "v2")
    assert sorted(promoted["moved"]) == sorted([first.run_id, queued.run_id])
    h.rt.signals.send(first.run_id, "go", {})
    assert h.wait(first.run_id)["output"] == {"charged_by": 2}
    until(lambda: _waiting(h, queued.run_id))
    h.rt.signals.send(queued.run_id, "go", {})
    assert h.wait(queued.run_id)["output"] == {"charged_by": 2}
    assert CALLS.of(queued.run_id) == [("reserve", 2), ("charge", 2)]


def test_a_retired_label_is_never_used_again_and_a_dead_retires_mark_expires(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    h, api, urls = stack
    rows = h.rt.store.versions
    # A retire whose process died after its mark: the mark holds for RETIRE_LEASE, then
    # counts as none (the version can be retired, or made current, again).
    rows.mark_retiring("shop", "v3", h.rt.clock() - RETIRE_LEASE - 1)
    assert h.rt.versions.registry("shop").live["v3"].retiring is None
    fresh = h.rt.clock()
    rows.mark_retiring("shop", "v2", fresh)
    held = cli("versions", "retire", "v2", "--url", api)
    assert held.exit_code == 2 and "being retired already" in held.stderr
    rows.unmark_retiring("shop", "v2", fresh)
    assert cli("versions", "retire", "v3", "--url", api).exit_code == 0
    # Its label stays retired: never registered again, at its URL or another.
    assert "v3" not in h.rt.versions.registry("shop").live
    for url in (urls["v3"], urls["v2"]):
        again = cli("versions", "register", url, "--version", "v3", "--url", api)
        assert again.exit_code == 2 and "was retired" in again.stderr, again.output
    assert cli("versions", "promote", "v3", "--url", api).exit_code == 4


def test_a_process_registers_the_manifests_versions_and_reports_a_new_current(
        emulator: Any, build_harness: Any, tmp_path: Any) -> None:
    """`orchestrator sweeper|worker|api` register the versions the manifest declares; a
    `current:` other than the stack's is reported, not applied (a promotion is)."""
    from click.testing import CliRunner

    from orchestrator.cli.commands import main

    urls = {"V1": "http://127.0.0.1:9/one", "V2": "http://127.0.0.1:9/two",
            "V3": "http://127.0.0.1:9/three"}
    h = build_harness(BASE, tmp_path, urls)  # a harness registers nothing by itself
    try:
        assert h.rt.versions.registry("shop").live == {}
        env = {"AWS_ENDPOINT_URL": emulator.url, "ORCH_PREFIX": h.rt.settings.prefix, **urls}
        manifest = tmp_path / "orchestrator.yml"
        manifest.write_text(BASE)
        first = CliRunner().invoke(main, ["sweeper", "--once", "--manifest", str(manifest)],
                                   env=env, catch_exceptions=False)
        assert first.exit_code == 0, first.output
        registry = h.rt.versions.registry("shop")
        assert registry.current == "v1" and set(registry.live) == {"v1", "v2", "v3"}
        manifest.write_text(BASE.replace("current: v1", "current: v2"))
        second = CliRunner().invoke(main, ["sweeper", "--once", "--manifest", str(manifest)],
                                    env=env, catch_exceptions=False)
        assert second.exit_code == 0, second.output
        assert ("shop: the manifest's current version v2 is not the stack's (v1): make it"
                " current with `orchestrator versions promote v2 --backend shop`") in second.stderr
        assert h.rt.versions.registry("shop").current == "v1"
    finally:
        h.close()


def test_retire_migrate_moves_the_compatible_runs_and_refuses_for_the_others(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    h, api, _ = stack
    a, b = _start(h, 2)
    h.rt.versions.make_current("shop", "v3")  # as a deploy that pinned its runs left it
    refused = cli("versions", "retire", "v1", "--migrate", "--url", api)
    assert refused.exit_code == 2, refused.output
    assert "2 open runs are pinned to version 'v1'" in refused.stderr  # v3 diverges
    assert {h.rt.store.runs.get_run(r, h.rt.clock()).version for r in (a, b)} == {"v1"}
    h.rt.versions.make_current("shop", "v2")
    retired = cli("versions", "retire", "v1", "--migrate", "--json", "--url", api)
    assert retired.exit_code == 0, retired.output
    assert sorted(out_json(retired)["migration"]["moved"]) == sorted([a, b])
    for run_id in (a, b):
        h.rt.signals.send(run_id, "go", {})
        assert h.wait(run_id)["output"] == {"charged_by": 2}


def test_a_cancelled_runs_rerun_starts_on_the_current_version(
        stack: tuple[Harness, str, dict[str, str]]) -> None:
    """Where versions meet a stop and a rerun: a cancelled run keeps its version (it
    calls nothing more, and pins nothing: v1 retires under it); its rerun is a new run,
    pinned to the version current then."""
    h, api, _ = stack
    (a,) = _start(h, 1)
    assert cli("cancel", a, "--url", api).exit_code == 0
    assert h.wait(a)["status"] == "killed"
    assert out_json(cli("versions", "promote", "v2", "--json", "--url", api))["promoted"]
    assert cli("versions", "retire", "v1", "--url", api).exit_code == 0
    rerun = out_json(cli("rerun", a, "--json", "--url", api))
    b = rerun["run_id"]
    assert b != a and h.rt.store.runs.get_run(b, h.rt.clock()).version == "v2"
    assert h.rt.store.runs.get_run(a, h.rt.clock()).version == "v1"
    until(lambda: _waiting(h, b))
    h.rt.signals.send(b, "go", {})
    assert h.wait(b)["output"] == {"charged_by": 2}
    assert CALLS.of(b) == [("reserve", 2), ("charge", 2)]
