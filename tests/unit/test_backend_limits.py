"""Limits that protect a backend, the pure parts: the manifest's `limits:` (and the
errors naming its fields, with file lines), why a call found no room (`verdict`), a 429's
hold-off, the keys, and how a step held back is shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.adapters.store import control_keys as c
from orchestrator.cli.doctor import backend_checks
from orchestrator.cli.render import render_run
from orchestrator.engine.attempts import Outcome, OutcomeKind, classify_response
from orchestrator.engine.backend_limits import (
    RECHECK,
    BackendLimit,
    LimitKind,
    Limits,
    Room,
    Wait,
    hold_off,
    verdict,
)
from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import load_manifest
from orchestrator.manifest.models import Manifest
from orchestrator.presentation.backend_waits import backend_wait_text
from orchestrator.runtime import backend_limits

MANIFEST = """\
backends:
  api:
    url: http://localhost:8001
    limits: {limits}
workflows:
  w:
    steps:
      a: {{ backend: api, route: /a }}
"""


def load(tmp_path: Path, limits: str) -> Manifest:
    path = tmp_path / "orchestrator.yml"
    path.write_text(MANIFEST.format(limits=limits), encoding="utf-8")
    return load_manifest(path, {})


def problems(tmp_path: Path, limits: str) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load(tmp_path, limits)
    return caught.value.problems


def test_limits_load_into_what_the_runners_apply(tmp_path: Path) -> None:
    m = load(tmp_path, '{ concurrency: 4, rate: "10/1s" }')
    limits = backend_limits("api", m.backends["api"])
    assert limits == Limits("api", 4, 10, 1.0)
    assert limits.interval == pytest.approx(0.1)
    assert limits.to_json() == {"concurrency": 4, "rate": "10/1s"}
    only_rate = backend_limits("api", load(tmp_path, '{ rate: "100/1m" }').backends["api"])
    assert only_rate == Limits("api", None, 100, 60.0)
    assert backend_limits("api", load(tmp_path, "{}").backends["api"]) is None


@pytest.mark.parametrize(("limits", "field", "fragment"), [
    ("{ concurrency: 0 }", "backends.api.limits.concurrency", "greater than or equal to 1"),
    ('{ concurrency: "4" }', "backends.api.limits.concurrency", "integer"),
    ('{ rate: "10" }', "backends.api.limits.rate", "<count>/<period>"),
    ('{ rate: "0/1s" }', "backends.api.limits.rate", "<count>/<period>"),
    ('{ rate: "10/soon" }', "backends.api.limits.rate", "'soon' is not a duration"),
    ('{ rate: "5000/1s" }', "backends.api.limits.rate", "more than 1000 starts a second"),
    ("{ burst: 3 }", "backends.api.limits.burst", "unknown field"),
])
def test_bad_limits_name_their_field_and_line(tmp_path: Path, limits: str, field: str,
                                              fragment: str) -> None:
    found = problems(tmp_path, limits)
    assert len(found) == 1, found
    assert f"orchestrator.yml:4: {field}: " in found[0], found
    assert fragment in found[0], found


LIMITS = Limits("api", 2, 10, 1.0)


def test_a_full_backend_waits_for_a_slot_at_most_a_recheck_away() -> None:
    item = BackendLimit({"a": 150.0, "b": 160.0})
    assert verdict(LIMITS, item, 100.0) == Wait(LimitKind.CONCURRENCY, 100.0 + RECHECK)
    # A lease ending sooner than the recheck: it looks again then.
    assert verdict(LIMITS, BackendLimit({"a": 101.0, "b": 160.0}), 100.0) == Wait(
        LimitKind.CONCURRENCY, 101.0)


def test_expired_holders_are_named_to_drop_and_then_there_is_room() -> None:
    item = BackendLimit({"a": 99.0, "b": 160.0})
    assert verdict(LIMITS, item, 100.0) == Room(("a",))


def test_the_rate_and_a_429_hold_calls_until_their_time() -> None:
    assert verdict(LIMITS, BackendLimit({}, tat=100.5), 100.0) == Wait(LimitKind.RATE, 100.5)
    assert verdict(LIMITS, BackendLimit({}, tat=100.5, not_before=130.0), 100.0) == Wait(
        LimitKind.RETRY_AFTER, 130.0)
    # Room again (a write that lost a race, or a time within rounding of now).
    assert verdict(LIMITS, BackendLimit({}, tat=100.001), 100.0) == Room()


def test_only_a_429_with_retry_after_holds_the_backend_off() -> None:
    def answer(status: int, retry_after: str | None) -> Outcome:
        return classify_response(status, {"error": "x"}, retry_after=retry_after, now=100.0,
                                 body_is_json=True)
    assert hold_off(answer(429, "2"), 100.0) == 102.0
    assert hold_off(answer(429, "Thu, 01 Jan 1970 00:01:50 GMT"), 100.0) == 110.0
    assert hold_off(answer(429, None), 100.0) is None
    assert hold_off(answer(503, "2"), 100.0) is None
    assert hold_off(Outcome(OutcomeKind.SUCCESS), 100.0) is None
    assert hold_off(None, 100.0) is None


def test_the_keys_are_pinned() -> None:
    assert c.backend_limit_key("api") == "blimit#api"
    assert c.backend_line_key("api") == "blimitq#api"


def test_a_step_held_back_is_shown_with_its_limit() -> None:
    limits = {"concurrency": 4, "rate": "10/1s"}
    assert backend_wait_text({"backend": "api", "limit": "concurrency", "limits": limits}) \
        == "waiting for backend api (limit 4 in flight)"
    assert backend_wait_text({"backend": "api", "limit": "rate", "limits": limits}) \
        == "waiting for backend api (rate 10/1s)"
    assert backend_wait_text({"backend": "api", "limit": "retry_after", "limits": limits}) \
        == "waiting for backend api (asked to retry later)"
    view = {"workflow": "w", "status": "running", "run_id": "r1", "created_at": 1.0,
            "steps": [{"step": "a", "status": "dispatched", "attempts": 1,
                       "waiting_for": {"backend": "api", "limit": "rate", "limits": limits}}]}
    assert "a  dispatched 1 attempt  waiting for backend api (rate 10/1s)" in render_run(
        view, ascii_only=True)


def test_doctor_shows_a_backends_limits_where_it_shows_the_backend(tmp_path: Path) -> None:
    m = load(tmp_path, '{ concurrency: 4, rate: "10/1s" }')
    (check,) = backend_checks(m)
    assert check.detail.endswith("; limits 4 in flight, 10/1s"), check
    assert check.facts["limits"] == {"concurrency": 4, "rate": "10/1s"}
