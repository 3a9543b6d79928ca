"""Signing and verification of step calls (pure, no I/O)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from functions.sdk.signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    sign,
    signed_headers,
    verify,
)

SECRET = "whsec-test-1"
NOW = 1_790_000_000.0
BODY = b'{"input":{"month":"2026-10"},"run":{"run_id":"r1"}}'


def headers_for(secret: str = SECRET, body: bytes = BODY, at: float = NOW) -> tuple[str, str]:
    h = signed_headers(secret, body, at)
    return h[TIMESTAMP_HEADER], h[SIGNATURE_HEADER]


def test_sign_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), b"1790000000." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, 1_790_000_000, BODY) == "v1=" + expected


def test_signed_headers_carry_whole_seconds() -> None:
    h = signed_headers(SECRET, BODY, NOW + 0.9)
    assert h[TIMESTAMP_HEADER] == "1790000000"
    assert h[SIGNATURE_HEADER] == sign(SECRET, 1_790_000_000, BODY)


def test_valid_signature_verifies() -> None:
    ts, sig = headers_for()
    verify([SECRET], ts, sig, BODY, now=NOW + 5)


def test_a_single_secret_string_is_one_secret_not_its_characters() -> None:
    ts, sig = headers_for()
    verify(SECRET, ts, sig, BODY, now=NOW)
    forged_ts, forged_sig = headers_for(secret="w")  # one character of SECRET
    with pytest.raises(SignatureError, match="does not match"):
        verify(SECRET, forged_ts, forged_sig, BODY, now=NOW)


def test_tampered_body_is_rejected() -> None:
    ts, sig = headers_for()
    with pytest.raises(SignatureError, match="does not match"):
        verify([SECRET], ts, sig, BODY.replace(b"2026-10", b"2026-11"), now=NOW)


def test_wrong_secret_is_rejected() -> None:
    ts, sig = headers_for(secret="someone-else")
    with pytest.raises(SignatureError, match="does not match"):
        verify([SECRET], ts, sig, BODY, now=NOW)


def test_moving_the_timestamp_breaks_the_signature() -> None:
    # An old request replayed with a fresh timestamp header must not verify.
    _, sig = headers_for(at=NOW - 3600)
    with pytest.raises(SignatureError, match="does not match"):
        verify([SECRET], str(int(NOW)), sig, BODY, now=NOW)


def test_stale_timestamp_is_rejected_even_with_a_valid_signature() -> None:
    ts, sig = headers_for(at=NOW - 301)
    with pytest.raises(SignatureError, match="stale"):
        verify([SECRET], ts, sig, BODY, now=NOW, tolerance=300)
    verify([SECRET], *headers_for(at=NOW - 300), BODY, now=NOW, tolerance=300)


def test_future_timestamp_is_rejected() -> None:
    ts, sig = headers_for(at=NOW + 301)
    with pytest.raises(SignatureError, match="future"):
        verify([SECRET], ts, sig, BODY, now=NOW, tolerance=300)
    verify([SECRET], *headers_for(at=NOW + 300), BODY, now=NOW, tolerance=300)


@pytest.mark.parametrize(
    ("timestamp", "signature", "reason"),
    [
        (None, "v1=" + "0" * 64, "missing X-Orchestrator-Timestamp"),
        ("", "v1=" + "0" * 64, "missing X-Orchestrator-Timestamp"),
        ("1790000000", None, "missing X-Orchestrator-Signature"),
        ("1790000000", "   ", "missing X-Orchestrator-Signature"),
        ("1790000000.5", "v1=" + "0" * 64, "malformed X-Orchestrator-Timestamp"),
        ("-1790000000", "v1=" + "0" * 64, "malformed X-Orchestrator-Timestamp"),
        (" 1790000000", "v1=" + "0" * 64, "malformed X-Orchestrator-Timestamp"),
        ("1790000000", "deadbeef", "malformed X-Orchestrator-Signature"),
        ("1790000000", "v1=xyz", "malformed X-Orchestrator-Signature"),
        ("1790000000", "v1=" + "A" * 64, "malformed X-Orchestrator-Signature"),
        ("1790000000", "v0=" + "0" * 64, "no v1 signature"),
        ("1790000000", " ".join(["v1=" + "0" * 64] * 9), "at most 8"),
    ],
)
def test_missing_or_malformed_headers_are_named(
    timestamp: str | None, signature: str | None, reason: str
) -> None:
    with pytest.raises(SignatureError) as caught:
        verify([SECRET], timestamp, signature, BODY, now=NOW)
    assert reason in caught.value.reason


def test_rotation_receiver_accepts_old_and_new_secret() -> None:
    for sender in ("old-secret", "new-secret"):
        ts, sig = headers_for(secret=sender)
        verify(["new-secret", "old-secret"], ts, sig, BODY, now=NOW)


def test_rotation_sender_sends_one_signature_per_secret() -> None:
    h = signed_headers(["new-secret", "old-secret"], BODY, NOW)
    values = h[SIGNATURE_HEADER].split(" ")
    assert values == [sign(s, int(NOW), BODY) for s in ("new-secret", "old-secret")]
    # A receiver that only knows either secret accepts the call.
    verify(["old-secret"], h[TIMESTAMP_HEADER], h[SIGNATURE_HEADER], BODY, now=NOW)
    verify(["new-secret"], h[TIMESTAMP_HEADER], h[SIGNATURE_HEADER], BODY, now=NOW)
    with pytest.raises(SignatureError):
        verify(["third-secret"], h[TIMESTAMP_HEADER], h[SIGNATURE_HEADER], BODY, now=NOW)


def test_unknown_schemes_next_to_v1_are_ignored() -> None:
    ts, sig = headers_for()
    verify([SECRET], ts, f"v2=future-scheme {sig}", BODY, now=NOW)


def test_no_secret_is_a_configuration_error() -> None:
    ts, sig = headers_for()
    with pytest.raises(ValueError, match="at least one"):
        verify([], ts, sig, BODY, now=NOW)
    with pytest.raises(ValueError, match="empty"):
        verify([""], ts, sig, BODY, now=NOW)
