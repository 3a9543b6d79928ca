"""Durable state cells (`ctx.state`): add claims a key once for the whole project and a
replay of the winner still wins; incr draws a number once per operation; get is a live
read whose answer is recorded; set and delete; a TTL; the API and CLI that inspect and
repair cells; and 20 runs racing for one claim (forced with a barrier): one winner."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.durable import Context, step, workflow
from functions.sdk.protocol import WaitKind
from functions.sdk.serving import BackgroundServer
from infra.emulator import Emulator
from orchestrator.api.app import create_app
from orchestrator.engine.durable_waits import Waiting
from orchestrator.errors import NotFound, UsageError
from orchestrator.testing import WorkflowEnv
from tests.support.cli import cli, out_json


@workflow("claim")
async def claim(ctx: Context, payload: Any) -> Any:
    won = await ctx.state.add(f"order-{payload['order']}", entity="orders")
    if not won:
        return {"handled": False}
    await ctx.sleep("1s")  # a suspension: the rest is a replay of the claim
    charged = await step("charge", lambda: {"key": ctx.idempotency_key})
    return {"handled": True, "won": won, "charged": charged}


@workflow("counter")
async def counter(ctx: Context, payload: Any) -> Any:
    mine = await ctx.state.incr("ticket", entity="reindex")
    await ctx.sleep("5s")
    latest = await ctx.state.get("ticket", entity="reindex")
    await ctx.state.set("last", {"ticket": mine}, entity="reindex", ttl="1h")
    gone = await ctx.state.delete("nothing-here", entity="reindex")
    return {"mine": mine, "latest": latest, "gone": gone}


@workflow("bad-incr")
async def bad_incr(ctx: Context, payload: Any) -> Any:
    await ctx.state.set("word", "hello", entity="misc")
    try:
        await ctx.state.incr("word", entity="misc")
    except Exception as exc:
        return {"error": str(exc)}
    return {"error": None}


@pytest.fixture
def env(emulator: Emulator) -> Iterator[WorkflowEnv]:
    with WorkflowEnv(workflows=[claim, counter, bad_incr], emulator=emulator) as env:
        yield env


def test_add_claims_once_and_the_winner_still_wins_on_replay(env: WorkflowEnv) -> None:
    first = env.start("claim", {"order": 1042})
    second = env.start("claim", {"order": 1042})
    other = env.start("claim", {"order": 7})
    env.run_until_idle()
    assert env.result(first)["handled"] is True
    assert env.result(first)["won"] is True  # recorded before the sleep, replayed after
    assert env.result(second) == {"handled": False}
    assert env.result(other)["handled"] is True
    cell = env.rt.state.get("orders", "order-1042")
    assert cell["value"] is True and cell["version"] == 1
    [entry] = [e for e in env.journal(first) if e["kind"] == "state"]
    assert (entry["name"], entry["value"]) == ("orders/order-1042", True)


def test_incr_draws_tickets_and_get_reads_the_latest(env: WorkflowEnv) -> None:
    runs = [env.start("counter") for _ in range(3)]
    env.run_until_idle()
    results = [env.result(r) for r in runs]
    assert sorted(r["mine"] for r in results) == [1, 2, 3]
    assert all(type(r["mine"]) is int for r in results)
    # Each read after its sleep saw the latest ticket drawn, 3: only the last is last.
    assert [r["latest"] for r in results] == [3, 3, 3]
    assert all(r["gone"] is False for r in results)
    last = env.rt.state.get("reindex", "last")
    # The last run to write it: they woke together, in any order.
    assert last["value"]["ticket"] in (1, 2, 3) and last["expires_at"] is not None
    env.advance("2h")  # past its TTL: gone
    with pytest.raises(NotFound):
        env.rt.state.get("reindex", "last")


def test_incr_of_a_word_fails_where_it_was_awaited(env: WorkflowEnv) -> None:
    run_id = env.start("bad-incr")
    env.run_until_idle()
    assert "incr needs numbers" in env.result(run_id)["error"]


def test_inspect_and_repair_cells(env: WorkflowEnv) -> None:
    s = env.rt.state
    s.set("tickets", "cursor", 10)
    assert s.get("tickets", "cursor")["value"] == 10
    s.set("tickets", "cursor", 20)
    assert s.get("tickets", "cursor")["version"] == 2
    s.set("tickets", "other", {"a": 1})
    assert [c["key"] for c in s.list("tickets")["cells"]] == ["cursor", "other"]
    assert s.delete("tickets", "other") == {"entity": "tickets", "key": "other",
                                            "deleted": True}
    with pytest.raises(NotFound):
        s.delete("tickets", "other")
    with pytest.raises(UsageError, match="state entity"):
        s.get("bad entity!", "x")
    with pytest.raises(UsageError, match="ttl"):
        s.set("tickets", "cursor", 1, ttl=-1)


def test_twenty_runs_racing_for_one_claim_have_one_winner(env: WorkflowEnv) -> None:
    """20 runs perform `add` on one key at once (released by a barrier, each on its own
    thread, through the real store): exactly one wins, and each answer is recorded."""
    runs = [env.start("claim", {"order": 99}) for _ in range(20)]
    now = env.clock()
    barrier = threading.Barrier(len(runs))
    answers: dict[str, Any] = {}

    def race(run_id: str) -> None:
        waiting = Waiting(WaitKind.STATE, "", 0, "op-add", "orders/race", since=now,
                          detail={"action": "add", "entity": "orders", "key": "race"})
        barrier.wait()
        answers[run_id] = env.rt.state.perform(run_id, waiting, now)["value"]

    threads = [threading.Thread(target=race, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers.values()).count(True) == 1, answers
    winner = next(r for r, won in answers.items() if won)
    assert env.rt.store.state.get("orders", "race", now).claimed_by == f"{winner}/op-add"
    # Performing it again for the winner (a retry after a crash) changes nothing.
    again = Waiting(WaitKind.STATE, "", 0, "op-add", "orders/race", since=now,
                    detail={"action": "add", "entity": "orders", "key": "race"})
    assert env.rt.state.perform(winner, again, now)["value"] is True
    assert env.rt.state.get("orders", "race")["version"] == 1


# ---- from outside a run: the API and the CLI -------------------------------------------


def test_the_api_and_the_cli_inspect_and_repair_cells(harness_factory: Any) -> None:
    h = harness_factory("backends:\n  fn: { url: \"${FN}\" }\nworkflows:\n"
                        "  w:\n    steps:\n      a: { backend: fn, route: /echo }\n")
    with BackgroundServer(create_app(h.rt)) as server:
        url = server.url
        put = httpx.put(f"{url}/state/tickets/cursor", json={"value": 10})
        assert put.status_code == 200 and put.json()["value"] == 10
        assert httpx.get(f"{url}/state/tickets/cursor").json()["version"] == 1
        assert httpx.get(f"{url}/state/tickets/nope").status_code == 404
        bad = httpx.put(f"{url}/state/tickets/cursor", json={"value": 1, "ttl": -5})
        assert bad.status_code == 422
        assert httpx.get(f"{url}/state/bad%20entity/x").status_code == 400
        args = ["--url", url]
        assert cli("state", "get", "tickets", "cursor", *args).stdout.strip() == "10"
        done = cli("state", "set", "tickets", "cursor", "20", *args)
        assert done.exit_code == 0 and done.stdout.strip() == "tickets/cursor = 20 (version 2)"
        assert cli("state", "set", "tickets", "note", "hello", *args).exit_code == 0
        assert out_json(cli("state", "get", "tickets", "note", "--json", *args))["value"] \
            == "hello"
        assert cli("state", "list", "tickets", *args).stdout.splitlines() == [
            "cursor\t20", 'note\t"hello"']
        assert cli("state", "delete", "tickets", "note", *args).exit_code == 0
        missing = cli("state", "get", "tickets", "note", *args)
        assert missing.exit_code == 4 and "no state cell 'note'" in missing.stderr
        assert httpx.delete(f"{url}/state/tickets/note").status_code == 404
