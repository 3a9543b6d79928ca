"""`orchestrator dev` with an invalid manifest: the installed command, in a process of its
own, says what is wrong (file and line) and exits 2, having started nothing: no emulator
process left behind, no traceback of one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The venv's own console script, as a person runs it (not `python -m orchestrator`).
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"

# A list of steps where a mapping is wanted (line 4), and no `backends:` (said at line 2,
# the first key).
INVALID = """\
# a manifest with two mistakes
workflows:
  report:
    steps:
      - name: extract
"""


def _group(pgid: int) -> list[str]:
    """The live processes of a process group (zombies have ended): pid and command line."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # it ended while we looked
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(f"{stat.parent.name}: {cmdline.decode(errors='replace')}")
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes in /proc")
def test_dev_with_an_invalid_manifest_prints_its_problems_and_starts_nothing(
    tmp_path: Path
) -> None:
    manifest = tmp_path / "bad.yml"
    manifest.write_text(INVALID)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ORCH_"))}
    # A session of its own: whatever it starts is in its process group, found by its pid.
    proc = subprocess.Popen(
        [str(ORCHESTRATOR), "dev", "--manifest", str(manifest), "--port", "0",
         "--functions-port", "0", "--scripts-port", "0", "--emulator-port", "0"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        code = proc.wait(timeout=60)
        # Looked at as soon as the command ended: nothing of it may outlive it.
        left = _group(proc.pid)
        # The pipes close once every process holding them has ended (a stray one too).
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = out + err
    assert code == 2, said
    assert left == [], f"still running after `orchestrator dev` exited: {left}\n{said}"
    assert "Traceback" not in said, said
    assert err.startswith("error: invalid manifest:\n"), said
    assert re.search(rf"^{re.escape(str(manifest))}:2: backends: is required", err, re.M), said
    assert re.search(rf"^{re.escape(str(manifest))}:4: workflows\.report\.steps: ", err,
                     re.M), said
    # Checked before anything started: no emulator, functions or API line.
    assert out == "", said
