"""`python -m infra.emulator --port 4566`: the emulator over HTTP until Ctrl-C."""

from infra.emulator.server import main

main()
