"""What stacks deployed before look like, for the tests of their migration."""

from __future__ import annotations

from typing import Any

# The runs table's indexes before issue 22: the listing indexes ALL-projected under the
# names the KEYS_ONLY `by-workflow-keys` and `recent-keys` replaced.
RUNS_INDEXES_BEFORE_22: list[dict[str, Any]] = [
    {"IndexName": "by-workflow",
     "KeySchema": [{"AttributeName": "workflow", "KeyType": "HASH"},
                   {"AttributeName": "created_at", "KeyType": "RANGE"}],
     "Projection": {"ProjectionType": "ALL"}},
    {"IndexName": "active",
     "KeySchema": [{"AttributeName": "active", "KeyType": "HASH"},
                   {"AttributeName": "run_id", "KeyType": "RANGE"}],
     "Projection": {"ProjectionType": "KEYS_ONLY"}},
    {"IndexName": "recent",
     "KeySchema": [{"AttributeName": "listed", "KeyType": "HASH"},
                   {"AttributeName": "created_at", "KeyType": "RANGE"}],
     "Projection": {"ProjectionType": "ALL"}},
    {"IndexName": "wake",
     "KeySchema": [{"AttributeName": "wake_shard", "KeyType": "HASH"},
                   {"AttributeName": "wake_at", "KeyType": "RANGE"}],
     "Projection": {"ProjectionType": "KEYS_ONLY"}},
]
