"""The chaos harness (issue 8): real processes, seeded faults, a checker over the rows,
the API and an effect ledger. `python -m tests.chaos.run --seed N`; see README.md here."""
