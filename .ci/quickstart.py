"""The README's Quickstart, run as a newcomer runs it: .ci/run's `quickstart` phase.

Standard library only, run with the machine's python3 (the one the README's
`python3 -m pip install uv` uses). In a fresh clone of this checkout (the work tree's
uncommitted changes copied over it, so that it tests what the other phases test; no
.venv, no node_modules), it runs LITERALLY the commands of the README's Quickstart:

1. the first line of its first ```bash block (`python3 -m pip install uv && uv run
   --locked orchestrator dev --demo`), in the background in a process group of its own,
   read until the demo reports success, keeping the `export ...` line it prints. The time
   to the `emulator` line is that command's install time;
2. the next ```bash block ("in another terminal") in one bash (`bash -euo pipefail`)
   fed line by line, the `export ORCHESTRATOR_URL=… ORCHESTRATOR_API_KEY=…` placeholder
   line replaced by the line `dev` printed: the only change. Each line must succeed, and
   what it prints must say what the README says;
3. the webhook block (`echo … > body.json`, `orchestrator webhook sign …`) in that same
   terminal, then the `curl` line the signing printed, twice (`-w` added to see the
   status: 202 and `"duplicate": false`, then 200 and `"duplicate": true`), then the
   block after it (`orchestrator show monthly-report`, now the webhook's run);
4. after `dev` stopped, `uv sync --locked --extra dev` in the clone: the install time the
   test command (`uv run --locked --extra dev python -m pytest`) adds.

Every wait has a deadline, the process groups started here are always stopped, and each
step prints its duration. A mismatch, or a README no longer shaped as this script reads
it, exits non-zero saying what.

    python3 .ci/quickstart.py [--keep]     # --keep: leave the clone (its path is printed)
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Deadlines, seconds. The first includes a cold install of the runtime set.
INSTALL_DEADLINE = 900.0
START_DEADLINE = 180.0
DEMO_DEADLINE = 180.0
COMMAND_DEADLINE = 180.0
STOP_DEADLINE = 30.0

PLACEHOLDER = re.compile(r"^export ORCHESTRATOR_URL=\S*…\S* ORCHESTRATOR_API_KEY=\S*…")
EXPORT = re.compile(r"^\s*(export ORCHESTRATOR_URL=(\S+) ORCHESTRATOR_API_KEY=\S+)\s*$")
BANNER = re.compile(r"^emulator\s+http://")
DASHBOARD = re.compile(r"^dashboard\s+(http://\S+/ui/login\?token=\S+)")
STARTED = re.compile(r"^demo: started (\S+)\s*$")
# The run's line: `monthly-report  ✔ success  RUN_ID` (`ok` for ✔ when not on a terminal).
OUTCOME = re.compile(r"^monthly-report\s+\S+\s+(\w+)\s+(\S+)\s*$")
DONE = "@@quickstart: done"
# What each command of the "another terminal" block must print: its start, then needles.
EXPECT = {
    "orchestrator trigger monthly-report": ("report-2026-09", "success"),
    "orchestrator show monthly-report": ("report-2026-09", "success"),
    "orchestrator runs monthly-report": ("report-2026-09",),
    "orchestrator history report-2026-09": ("run.running", "run.success"),
}
# Variables of the runner's own shell that a newcomer's terminal does not have.
DROP = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT",
        "REPORT_WEBHOOK_SECRET")
DROP_PREFIXES = ("ORCHESTRATOR_", "ORCH_", "AWS_ENDPOINT_URL")


class Mismatch(Exception):
    """The README and what its commands did disagree."""


def log(message: str) -> None:
    print(message, flush=True)


class Timings:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float]] = []
        self.start = time.monotonic()

    def add(self, name: str, seconds: float) -> None:
        self.rows.append((name, seconds))
        log(f"-- {name}: {seconds:.1f} s")

    def report(self) -> None:
        log("\nquickstart timings:")
        for name, seconds in self.rows:
            log(f"  {seconds:7.1f} s  {name}")
        log(f"  {time.monotonic() - self.start:7.1f} s  total")


# --- the README --------------------------------------------------------------------------

class Quickstart:
    """The README's Quickstart section, as the commands this script runs."""

    def __init__(self, readme: str) -> None:
        lines = readme.splitlines()
        try:
            start = lines.index("## Quickstart")
        except ValueError:
            raise Mismatch("README.md has no `## Quickstart` heading") from None
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        self.blocks: list[tuple[str, list[str]]] = []  # (language, lines)
        fence: tuple[str, list[str]] | None = None
        for line in lines[start + 1:end]:
            if fence is None and line.startswith("```"):
                fence = (line[3:].strip(), [])
            elif fence is not None and line.startswith("```"):
                self.blocks.append(fence)
                fence = None
            elif fence is not None:
                fence[1].append(line)
        bash = [body for lang, body in self.blocks if lang == "bash"]
        if len(bash) < 4:
            raise Mismatch(f"the Quickstart has {len(bash)} ```bash blocks, this script"
                           " follows 4: the commands, another terminal's, the webhook's"
                           " and the `show` after it")
        self.front_door, self.terminal, self.webhook, self.after_webhook = (
            [line for line in block if line.strip()] for block in bash[:4])
        self.dev_command = self.front_door[0]
        if "orchestrator dev --demo" not in self.dev_command:
            raise Mismatch(f"the Quickstart's first command is not `orchestrator dev --demo`:"
                           f" {self.dev_command!r}")
        placeholders = [line for line in self.terminal if PLACEHOLDER.match(line)]
        if len(placeholders) != 1:
            raise Mismatch("the Quickstart's \"another terminal\" block must have one"
                           " `export ORCHESTRATOR_URL=… ORCHESTRATOR_API_KEY=…` line to paste"
                           f" the line `dev` printed into; it has {len(placeholders)}")
        for start_of in EXPECT:
            if not any(line.startswith(start_of) for line in self.terminal):
                raise Mismatch(f"the \"another terminal\" block has no `{start_of}` line")
        if not any(line.startswith("orchestrator webhook sign ") for line in self.webhook):
            raise Mismatch("the webhook block has no `orchestrator webhook sign` line")
        # The URL the README's sample output shows, to compare with what `dev` prints.
        samples = [EXPORT.match(line) for lang, body in self.blocks if lang != "bash"
                   for line in body]
        urls = [m.group(2) for m in samples if m]
        if not urls:
            raise Mismatch("the Quickstart's sample output shows no `export` line")
        self.sample_url = urls[0]

    def ci_commands(self) -> list[str]:
        """The other commands of the first block, as CI must run them: without the
        bootstrap (`python3 -m pip install uv && `) and the comment."""
        out = []
        for line in self.front_door[1:]:
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            out.append(command.removeprefix("python3 -m pip install uv && "))
        return out


# --- processes ---------------------------------------------------------------------------

class Output:
    """A process's stdout (stderr merged), line by line, read on a thread of its own;
    `wait_for` consumes it under a deadline, echoing each line."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str,
                 hide: frozenset[str] = frozenset()) -> None:
        self.proc = proc
        self.label = label
        self.hide = hide  # lines not echoed
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put((time.monotonic(), raw.decode(errors="replace").rstrip("\r\n")))
        self.lines.put(None)

    def next_line(self, deadline: float, what: str) -> tuple[float, str]:
        left = deadline - time.monotonic()
        try:
            item = self.lines.get(timeout=max(left, 0.0))
        except queue.Empty:
            raise Mismatch(f"{self.label}: no {what} within the deadline") from None
        if item is None:
            self.lines.put(None)  # stays at the end
            code = self.proc.wait(timeout=STOP_DEADLINE)
            raise Mismatch(f"{self.label} ended (exit {code}) before {what}")
        self.seen.append(item[1])
        if item[1] not in self.hide:
            log(f"  {self.label} | {item[1]}")
        return item

    def wait_for(self, pattern: re.Pattern[str], timeout: float,
                 what: str) -> tuple[float, re.Match[str]]:
        deadline = time.monotonic() + timeout
        while True:
            at, line = self.next_line(deadline, what)
            match = pattern.search(line)
            if match:
                return at, match

    def drain(self) -> None:
        """Echo what is left, without waiting."""
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                return
            if item is None:
                self.lines.put(None)
                return
            log(f"  {self.label} | {item[1]}")


def start(argv: list[str], cwd: Path, env: dict[str, str],
          pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """A process group of its own, its stdin empty, its stdout and stderr one pipe."""
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, pass_fds=pass_fds)


def stop_group(proc: subprocess.Popen[bytes], label: str) -> bool:
    """Ctrl-C to the process group (what a terminal sends), then SIGKILL to whatever of
    the group is left. Whether Ctrl-C stopped it within the deadline."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    stopped = True
    try:
        proc.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        log(f"{label} did not stop on Ctrl-C within {STOP_DEADLINE:g} s: killed")
        stopped = False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return stopped


class Terminal:
    """"Another terminal": one `bash -euo pipefail` reading its script from a pipe, fed a
    line at a time (its stdin is empty, like a terminal nobody types into). A failing line
    ends it (-e): that is a mismatch."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        read, self._write = os.pipe()
        self.proc = start(["bash", "-euo", "pipefail", f"/dev/fd/{read}"], cwd, env,
                          pass_fds=(read,))
        os.close(read)
        self.out = Output(self.proc, "terminal", hide=frozenset({"", DONE}))

    def run(self, line: str, timing: Timings, name: str | None = None) -> str:
        log(f"$ {line}")
        began = time.monotonic()
        os.write(self._write, f"{line}\nprintf '\\n%s\\n' '{DONE}'\n".encode())
        printed = []
        deadline = began + COMMAND_DEADLINE
        while True:
            _, text = self.out.next_line(deadline, f"the end of `{line}`")
            if text == DONE:
                break
            if text.strip():
                printed.append(text)
        timing.add(name or line.split("#")[0].strip(), time.monotonic() - began)
        return "\n".join(printed)

    def close(self) -> None:
        os.close(self._write)
        stop_group(self.proc, "the terminal")


def expect(output: str, needles: tuple[str, ...], command: str) -> None:
    missing = [n for n in needles if n not in output]
    if missing:
        raise Mismatch(f"`{command}` printed no {', '.join(map(repr, missing))}:\n{output}")


# --- the walk ----------------------------------------------------------------------------

def fresh_clone(into: Path) -> Path:
    """A clone of this checkout, with its work tree's uncommitted changes over it (files
    changed, added and not ignored, deleted): what the other CI phases test."""
    clone = into / ROOT.name
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    changed = 0
    for name in filter(None, listed):
        source, target = ROOT / name, clone / name
        if not source.exists() and not source.is_symlink():
            if target.exists() or target.is_symlink():
                target.unlink()
                changed += 1
            continue
        if (target.is_file() and not source.is_symlink()
                and target.read_bytes() == source.read_bytes()):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        shutil.copy2(source, target, follow_symlinks=False)
        changed += 1
    if changed:
        log(f"the clone has the work tree's uncommitted changes: {changed} files")
    for leftover in (".venv", "infra/dynalite/node_modules"):
        if (clone / leftover).exists():
            raise Mismatch(f"the fresh clone has {leftover}")
    return clone


def newcomer_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in DROP and not k.startswith(DROP_PREFIXES)}


def ports_free(url: str) -> None:
    """The default ports `dev` takes: a clear message now beats a failed start later."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    for p in (port, 8001, 8002, 4566):
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", p)) == 0:
                raise Mismatch(f"port {p} is taken: `dev` needs it (stop what listens there)")


def check_ci_runs_the_rest(qs: Quickstart) -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    for command in qs.ci_commands():
        if command not in ci:
            raise Mismatch(f"the README's `{command}` is not what .ci/run runs")


def curl(terminal: Terminal, line: str, timing: Timings,
         name: str) -> tuple[int, dict[str, object]]:
    # `-w` prints the status after the body; the rest is the printed line as it is.
    output = terminal.run(f"{line} -w '\\n%{{http_code}}\\n'", timing, name)
    lines = output.splitlines()
    try:
        return int(lines[-1]), json.loads(lines[-2])
    except (IndexError, ValueError):
        raise Mismatch(f"the curl line did not answer a status and JSON:\n{output}") from None


def open_dashboard(link: str) -> str:
    """Follow `dev`'s one-time link as a browser would: it signs in (a cookie) and leads
    to the runs page, whose HTML this returns. A second use of the link is refused."""
    import http.cookiejar
    import urllib.error
    import urllib.request

    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with browser.open(link, timeout=10) as page:
        if not page.url.split("?")[0].endswith("/ui/runs"):
            raise Mismatch(f"the dashboard link led to {page.url}, not the runs page")
        html: str = page.read().decode()
    try:
        urllib.request.build_opener().open(link, timeout=10)
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            raise Mismatch(f"the spent link answered {exc.code}, not 401") from None
    else:
        raise Mismatch("the dashboard link signed in twice")
    return html


def walk(clone: Path, qs: Quickstart, timing: Timings) -> None:
    env = newcomer_env()
    ports_free(qs.sample_url)

    # 1. The front door, in the background.
    log(f"$ {qs.dev_command}")
    began = time.monotonic()
    dev = start(["bash", "-c", qs.dev_command], clone, env)
    out = Output(dev, "dev")
    terminal: Terminal | None = None
    try:
        at, _ = out.wait_for(BANNER, INSTALL_DEADLINE, "`emulator` line (the install first)")
        timing.add("install time: `python3 -m pip install uv && uv run --locked` (runtime"
                   " set; to the emulator's line)", at - began)
        _, m = out.wait_for(DASHBOARD, START_DEADLINE, "`dashboard` line (a sign-in link)")
        dashboard = m.group(1)
        at2, m = out.wait_for(EXPORT, START_DEADLINE, "`export ORCHESTRATOR_URL=...` line")
        export, url = m.group(1), m.group(2)
        if url != qs.sample_url:
            raise Mismatch(f"`dev` serves the API at {url}, the README shows {qs.sample_url}")
        _, m = out.wait_for(STARTED, START_DEADLINE, "`demo: started` line")
        run_id = m.group(1)
        at3, m = out.wait_for(OUTCOME, DEMO_DEADLINE, f"outcome of the demo run {run_id}")
        if m.group(2) != run_id or m.group(1) != "success":
            raise Mismatch(f"the demo ended {m.group(1)} ({m.group(2)}), not success")
        timing.add("dev: the stack up (from the emulator's line to the export line)", at2 - at)
        runs_page = open_dashboard(dashboard)
        if run_id not in runs_page:
            raise Mismatch(f"the dashboard's runs page does not list the demo run {run_id}")
        timing.add("dev: the demo run, to success", at3 - at2)

        # 2. Another terminal.
        terminal = Terminal(clone, env)
        for line in qs.terminal:
            name = None
            if PLACEHOLDER.match(line):
                line, name = export, "export … (the line `dev` printed)"
            output = terminal.run(line, timing, name)
            for start_of, needles in EXPECT.items():
                if line.startswith(start_of):
                    expect(output, needles, line)
                    if start_of == "orchestrator runs monthly-report":
                        expect(output, (run_id,), line)

        # 3. The webhook.
        signed = ""
        for line in qs.webhook:
            output = terminal.run(line, timing)
            if line.startswith("orchestrator webhook sign "):
                signed = output
        curls = [line for line in signed.splitlines() if line.startswith("curl ")]
        if len(curls) != 1:
            raise Mismatch(f"`orchestrator webhook sign` printed no single curl line:\n{signed}")
        status, body = curl(terminal, curls[0], timing, "the printed curl line")
        if status != 202 or body.get("duplicate") is not False:
            raise Mismatch(f"the first delivery answered {status} {body}, not 202 and"
                           ' "duplicate": false')
        webhook_run = str(body["run_id"])
        status, again = curl(terminal, curls[0], timing, "the printed curl line, again")
        if status != 200 or again.get("duplicate") is not True or again.get(
                "run_id") != webhook_run:
            raise Mismatch(f"the same delivery again answered {status} {again}, not 200,"
                           f' "duplicate": true and run {webhook_run}')
        for line in qs.after_webhook:
            output = terminal.run(line, timing)
            if line.startswith("orchestrator show monthly-report"):
                expect(output, (webhook_run, "webhook report-request"), line)
        began = time.monotonic()
    finally:
        if terminal is not None:
            terminal.close()
        stopped = stop_group(dev, "dev")
        out.drain()
    if not stopped:
        raise Mismatch("`dev` did not stop on Ctrl-C")
    timing.add("dev: stopped by Ctrl-C", time.monotonic() - began)

    # 4. The test command's install, on top of the runtime set.
    log("$ uv sync --locked --extra dev")
    began = time.monotonic()
    subprocess.run(["uv", "sync", "--locked", "--extra", "dev"], cwd=clone, env=env, check=True)
    timing.add("install time: `uv run --locked --extra dev` (adds the test tools)",
               time.monotonic() - began)


def main(argv: list[str]) -> int:
    keep = "--keep" in argv
    # Killed (a CI timeout): unwind, so that the process groups started here are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    timing = Timings()
    temp = Path(tempfile.mkdtemp(prefix="quickstart-"))
    try:
        qs = Quickstart((ROOT / "README.md").read_text())
        check_ci_runs_the_rest(qs)
        began = time.monotonic()
        clone = fresh_clone(temp)
        timing.add("git clone", time.monotonic() - began)
        log(f"in {clone}")
        walk(clone, qs, timing)
    except Mismatch as exc:
        log(f"\nquickstart FAILED: {exc}")
        return 1
    except subprocess.CalledProcessError as exc:
        log(f"\nquickstart FAILED: {exc}")
        return 1
    finally:
        timing.report()
        if keep:
            log(f"the clone is kept: {temp}")
        else:
            shutil.rmtree(temp, ignore_errors=True)
    log("quickstart: the README's commands did what it says")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
