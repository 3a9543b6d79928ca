"""A script host in a process of its own (a test kills it): `python -m
tests.support.script_host_main PORT SECRET`."""

from __future__ import annotations

import sys

from functions.sdk.scripts import ScriptHost
from functions.sdk.serving import serve

if __name__ == "__main__":
    serve(ScriptHost(sys.argv[2]).app, "127.0.0.1", int(sys.argv[1]))
