"""The emulator's own process (process.py starts it: `python -m infra.emulator.child`).

It serves moto over HTTP at the emulator's URL, for every other process, and its parent's
clients over a Unix domain socket (the authentication key in its environment): each
request, read off the socket, is answered through the in-process path (inprocess.py), the
same lock, speed-ups and answers as `Emulator.attach`'s. A request moto fails on (an
exception, not an AWS error) is answered 500, as moto's server answers it, and logged.
It prints `ready URL FACTS` (or `failed WHY`) once, ignores Ctrl-C and SIGTERM sent to
the process group, and ends when its standard input closes: when the parent stops it, or
dies however it dies."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener
from typing import Any

from botocore.awsrequest import AWSPreparedRequest
from botocore.compat import HTTPHeaders

from infra.emulator.capabilities import facts as emulator_facts
from infra.emulator.inprocess import DIRECT, IN_PROCESS, IN_PROCESS_WSGI, InProcess, check_once
from infra.emulator.process import AUTHKEY_VARIABLE, FAILED, READY
from infra.emulator.server import Emulator
from infra.emulator.tuning import calm_collector

__all__ = ["main"]

log = logging.getLogger("orchestrator.emulator")


def _serve(emulator: Emulator, conn: Connection) -> None:
    """Answer one parent thread's requests, in order, until it goes away."""
    handlers: dict[tuple[str, str], Any] = {}
    with conn:
        while True:
            try:
                service, region, method, url, headers, body = conn.recv()
            except (EOFError, OSError):
                return
            handler = handlers.get((service, region))
            if handler is None:
                handler = handlers[(service, region)] = emulator.modelled(
                    _handler(emulator, service, region))
            request = AWSPreparedRequest(method, url, HTTPHeaders(), body,
                                         stream_output=False)
            for name, value in headers:
                request.headers[name] = value
            try:
                answer = handler(request)
                assert answer is not None
                reply = (answer.status_code, dict(answer.headers), answer.content)
            except Exception as exc:  # what moto's server answers for one: a 500
                log.exception("the emulator failed on %s %s", service, url)
                reply = (500, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(
                    {"__type": "InternalFailure",
                     "message": f"the emulator failed: {type(exc).__name__}: {exc}"}
                ).encode())
            try:
                conn.send(reply)
            except OSError:
                return


def _handler(emulator: Emulator, service: str, region: str) -> InProcess:
    handler = InProcess(emulator._dispatcher, emulator.url, service, region)
    if handler.handler is not None:
        if check_once(IN_PROCESS, service, handler.probe) is not None:
            handler.handler = None  # moto's server app answers it, as over HTTP
    else:
        check_once(IN_PROCESS_WSGI, "wsgi", lambda: None)
    return handler


def _start(args: argparse.Namespace) -> tuple[Emulator, Listener]:
    """The emulator, on its port, and the socket's listener, accepting."""
    if args.core is not None:  # before any thread starts: each takes it on
        os.sched_setaffinity(0, {args.core})
    authkey = bytes.fromhex(os.environ.pop(AUTHKEY_VARIABLE))
    emulator = Emulator(args.host, args.port).start()
    listener = Listener(args.socket, "AF_UNIX", authkey=authkey)

    def accept() -> None:
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError, AuthenticationError):
                continue  # a caller that failed the handshake, or went away during it
            threading.Thread(target=_serve, args=(emulator, conn), daemon=True).start()

    threading.Thread(target=accept, name="emulator-socket", daemon=True).start()
    for service in DIRECT:  # their checks run now, for the facts
        _handler(emulator, service, "us-east-1")
    calm_collector()
    return emulator, listener


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.emulator.child")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--core", type=int, help="keep to this core")
    args = parser.parse_args(argv)
    # Ctrl-C (and a SIGTERM sent to the process group, as `timeout` sends it) reaches
    # this process too: the parent decides when it ends, by closing the standard input
    # once its own threads have stopped calling.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        emulator, listener = _start(args)
        facts = emulator_facts()
    except Exception as exc:  # said to the parent; the traceback follows
        print(f"{FAILED}{type(exc).__name__}: {exc}", flush=True)
        raise
    print(f"{READY}{emulator.url} {facts}", flush=True)
    # The parent reads no more of it: anything printed later must not fill the pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.stdin.read()  # until the parent closes it (or dies)
    try:
        listener.close()  # it removes the socket...
    except FileNotFoundError:
        pass  # ... which a parent that exited without stopping it removed already
    emulator.stop()


if __name__ == "__main__":
    main()
