"""Verification and signing of incoming webhook deliveries (pure, real HMAC, no I/O)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import uuid
from collections.abc import Callable, Mapping

import pytest
from starlette.datastructures import Headers

from orchestrator.errors import OrchestratorError
from orchestrator.webhook_signing import (
    MAX_HEADER_BYTES,
    SCHEMES,
    Delivery,
    SignatureError,
    sign,
    validate_secrets,
    verify,
)

NOW = 1_790_000_000.0
TOLERANCE = 300.0
SECRET = "current-secret"
OLD_SECRET = "previous-secret"
BODY = b'{"id": "evt_1NqZ", "type": "invoice.paid", "data": {"amount": 4200}}'
SIGNED = ("github", "standard", "stripe")
TIMESTAMPED = ("standard", "stripe")
CODES = {
    "missing_signature",
    "malformed_signature",
    "bad_signature",
    "stale_timestamp",
    "future_timestamp",
    "missing_delivery_id",
}
SIGNATURE_HEADER = {
    "github": "X-Hub-Signature-256",
    "standard": "webhook-signature",
    "stripe": "Stripe-Signature",
}


def check(
    scheme: str,
    headers: Mapping[str, str],
    body: bytes = BODY,
    secrets: tuple[str, ...] = (SECRET,),
    now: float = NOW,
) -> Delivery:
    return verify(scheme, secrets, headers, body, now=now, tolerance=TOLERANCE)


def refused(
    scheme: str,
    headers: dict[str, str],
    body: bytes = BODY,
    secrets: tuple[str, ...] = (SECRET,),
    now: float = NOW,
) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        check(scheme, headers, body, secrets, now)
    return caught.value


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


# --- round trips and known answers ------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sign_then_verify_round_trips(scheme: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW + 0.9)
    delivery = check(scheme, headers)
    assert delivery.delivery_id
    if scheme in TIMESTAMPED:
        assert delivery.timestamp == 1_790_000_000.0  # whole seconds, truncated
    else:
        assert delivery.timestamp is None


@pytest.mark.parametrize("scheme", ["github", "standard", "none"])
def test_sign_carries_the_given_delivery_id(scheme: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW, delivery_id="abc-123")
    assert check(scheme, headers).delivery_id == "abc-123"


def test_sign_generates_fresh_delivery_ids() -> None:
    github = {sign("github", SECRET, BODY, now=NOW)["X-GitHub-Delivery"] for _ in range(3)}
    assert len(github) == 3
    assert all(uuid.UUID(d).version == 4 for d in github)
    standard = {sign("standard", SECRET, BODY, now=NOW)["webhook-id"] for _ in range(3)}
    assert len(standard) == 3
    assert all(d.startswith("msg_") for d in standard)
    none = sign("none", SECRET, BODY, now=NOW)
    assert list(none) == ["Idempotency-Key"]
    assert uuid.UUID(none["Idempotency-Key"]).version == 4


def test_standard_webhooks_spec_vector() -> None:
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    body = b'{"test": 2432232314}'
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    delivery = check("standard", headers, body, (secret,), now=1614265330)
    assert delivery == Delivery("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330.0)
    produced = sign("standard", secret, body, now=1614265330, delivery_id=headers["webhook-id"])
    assert produced == headers


def test_github_documented_example() -> None:
    headers = {
        "X-Hub-Signature-256": (
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        ),
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }
    secret = "It's a Secret to Everybody"
    delivery = check("github", headers, b"Hello, World!", (secret,))
    assert delivery == Delivery("72d3162e-cc78-11e3-81ab-4c9367dc0958", None)
    produced = sign("github", secret, b"Hello, World!", now=NOW, delivery_id="x")
    assert produced["X-Hub-Signature-256"] == headers["X-Hub-Signature-256"]


def test_stripe_signature_is_hex_hmac_over_t_dot_body() -> None:
    mac = hmac_sha256(SECRET.encode(), b"1790000000." + BODY).hex()
    assert sign("stripe", SECRET, BODY, now=NOW) == {"Stripe-Signature": f"t=1790000000,v1={mac}"}


# --- tampering, wrong secrets, rotation ---------------------------------------------------


@pytest.mark.parametrize("scheme", SIGNED)
@pytest.mark.parametrize(
    "tampered",
    [
        BODY.replace(b"4200", b"4201"),
        json.dumps(json.loads(BODY), separators=(",", ":")).encode(),  # re-serialized
        BODY + b"\n",
        b"",
    ],
    ids=["changed", "reserialized", "trailing-newline", "empty"],
)
def test_tampered_body_is_rejected(scheme: str, tampered: bytes) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    assert refused(scheme, headers, tampered).code == "bad_signature"


@pytest.mark.parametrize("scheme", SIGNED)
def test_wrong_secret_is_rejected(scheme: str) -> None:
    headers = sign(scheme, "someone-else", BODY, now=NOW)
    error = refused(scheme, headers)
    assert error.code == "bad_signature"
    assert error.message == "no signature matches the body under any secret"


def test_standard_id_and_timestamp_are_signed_too() -> None:
    headers = sign("standard", SECRET, BODY, now=NOW)
    assert refused("standard", {**headers, "webhook-id": "msg_other"}).code == "bad_signature"
    moved = {**headers, "webhook-timestamp": str(int(NOW) - 1)}
    assert refused("standard", moved).code == "bad_signature"


@pytest.mark.parametrize("scheme", SIGNED)
def test_rotation_either_active_secret_verifies_and_a_third_does_not(scheme: str) -> None:
    for signer in (OLD_SECRET, SECRET):
        headers = sign(scheme, signer, BODY, now=NOW)
        check(scheme, headers, secrets=(OLD_SECRET, SECRET))
        check(scheme, headers, secrets=(SECRET, OLD_SECRET))
    retired = sign(scheme, "retired-secret", BODY, now=NOW)
    assert refused(scheme, retired, secrets=(OLD_SECRET, SECRET)).code == "bad_signature"


@pytest.mark.parametrize("scheme", SIGNED)
def test_a_bare_string_secret_is_one_secret_not_its_characters(scheme: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    verify(scheme, SECRET, headers, BODY, now=NOW)
    forged = sign(scheme, SECRET[0], BODY, now=NOW)
    with pytest.raises(SignatureError, match="no signature matches"):
        verify(scheme, SECRET, forged, BODY, now=NOW)


@pytest.mark.parametrize(
    ("scheme", "secrets", "problem"),
    [
        ("github", (), "1 to 2 secrets, got 0"),
        ("stripe", ("a", "b", "c"), "1 to 2 secrets, got 3"),
        ("standard", ("",), "non-empty"),
        ("standard", ("whsec_not base64!",), "whsec_ secret must be base64"),
        ("standard", ("whsec_",), "must not be empty after the prefix"),
        ("github", ("\ud800",), "UTF-8"),
        ("gitlab", ("a",), "unknown webhook scheme 'gitlab'"),
    ],
)
def test_secret_and_scheme_mistakes_are_configuration_errors(
    scheme: str, secrets: tuple[str, ...], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        validate_secrets(scheme, secrets)
    with pytest.raises(ValueError, match=problem):
        verify(scheme, secrets, {}, BODY, now=NOW)
    for secret in secrets:
        key_material = secret.removeprefix("whsec_")
        if len(key_material) > 1:
            assert key_material not in str(caught.value)


def test_none_takes_any_number_of_secrets() -> None:
    validate_secrets("none", ())
    validate_secrets("none", ("a", "b", "c"))


# --- secrets' forms ------------------------------------------------------------------------


def test_standard_whsec_secret_key_is_the_decoded_bytes() -> None:
    raw_key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(raw_key).decode()
    headers = sign("standard", secret, BODY, now=NOW, delivery_id="msg_1")
    expected = hmac_sha256(raw_key, b"msg_1.1790000000." + BODY)
    assert headers["webhook-signature"] == "v1," + base64.b64encode(expected).decode()
    check("standard", headers, secrets=(secret,))
    # The same text without decoding is a different key.
    as_text = hmac_sha256(secret.encode(), b"msg_1.1790000000." + BODY)
    forged = {**headers, "webhook-signature": "v1," + base64.b64encode(as_text).decode()}
    assert refused("standard", forged, secrets=(secret,)).code == "bad_signature"


def test_standard_plain_secret_key_is_its_utf8_bytes() -> None:
    secret = "pässwörd"
    headers = sign("standard", secret, BODY, now=NOW, delivery_id="msg_1")
    expected = hmac_sha256(secret.encode("utf-8"), b"msg_1.1790000000." + BODY)
    assert headers["webhook-signature"] == "v1," + base64.b64encode(expected).decode()


def test_stripe_whsec_secret_is_used_as_text_not_decoded() -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    headers = sign("stripe", secret, BODY, now=NOW)
    expected = hmac_sha256(secret.encode(), b"1790000000." + BODY).hex()
    assert headers["Stripe-Signature"].endswith(f"v1={expected}")
    check("stripe", headers, secrets=(secret,))


# --- timestamps --------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", TIMESTAMPED)
@pytest.mark.parametrize(
    ("offset", "code"),
    [
        (0.0, None),
        (TOLERANCE, None),  # exactly at the edge, in the past
        (-TOLERANCE, None),  # exactly at the edge, in the future
        (TOLERANCE + 0.5, "stale_timestamp"),
        (TOLERANCE + 1, "stale_timestamp"),
        (-TOLERANCE - 0.5, "future_timestamp"),
        (-TOLERANCE - 1, "future_timestamp"),
        (86_400 * 365, "stale_timestamp"),
    ],
)
def test_timestamp_window(scheme: str, offset: float, code: str | None) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    if code is None:
        check(scheme, headers, now=NOW + offset)
        return
    error = refused(scheme, headers, now=NOW + offset)
    assert error.code == code
    assert ("old" if code == "stale_timestamp" else "in the future") in error.message


def test_github_has_no_timestamp_so_no_window() -> None:
    headers = sign("github", SECRET, BODY, now=NOW)
    assert check("github", headers, now=NOW + 86_400 * 365).timestamp is None


def test_zero_tolerance_accepts_only_the_same_second() -> None:
    headers = sign("standard", SECRET, BODY, now=NOW)
    verify("standard", [SECRET], headers, BODY, now=NOW, tolerance=0)
    with pytest.raises(SignatureError, match="old"):
        verify("standard", [SECRET], headers, BODY, now=NOW + 1, tolerance=0)


@pytest.mark.parametrize("tolerance", [-1.0, float("nan")])
def test_negative_or_nan_tolerance_is_a_programming_error(tolerance: float) -> None:
    headers = sign("standard", SECRET, BODY, now=NOW)
    with pytest.raises(ValueError, match="tolerance"):
        verify("standard", [SECRET], headers, BODY, now=NOW, tolerance=tolerance)


def test_non_finite_now_is_a_programming_error() -> None:
    headers = sign("standard", SECRET, BODY, now=NOW)
    with pytest.raises(ValueError, match="finite"):
        verify("standard", [SECRET], headers, BODY, now=float("nan"))


# --- missing and malformed headers -------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "dropped", "code"),
    [
        ("github", "X-Hub-Signature-256", "missing_signature"),
        ("github", "X-GitHub-Delivery", "missing_delivery_id"),
        ("standard", "webhook-signature", "missing_signature"),
        ("standard", "webhook-timestamp", "missing_signature"),
        ("standard", "webhook-id", "missing_delivery_id"),
        ("stripe", "Stripe-Signature", "missing_signature"),
    ],
)
def test_missing_header_is_rejected(scheme: str, dropped: str, code: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    del headers[dropped]
    error = refused(scheme, headers)
    assert error.code == code
    assert dropped in error.message


@pytest.mark.parametrize("scheme", SIGNED)
def test_no_headers_at_all_is_a_missing_signature(scheme: str) -> None:
    assert refused(scheme, {}).code == "missing_signature"


def test_github_sha1_only_delivery_names_the_header_it_lacks() -> None:
    sha1 = hmac.new(SECRET.encode(), BODY, hashlib.sha1).hexdigest()
    headers = {"X-Hub-Signature": f"sha1={sha1}", "X-GitHub-Delivery": "d1"}
    error = refused("github", headers)
    assert error.code == "missing_signature"
    assert "SHA-1 X-Hub-Signature is not accepted" in error.message


def test_empty_delivery_id_is_missing() -> None:
    headers = {**sign("github", SECRET, BODY, now=NOW), "X-GitHub-Delivery": "  "}
    assert refused("github", headers).code == "missing_delivery_id"


HEX = "ab" * 32
B64 = base64.b64encode(b"\x01" * 32).decode()


@pytest.mark.parametrize(
    ("scheme", "header", "value", "problem"),
    [
        ("github", "X-Hub-Signature-256", "", "expected 'sha256=<hex>'"),
        ("github", "X-Hub-Signature-256", f"sha1={HEX}", "expected 'sha256=<hex>'"),
        ("github", "X-Hub-Signature-256", HEX, "expected 'sha256=<hex>'"),
        ("github", "X-Hub-Signature-256", "sha256=", "64 hex digits"),
        ("github", "X-Hub-Signature-256", f"sha256={HEX[:-1]}", "64 hex digits"),
        ("github", "X-Hub-Signature-256", f"sha256={HEX[:-1]}g", "64 hex digits"),
        ("github", "X-Hub-Signature-256", f"sha256={HEX} ", "64 hex digits"),
        ("github", "X-GitHub-Delivery", "d1\r\nX-Injected: 1", "printable ASCII"),
        ("standard", "webhook-signature", "", "empty"),
        ("standard", "webhook-signature", "   ", "empty"),
        ("standard", "webhook-signature", B64, "expected space-separated"),
        ("standard", "webhook-signature", f",{B64}", "expected space-separated"),
        ("standard", "webhook-signature", "v1,not*base64", "not base64"),
        ("standard", "webhook-signature", "v1,AAA", "not base64"),  # bad padding
        ("standard", "webhook-signature", "v1,", "not a 32-byte"),
        ("standard", "webhook-signature", "v1," + base64.b64encode(b"x" * 20).decode(), "32-byte"),
        ("standard", "webhook-signature", f"v1a,{B64}", "no v1 signature"),
        ("standard", "webhook-signature", " ".join([f"v1,{B64}"] * 9), "9 v1 signatures"),
        ("standard", "webhook-timestamp", "", "empty"),
        ("standard", "webhook-timestamp", "soon", "expected unix seconds"),
        ("standard", "webhook-timestamp", "1790000000.5", "expected unix seconds"),
        ("standard", "webhook-timestamp", "-1790000000", "expected unix seconds"),
        ("standard", "webhook-timestamp", "1_790_000_000", "expected unix seconds"),
        ("standard", "webhook-timestamp", "١٧٩٠٠٠٠٠٠٠", "expected unix seconds"),
        ("standard", "webhook-timestamp", "1" * 13, "expected unix seconds"),
        ("standard", "webhook-id", "msg\x001", "printable ASCII"),
        ("standard", "webhook-id", "msg_é", "printable ASCII"),
        ("stripe", "Stripe-Signature", "", "empty"),
        ("stripe", "Stripe-Signature", "garbage", "expected 't=<unix>,v1=<hex>'"),
        ("stripe", "Stripe-Signature", f"t=1790000000,{HEX}", "expected 't=<unix>,v1=<hex>'"),
        ("stripe", "Stripe-Signature", f"t=1790000000,v1={HEX},", "expected 't=<unix>"),
        ("stripe", "Stripe-Signature", f"v1={HEX}", "expected one t=, found 0"),
        ("stripe", "Stripe-Signature", f"t=1790000000,t=1790000001,v1={HEX}", "found 2"),
        ("stripe", "Stripe-Signature", f"t=now,v1={HEX}", "expected unix seconds"),
        ("stripe", "Stripe-Signature", f"t=,v1={HEX}", "expected unix seconds"),
        ("stripe", "Stripe-Signature", "t=1790000000", "no v1 signature"),
        ("stripe", "Stripe-Signature", f"t=1790000000,v0={HEX}", "no v1 signature"),
        ("stripe", "Stripe-Signature", "t=1790000000,v1=", "64 hex digits"),
        ("stripe", "Stripe-Signature", f"t=1790000000,v1={HEX[:-2]}", "64 hex digits"),
        ("stripe", "Stripe-Signature", f"t=1790000000,v1={B64}", "64 hex digits"),
    ],
)
def test_malformed_header_is_rejected(scheme: str, header: str, value: str, problem: str) -> None:
    headers = {**sign(scheme, SECRET, BODY, now=NOW), header: value}
    error = refused(scheme, headers)
    assert error.code == "malformed_signature"
    assert error.message.startswith(f"malformed {header}")
    assert problem in error.message


def _padded_standard(size: int) -> dict[str, str]:
    headers = sign("standard", SECRET, BODY, now=NOW)
    # Entries of another version are skipped, so they pad the header without changing it.
    base = headers["webhook-signature"] + " v1a,"
    headers["webhook-signature"] = base + "x" * (size - len(base))
    return headers


def test_header_of_exactly_8_kib_is_accepted() -> None:
    headers = _padded_standard(MAX_HEADER_BYTES)
    assert len(headers["webhook-signature"].encode()) == MAX_HEADER_BYTES
    check("standard", headers)


@pytest.mark.parametrize("scheme", SIGNED)
def test_oversized_header_is_rejected(scheme: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    name = SIGNATURE_HEADER[scheme]
    headers[name] += " " * (MAX_HEADER_BYTES + 1 - len(headers[name]))
    error = refused(scheme, headers)
    assert error.code == "malformed_signature"
    assert f"{MAX_HEADER_BYTES + 1} bytes, at most {MAX_HEADER_BYTES}" in error.message


def test_oversized_is_counted_in_bytes_not_characters() -> None:
    headers = {"webhook-id": "é" * (MAX_HEADER_BYTES // 2 + 1)}
    error = refused("none", headers)
    assert f"{MAX_HEADER_BYTES + 2} bytes" in error.message


def test_header_sent_twice_with_different_values_is_rejected() -> None:
    headers = sign("standard", SECRET, BODY, now=NOW)
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"webhook-signature", b"v1," + B64.encode()))
    with pytest.raises(SignatureError, match="sent 2 times with different values"):
        verify("standard", [SECRET], Headers(raw=raw), BODY, now=NOW)
    mixed_case = {**headers, "Webhook-Signature": "v1," + B64}
    assert refused("standard", mixed_case).code == "malformed_signature"
    # A repeat of the same value is harmless.
    check("standard", {**headers, "WEBHOOK-SIGNATURE": headers["webhook-signature"]})


# --- several signatures, header casing ----------------------------------------------------


def test_standard_accepts_any_one_matching_signature_in_the_list() -> None:
    good = sign("standard", SECRET, BODY, now=NOW, delivery_id="msg_1")
    wrong = sign("standard", "other", BODY, now=NOW, delivery_id="msg_1")
    for order in (
        f"{wrong['webhook-signature']} {good['webhook-signature']}",
        f"{good['webhook-signature']} {wrong['webhook-signature']}",
        f"v1a,{B64}  {good['webhook-signature']}",  # other versions and double spaces
    ):
        check("standard", {**good, "webhook-signature": order})


def test_stripe_accepts_any_one_matching_v1_and_ignores_v0() -> None:
    good = sign("stripe", SECRET, BODY, now=NOW)["Stripe-Signature"]
    t, v1 = good.split(",")
    wrong = sign("stripe", "other", BODY, now=NOW)["Stripe-Signature"].split(",")[1]
    for header in (
        f"{t},{wrong},{v1}",
        f"{v1},{wrong},{t}",
        f"{t}, v0={HEX}, {v1}",
        f"{t},v1={v1.removeprefix('v1=').upper()}",
    ):
        check("stripe", {"Stripe-Signature": header})
    assert refused("stripe", {"Stripe-Signature": f"{t},{wrong},v0={HEX}"}).code == "bad_signature"


def _upper(name: str) -> str:
    return name.upper()


def _lower(name: str) -> str:
    return name.lower()


def _title(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("recase", [_upper, _lower, _title])
def test_header_names_are_case_insensitive(scheme: str, recase: Callable[[str], str]) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    expected = check(scheme, headers)
    assert check(scheme, {recase(k): v for k, v in headers.items()}) == expected


@pytest.mark.parametrize("scheme", SCHEMES)
def test_starlette_headers_are_accepted(scheme: str) -> None:
    headers = sign(scheme, SECRET, BODY, now=NOW)
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-type", b"application/json"))
    assert check(scheme, Headers(raw=raw)) == check(scheme, headers)


# --- delivery ids --------------------------------------------------------------------------


def test_stripe_delivery_id_is_the_event_id() -> None:
    headers = sign("stripe", SECRET, BODY, now=NOW)
    assert check("stripe", headers).delivery_id == "evt_1NqZ"
    # Stripe re-signs each retry with a new t; the id must not change with it.
    retry = sign("stripe", SECRET, BODY, now=NOW + 60)
    assert check("stripe", retry, now=NOW + 60).delivery_id == "evt_1NqZ"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"type": "ping"}',
        b'{"id": 42}',
        b'{"id": ""}',
        b'{"id": "evt\\n1"}',
        b'[{"id": "evt_1"}]',
        b"\xff\xfe\x00",
        b"[" * 100_000,
    ],
    ids=["not-json", "no-id", "id-not-str", "id-empty", "id-control", "list", "bad-utf8", "deep"],
)
def test_stripe_delivery_id_falls_back_to_t_and_body_hash(body: bytes) -> None:
    headers = sign("stripe", SECRET, body, now=NOW)
    delivery = check("stripe", headers, body)
    assert delivery.delivery_id == f"1790000000.{hashlib.sha256(body).hexdigest()}"


def test_stripe_sign_only_repeats_the_event_id() -> None:
    assert sign("stripe", SECRET, BODY, now=NOW, delivery_id="evt_1NqZ")
    with pytest.raises(ValueError, match="top-level 'id'"):
        sign("stripe", SECRET, BODY, now=NOW, delivery_id="evt_other")


@pytest.mark.parametrize("bad", ["", "a\nb", "é"])
def test_sign_refuses_delivery_ids_verify_would_refuse(bad: str) -> None:
    with pytest.raises(ValueError, match="delivery_id"):
        sign("standard", SECRET, BODY, now=NOW, delivery_id=bad)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"webhook-id": "w", "X-GitHub-Delivery": "g", "Idempotency-Key": "i"}, "w"),
        ({"X-GitHub-Delivery": "g", "Idempotency-Key": "i"}, "g"),
        ({"idempotency-key": "i"}, "i"),
        ({"webhook-id": " ", "Idempotency-Key": "i"}, "i"),
        ({"Content-Type": "application/json"}, None),
        ({}, None),
    ],
)
def test_none_takes_the_first_present_delivery_id(
    headers: dict[str, str], expected: str | None
) -> None:
    assert verify("none", (), headers, BODY, now=NOW) == Delivery(expected, None)


def test_none_ignores_signatures_and_secrets() -> None:
    headers = {"X-Hub-Signature-256": "sha256=nonsense", "Stripe-Signature": "t=0"}
    assert verify("none", ["x"], headers, b"anything", now=NOW) == Delivery(None, None)


def test_none_still_refuses_an_unusable_delivery_id() -> None:
    error = refused("none", {"Idempotency-Key": "k\r\nSet-Cookie: x"})
    assert error.code == "malformed_signature"
    assert "Idempotency-Key" in error.message


# --- the error itself ---------------------------------------------------------------------


def test_signature_error_is_an_orchestrator_error_with_a_stable_code() -> None:
    error = refused("github", {})
    assert isinstance(error, OrchestratorError)
    assert error.retryable is False
    assert error.to_dict() == {
        "code": "missing_signature",
        "message": "missing X-Hub-Signature-256 header",
    }


def _signature_value(scheme: str, headers: dict[str, str]) -> str:
    """The MAC alone, as it appears on the wire (hex or base64)."""
    value = headers[SIGNATURE_HEADER[scheme]]
    return value.rsplit("=", 1)[1] if scheme != "standard" else value.split(",", 1)[1]


@pytest.mark.parametrize("scheme", SIGNED)
def test_errors_never_reveal_the_secret_or_the_expected_signature(scheme: str) -> None:
    secret = "s3cr3t-do-not-leak"
    sent = sign(scheme, secret, BODY, now=NOW, delivery_id=None)
    tampered = BODY + b" "
    # What a correct signature of the tampered body would be, i.e. what verify computes.
    kept = {"delivery_id": sent["webhook-id"]} if scheme == "standard" else {}
    expected = _signature_value(scheme, sign(scheme, secret, tampered, now=NOW, **kept))
    errors = [
        refused(scheme, sent, tampered, secrets=(secret,)),
        refused(scheme, sign(scheme, "other", BODY, now=NOW), secrets=(secret,)),
    ]
    if scheme in TIMESTAMPED:
        errors.append(refused(scheme, sent, secrets=(secret,), now=NOW + 10_000))
    for error in errors:
        for text in (str(error), error.message, repr(error)):
            assert secret not in text
            assert expected not in text
            assert expected.lower() not in text.lower()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_garbage_headers_raise_only_signature_error(scheme: str) -> None:
    rng = random.Random(20260101)
    alphabet = "v1t=,sha256 \t0123456789abcdefABCDEF+/=_-é\x00\r\n"
    valid = sign(scheme, SECRET, BODY, now=NOW)
    for _ in range(400):
        headers = dict(valid)
        for name in [*headers, "webhook-id", "X-GitHub-Delivery", "Idempotency-Key"]:
            roll = rng.random()
            if roll < 0.2:
                headers.pop(name, None)
            elif roll < 0.6:
                length = rng.choice([0, 1, 5, 64, 70, 200])
                headers[name] = "".join(rng.choice(alphabet) for _ in range(length))
            elif roll < 0.8 and name in headers:
                cut = rng.randrange(len(headers[name]) + 1)
                headers[name] = headers[name][:cut] + rng.choice(alphabet) + headers[name][cut:]
        try:
            verify(scheme, [SECRET, OLD_SECRET], headers, BODY, now=NOW)
        except SignatureError as error:
            assert error.code in CODES
