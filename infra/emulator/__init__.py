"""The embedded AWS emulator: moto, made linearizable for DynamoDB and sped up where it
repeats itself, served over HTTP and, to the clients of the process that hosts it,
without a socket. Its files, in the order a request meets them:

- `server.py`: `Emulator`, moto's server app over HTTP from a daemon thread
  (`python -m infra.emulator`);
- `dynamodb_lock.py`: one DynamoDB request at a time (`SerializeDynamoDB`, the lock);
- `inprocess.py`: `InProcess`, this process's clients calling moto without a socket
  (`Emulator.attach`);
- `process.py` and `child.py`: `EmulatorProcess`, the emulator in a process of its own
  (`orchestrator dev`), and that process;
- `tuning.py`: the knobs of a process that hosts it (collector, cores, switch interval);
- `speedups/`: work moto repeats on every request, done once, a module per part of moto;
- `capabilities.py`: each reach inside moto and botocore, checked at start-up, with its
  fallback.

    with Emulator() as emulator:
        clients = emulator.attach(make_clients(Settings(endpoint_url=emulator.url)))
"""

from __future__ import annotations

from infra.emulator.dynamodb_lock import SerializeDynamoDB
from infra.emulator.inprocess import CAPABILITIES, InProcess
from infra.emulator.server import Emulator, self_check
from infra.emulator.tuning import calm_collector, keep_to_one_core

__all__ = ["CAPABILITIES", "Emulator", "InProcess", "SerializeDynamoDB", "calm_collector",
           "keep_to_one_core", "self_check"]
