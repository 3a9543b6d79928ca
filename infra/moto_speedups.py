"""The old home of the emulator's speed-ups, kept for the import path: they are in
infra/emulator/speedups/ now."""

from infra.emulator.speedups import (
    CAPABILITIES,
    CHECKED_MOTO,
    SPEEDUPS,
    Patch,
    Speedup,
    active,
    install,
    installed,
    uninstall,
)

__all__ = ["CAPABILITIES", "CHECKED_MOTO", "SPEEDUPS", "Patch", "Speedup", "active",
           "install", "installed", "uninstall"]
