"""Request signing between the orchestrator and step functions.

The orchestrator signs every call with a shared secret; a function verifies it before
trusting the body. The scheme is deliberately small and stdlib-only, because both sides
import this module (the orchestrator's invoker to sign, the SDK to verify):

    X-Orchestrator-Timestamp: 1790000000
    X-Orchestrator-Signature: v1=<hex HMAC-SHA256(secret, b"1790000000." + body)>

Binding the timestamp into the MAC, and refusing timestamps outside a window, stops a
captured request from being replayed later. During a secret rotation the sender may put
several `v1=` values in the header (one per secret, space-separated) and the receiver may
accept several secrets; one match is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence

__all__ = [
    "ATTEMPT_HEADER",
    "IDEMPOTENCY_HEADER",
    "RUN_ID_HEADER",
    "SIGNATURE_HEADER",
    "STEP_HEADER",
    "TIMESTAMP_HEADER",
    "SignatureError",
    "sign",
    "signed_headers",
    "verify",
]

SIGNATURE_HEADER = "X-Orchestrator-Signature"
TIMESTAMP_HEADER = "X-Orchestrator-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
RUN_ID_HEADER = "X-Orchestrator-Run-Id"
STEP_HEADER = "X-Orchestrator-Step"
ATTEMPT_HEADER = "X-Orchestrator-Attempt"

SCHEME = "v1"
DEFAULT_TOLERANCE = 300.0
# More candidates than this is not a rotation, it is someone fishing for a match.
MAX_SIGNATURES = 8

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_V1_DIGEST = re.compile(r"[0-9a-f]{64}")


class SignatureError(Exception):
    """A request's signature headers are missing, malformed, stale or do not match."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for `body` sent at `timestamp` (unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def signed_headers(secret: str | Sequence[str], body: bytes, now: float) -> dict[str, str]:
    """Timestamp and signature headers for a request sent at `now`.

    With several secrets (rotation), the signature header carries one value per secret,
    so receivers that know either the old or the new secret accept the call."""
    secrets = _as_tuple(secret)
    timestamp = int(now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(sign(s, timestamp, body) for s in secrets),
    }


def verify(
    secrets: str | Sequence[str],
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> None:
    """Return if `signature` is a valid signature of `body` at `timestamp` under one of
    `secrets`, and the timestamp is within `tolerance` seconds of `now` (either side);
    raise `SignatureError` naming the first problem otherwise."""
    keys = _as_tuple(secrets)
    if timestamp is None or timestamp == "":
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header")
    if signature is None or signature.strip() == "":
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise SignatureError(f"malformed {TIMESTAMP_HEADER} header: expected unix seconds")
    sent_at = int(timestamp)
    skew = now - sent_at
    if skew > tolerance:
        raise SignatureError(
            f"stale {TIMESTAMP_HEADER}: {skew:.0f}s old, tolerance is {tolerance:.0f}s"
        )
    if -skew > tolerance:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {-skew:.0f}s in the future, tolerance is {tolerance:.0f}s"
        )
    candidates = _parse_signatures(signature)
    expected = [sign(key, sent_at, body) for key in keys]
    # Compare every pair, so the time taken does not tell which secret (if any) matched.
    matched = False
    for got in candidates:
        for want in expected:
            matched |= hmac.compare_digest(got.encode(), want.encode())
    if not matched:
        raise SignatureError("signature does not match the body and timestamp")


def _parse_signatures(header: str) -> list[str]:
    parts = header.split()
    if len(parts) > MAX_SIGNATURES:
        raise SignatureError(
            f"malformed {SIGNATURE_HEADER} header: {len(parts)} values, at most "
            f"{MAX_SIGNATURES} allowed"
        )
    found: list[str] = []
    for part in parts:
        scheme, sep, digest = part.partition("=")
        if not sep:
            raise SignatureError(f"malformed {SIGNATURE_HEADER} header: expected 'v1=<hex>'")
        if scheme != SCHEME:
            continue  # a future scheme sent alongside v1 during an upgrade
        if not _V1_DIGEST.fullmatch(digest):
            raise SignatureError(
                f"malformed {SIGNATURE_HEADER} header: v1 must be 64 lowercase hex digits"
            )
        found.append(part)
    if not found:
        raise SignatureError(f"malformed {SIGNATURE_HEADER} header: no v1 signature")
    return found


def _as_tuple(secrets: str | Sequence[str]) -> tuple[str, ...]:
    # A bare str is a Sequence[str] too; iterating it would use each character as a key.
    keys = (secrets,) if isinstance(secrets, str) else tuple(secrets)
    if not keys:
        raise ValueError("at least one signing secret is required")
    if any(not k for k in keys):
        raise ValueError("a signing secret must not be empty")
    return keys
