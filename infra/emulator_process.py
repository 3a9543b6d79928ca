"""The old home of the emulator's own process, kept for the import path and for
`python -m infra.emulator_process`: it is infra/emulator/process.py (the parent's side),
child.py (the process) and tuning.py (its cores and switch interval) now."""

from infra.emulator.child import main
from infra.emulator.process import (
    SOCKET_PATH_MAX,
    EmulatorProcess,
    Remote,
    StartFailed,
    unavailable,
)
from infra.emulator.tuning import SWITCH_INTERVAL, spare_core

__all__ = ["SOCKET_PATH_MAX", "SWITCH_INTERVAL", "EmulatorProcess", "Remote", "StartFailed",
           "spare_core", "unavailable"]

if __name__ == "__main__":
    main()
