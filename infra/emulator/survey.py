"""`python -m infra.emulator.survey` (or the old `python -m infra.capabilities`):
this install's fingerprint of every reach into moto the emulator declares, each marked
when it is not one a check knows (infra/README.md, "Capabilities"). Apart from
capabilities.py, which every speed-up imports: this module imports them all."""

from __future__ import annotations

from infra.emulator import inprocess, speedups
from infra.emulator.capabilities import fingerprint, resolve

__all__ = ["main"]


def main() -> None:
    """Print this install's fingerprint of every reach the emulator declares."""
    for capability in (*speedups.CAPABILITIES, *inprocess.CAPABILITIES):
        print(capability.name)
        for reach in capability.reaches:
            try:
                seen = fingerprint(resolve(reach.path))
            except LookupError as exc:
                seen = f"({exc})"
            mark = "" if not reach.known or seen in reach.known else "   <- not checked"
            print(f"  {reach.path}  {seen}{mark}")


if __name__ == "__main__":
    main()
