"""The old home of the emulator's capability checks, kept for the import path and for
`python -m infra.capabilities` (this install's fingerprints): they are in
infra/emulator/capabilities.py now."""

from infra.emulator.capabilities import (
    Capability,
    Reach,
    Verdict,
    check,
    facts,
    fingerprint,
    forget,
    record,
    report,
    resolve,
    versions,
)
from infra.emulator.survey import main

__all__ = ["Capability", "Reach", "Verdict", "check", "facts", "fingerprint", "forget",
           "record", "report", "resolve", "versions"]

if __name__ == "__main__":
    main()
