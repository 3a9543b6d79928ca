"""Each place the emulator reaches inside moto or botocore is checked at start-up, and a
moto that changed it costs that piece alone (infra/emulator/capabilities.py): every speed-up, the
in-process path and the unsigned requests, each switched off here by changing moto the
way a release might, in a process of its own (tests/support/capability_probe.py). The
emulator then answers exactly as it did with everything on, one log line names what was
switched off and why, and everything else stays on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import moto
import pytest

from infra.emulator import CAPABILITIES as EMULATOR_CAPABILITIES
from infra.emulator import speedups
from infra.emulator.capabilities import Capability, Reach, check, fingerprint, resolve

ROOT = Path(__file__).resolve().parents[2]
# Every piece applies to each moto release checked (a speed-up has a variant per shape).
NOT_FOR_THIS_MOTO: set[str] = set()


def probe(brk: str, **env: str) -> tuple[dict[str, Any], str]:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("ORCH_MOTO_STOCK", "ORCH_MOTO_SPEEDUPS_OFF")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.capability_probe", brk], cwd=ROOT,
        env={**environ, **env}, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@cache
def baseline() -> tuple[dict[str, Any], str]:
    return probe("none")


def switched_off(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "switched off" in line]


def test_every_piece_is_on_for_a_moto_release_checked() -> None:
    if os.environ.get("ORCH_MOTO_STOCK"):
        pytest.skip("ORCH_MOTO_STOCK=1: the speed-ups are off on purpose")
    assert moto.__version__ in speedups.CHECKED_MOTO
    out, stderr = baseline()
    off = {name for name, v in out["verdicts"].items() if not v["active"]}
    assert off == NOT_FOR_THIS_MOTO, out["verdicts"]
    names = {c.name for c in (*speedups.CAPABILITIES, *EMULATOR_CAPABILITIES)}
    assert set(out["verdicts"]) == names
    assert out["after_stop"] == "answered"  # the in-process path needs no socket
    assert len(switched_off(stderr)) == len(NOT_FOR_THIS_MOTO)


@pytest.mark.parametrize("speedup", sorted({s.capability.name for s in speedups.SPEEDUPS}))
def test_a_speedup_whose_moto_code_changed_is_switched_off_alone(speedup: str) -> None:
    # The variant that applies to this moto (checked on moto as shipped, as install()
    # does: this process may have installed them); its first patched attribute is changed.
    was_installed = speedups.installed()
    speedups.uninstall()
    try:
        target = next(s for s in speedups.SPEEDUPS
                      if s.capability.name == speedup and check(s.capability) is None)
    finally:
        if was_installed:
            speedups.install()
    path = target.patches[0].path
    out, stderr = probe(f"changed:{path}")
    verdicts = out["verdicts"]
    assert not verdicts[speedup]["active"]
    assert path in verdicts[speedup]["reason"]
    assert {n for n, v in verdicts.items() if not v["active"]} == {speedup} | NOT_FOR_THIS_MOTO
    lines = [line for line in switched_off(stderr) if speedup in line]
    assert len(lines) == 1 and path in lines[0], stderr[-2000:]
    assert out["answers"] == baseline()[0]["answers"]


def test_a_moto_that_refuses_the_in_process_request_is_called_over_http() -> None:
    out, stderr = probe("in-process")
    verdict = out["verdicts"]["in-process"]
    assert not verdict["active"]
    assert "from_wsgi_server" in verdict["reason"] and "over HTTP" in verdict["reason"]
    assert [line for line in switched_off(stderr) if "in-process" in line]
    assert out["answers"] == baseline()[0]["answers"]
    assert out["after_stop"] == "refused"  # it went through the socket


def test_a_botocore_without_the_handlers_unhooked_still_sends_unsigned_in_process() -> None:
    out, _ = probe("unsigned")
    verdict = out["verdicts"]["unsigned"]
    assert not verdict["active"] and "_user_agent_creator" in verdict["reason"]
    assert out["verdicts"]["in-process"]["active"]
    assert out["answers"] == baseline()[0]["answers"]
    assert out["after_stop"] == "answered"


def test_the_switches_turn_speedups_off_by_name_or_all() -> None:
    out, _ = probe("none", ORCH_MOTO_SPEEDUPS_OFF="index-range, speedup:projection")
    off = {n for n, v in out["verdicts"].items() if not v["active"]}
    assert off == {"speedup:index-range", "speedup:projection"} | NOT_FOR_THIS_MOTO
    assert "ORCH_MOTO_SPEEDUPS_OFF" in out["verdicts"]["speedup:projection"]["reason"]
    out, _ = probe("none", ORCH_MOTO_STOCK="1")
    assert all(not v["active"] for n, v in out["verdicts"].items() if n.startswith("speedup:"))
    assert out["answers"] == baseline()[0]["answers"]


def test_a_check_names_what_is_missing_or_changed() -> None:
    assert check(Capability("x", "", (Reach("moto.core.nowhere:thing"),))) == (
        "moto.core.nowhere cannot be imported (No module named 'moto.core.nowhere')")
    assert check(Capability("x", "", (Reach("moto.core.utils:no_such_function"),))) == (
        "moto.core.utils:no_such_function is missing")
    seen = fingerprint(resolve("moto.core.utils:unix_time"))
    assert seen is not None and len(seen) == 12
    changed = check(Capability("x", "", (Reach("moto.core.utils:unix_time",
                                                frozenset({"000000000000"})),)))
    assert changed == (f"moto.core.utils:unix_time changed (fingerprint {seen}, "
                       "not a release checked)")
    assert check(Capability("x", "", (Reach("moto.core.utils:unix_time",
                                             frozenset({seen})),))) is None
