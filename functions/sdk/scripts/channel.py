"""The private channel between a running script and its host: a TCP listener on
127.0.0.1 that the shim (`shim.py`) reaches with bash's own `/dev/tcp`, so a command
answered from the journal costs a connection, not a process.

Wire format, one request per connection, every field ended by a NUL byte:

    request:  TOKEN  CWD  ARGC  ARG...  [ENVC  NAME=VALUE...]   (env: `step` and `lock`)
    reply:    EXIT_CODE  STDOUT  STDERR

The token is the call's secret (another local process cannot speak for the script). A
connection hands its request to the workflow's own task through `requests` (the SDK's
operations live in that task's context) and writes the answer it gets back: requests
are answered one at a time, in the order they came. While a step's command runs, or
once the call has ended, a request is refused at once (exit status 2)."""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass, field

__all__ = ["Answer", "Channel", "Request"]

# Commands whose request carries the script's exported environment (they run a command).
WITH_ENV = frozenset({"step", "lock"})
MAX_REQUEST = 16 * 1024 * 1024


@dataclass(frozen=True)
class Answer:
    code: int
    stdout: str = ""
    stderr: str = ""

    def encode(self) -> bytes:
        parts = (str(self.code), self.stdout.replace("\0", ""), self.stderr.replace("\0", ""))
        return b"".join(p.encode("utf-8", "replace") + b"\0" for p in parts)


@dataclass
class Request:
    args: list[str]
    cwd: str
    env: dict[str, str] | None
    answer: asyncio.Future[Answer] = field(repr=False)


class _Incomplete(Exception):
    pass


def _decode(data: bytes) -> tuple[str, str, list[str], dict[str, str] | None]:
    """(token, cwd, args, env) of a whole request; _Incomplete if more is to come."""
    fields = data.split(b"\0")
    fields.pop()  # what follows the last NUL: not a whole field yet
    words = [f.decode("utf-8", "surrogateescape") for f in fields]
    if len(words) < 3:
        raise _Incomplete
    token, cwd, argc = words[0], words[1], int(words[2])
    end = 3 + argc
    if len(words) < end:
        raise _Incomplete
    args = words[3:end]
    if not args or args[0] not in WITH_ENV:
        return token, cwd, args, None
    if len(words) <= end:
        raise _Incomplete
    envc = int(words[end])
    if len(words) < end + 1 + envc:
        raise _Incomplete
    env = {}
    for item in words[end + 1:end + 1 + envc]:
        name, _, value = item.partition("=")
        env[name] = value
    return token, cwd, args, env


class Channel:
    """One call's listener. `busy` names the step whose command runs (requests are then
    refused); `requests` is what the workflow's task takes requests from."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.requests: asyncio.Queue[Request] = asyncio.Queue()
        self.busy: str | None = None
        self.closed = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pending: set[asyncio.Future[Answer]] = set()

    async def open(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def close(self) -> None:
        """Refuse what comes from now on, and answer what waits (the call has ended)."""
        self.closed = True
        for fut in self._pending:
            if not fut.done():
                fut.set_result(Answer(70, "", "orchestrator: the call ended before this"
                                              " command was answered\n"))
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answer = await self._answer(reader)
            writer.write(answer.encode())
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the script was killed mid-request: nobody to answer
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> Answer:
        data = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return Answer(2, "", "orchestrator: incomplete request\n")
            data += chunk
            if len(data) > MAX_REQUEST:
                return Answer(2, "", "orchestrator: request too large\n")
            try:
                token, cwd, args, env = _decode(data)
                break
            except _Incomplete:
                continue
            except ValueError:
                return Answer(2, "", "orchestrator: malformed request\n")
        if not hmac.compare_digest(token, self.token):
            return Answer(2, "", "orchestrator: this channel belongs to another call\n")
        what = " ".join(args[:2])
        if self.closed:
            return Answer(2, "", f"orchestrator {what}: refused: the script's call has"
                                 " ended\n")
        if self.busy is not None:
            return Answer(2, "", f"orchestrator {what}: refused: the command of step "
                                 f"{self.busy!r} is running, and durable commands belong to"
                                 " the script itself, not to a step's command\n")
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending.add(fut)
        try:
            await self.requests.put(Request(args, cwd, env, fut))
            return await fut
        finally:
            self._pending.discard(fut)
