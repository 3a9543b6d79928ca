"""Verification and signing of incoming webhook deliveries (pure, no I/O).

Three senders' schemes are understood, plus an explicit opt-out:

    github    X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>
              X-GitHub-Delivery: <uuid>
    standard  webhook-id: msg_...   webhook-timestamp: <unix>   (Standard Webhooks / Svix)
              webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}." + body)> ...
    stripe    Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "{t}." + body)>[,v1=...]
    none      no check at all; the delivery id is taken from a header if one is sent

Every MAC is computed over the raw request bytes: re-serialized JSON differs in whitespace
and key order, so it would never match. Up to two secrets may be active at once, so a
secret can be rotated without dropping deliveries; either one verifies.

Timestamped schemes refuse deliveries outside `tolerance` seconds of `now` in either
direction, which bounds how long a captured delivery can be replayed. GitHub signs no
timestamp, so its delivery id is required: deduplicating on it is the only replay defence.
Stripe re-signs each retry with a new `t`, so its delivery id is the event id in the body.

Failures caused by the request raise `SignatureError` with a stable `code`; they never
echo the secret or the expected signature. Configuration mistakes (unknown scheme, no
secret, a `whsec_` secret that is not base64) raise `ValueError` instead, and
`validate_secrets` lets settings fail on them at start-up rather than per request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import OrchestratorError

__all__ = [
    "DEFAULT_TOLERANCE",
    "MAX_HEADER_BYTES",
    "SCHEMES",
    "Delivery",
    "SignatureError",
    "sign",
    "validate_secrets",
    "verify",
]

SCHEMES = ("github", "standard", "stripe", "none")
DEFAULT_TOLERANCE = 300.0
MAX_HEADER_BYTES = 8 * 1024
MAX_SECRETS = 2
# More candidates than this is not a rotation, it is someone fishing for a match.
MAX_SIGNATURES = 8

_GITHUB_SIGNATURE = "X-Hub-Signature-256"
_GITHUB_SHA1_SIGNATURE = "X-Hub-Signature"
_GITHUB_DELIVERY = "X-GitHub-Delivery"
_STANDARD_ID = "webhook-id"
_STANDARD_TIMESTAMP = "webhook-timestamp"
_STANDARD_SIGNATURE = "webhook-signature"
_STRIPE_SIGNATURE = "Stripe-Signature"
_IDEMPOTENCY_KEY = "Idempotency-Key"
# Where the `none` scheme looks for a delivery id, first present wins.
_NONE_ID_HEADERS = (_STANDARD_ID, _GITHUB_DELIVERY, _IDEMPOTENCY_KEY)

_WHSEC_PREFIX = "whsec_"
_DIGEST_SIZE = hashlib.sha256().digest_size
# ASCII digits only: int() would also accept "١٢٣" and "+1_000".
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")

ErrorCode = Literal[
    "missing_signature",
    "malformed_signature",
    "bad_signature",
    "stale_timestamp",
    "future_timestamp",
    "missing_delivery_id",
]


class SignatureError(OrchestratorError):
    """A delivery was refused. `code` is one of:

    - `missing_signature`: a signature or timestamp header is absent;
    - `malformed_signature`: a signature, timestamp or delivery-id header is present but
      unusable (empty, not a number, bad base64 or hex, wrong prefix, over 8 KiB, sent twice
      with different values);
    - `bad_signature`: well formed, but no signature matches the body under any secret;
    - `stale_timestamp` / `future_timestamp`: signed too long ago / too far ahead of `now`;
    - `missing_delivery_id`: the scheme requires a delivery id and none was sent.
    """

    code: ErrorCode

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a verified delivery tells us: an id to deduplicate on (None only under the
    `none` scheme when the sender sent none) and the signed time, if the scheme has one."""

    delivery_id: str | None
    timestamp: float | None


def verify(
    scheme: str,
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Delivery:
    """Check that `body` with `headers` is a genuine delivery under `scheme`, signed by one of
    `secrets` (at most two) within `tolerance` seconds of `now`; return its delivery id and
    timestamp, or raise `SignatureError` naming the first problem.

    `headers` may be any mapping, with names in any case (a plain dict, Starlette's Headers).
    """
    _check_clock(now, tolerance)
    keys = _keys(scheme, secrets)
    view = _Headers(headers)
    if scheme == "github":
        return _verify_github(keys, view, body)
    if scheme == "standard":
        return _verify_standard(keys, view, body, now, tolerance)
    if scheme == "stripe":
        return _verify_stripe(keys, view, body, now, tolerance)
    return Delivery(_first_delivery_id(view), None)


def sign(
    scheme: str, secret: str, body: bytes, *, now: float, delivery_id: str | None = None
) -> dict[str, str]:
    """The headers a sender would attach to deliver `body` at `now` under `scheme`.

    Without `delivery_id` a fresh one is made (a uuid4 for github, `msg_<hex>` for standard,
    a uuid4 Idempotency-Key for none). Stripe's delivery id is the body's event id, so for
    stripe `delivery_id` may only repeat it."""
    _check_clock(now, 0.0)
    if delivery_id is not None and (problem := _id_problem(delivery_id)) is not None:
        raise ValueError(f"delivery_id {problem}")
    if scheme == "none":
        return {_IDEMPOTENCY_KEY: delivery_id or str(uuid.uuid4())}
    (key,) = _keys(scheme, [secret])
    sent_at = int(now)
    if scheme == "github":
        return {
            _GITHUB_SIGNATURE: "sha256=" + _mac(key, body).hex(),
            _GITHUB_DELIVERY: delivery_id or str(uuid.uuid4()),
        }
    if scheme == "standard":
        msg_id = delivery_id or f"msg_{uuid.uuid4().hex}"
        mac = _mac(key, f"{msg_id}.{sent_at}.".encode() + body)
        return {
            _STANDARD_ID: msg_id,
            _STANDARD_TIMESTAMP: str(sent_at),
            _STANDARD_SIGNATURE: "v1," + base64.b64encode(mac).decode("ascii"),
        }
    if delivery_id is not None and delivery_id != _stripe_event_id(body):
        raise ValueError("a stripe delivery id is the body's top-level 'id'; it cannot be set")
    return {_STRIPE_SIGNATURE: f"t={sent_at},v1={_mac(key, f'{sent_at}.'.encode() + body).hex()}"}


def validate_secrets(scheme: str, secrets: Sequence[str]) -> None:
    """Raise `ValueError` unless `scheme` is known and `secrets` suit it: one or two
    non-empty secrets (any number for `none`), and `whsec_` secrets base64 for standard."""
    _keys(scheme, secrets)


# --- schemes ----------------------------------------------------------------------------


def _verify_github(keys: list[bytes], view: _Headers, body: bytes) -> Delivery:
    header = view.get(_GITHUB_SIGNATURE)
    if header is None:
        hint = ""
        if view.get(_GITHUB_SHA1_SIGNATURE) is not None:
            hint = f" (the SHA-1 {_GITHUB_SHA1_SIGNATURE} is not accepted)"
        raise SignatureError("missing_signature", f"missing {_GITHUB_SIGNATURE} header{hint}")
    prefix, sep, digest = header.partition("=")
    if prefix != "sha256" or not sep:
        raise _malformed(_GITHUB_SIGNATURE, "expected 'sha256=<hex>'")
    if not _HEX_DIGEST.fullmatch(digest):
        raise _malformed(_GITHUB_SIGNATURE, "sha256 must be 64 hex digits")
    delivery_id = _required_delivery_id(view, _GITHUB_DELIVERY)
    _require_match(keys, [bytes.fromhex(digest)], body)
    return Delivery(delivery_id, None)


def _verify_standard(
    keys: list[bytes], view: _Headers, body: bytes, now: float, tolerance: float
) -> Delivery:
    header = _required(view, _STANDARD_SIGNATURE)
    raw_timestamp = _required(view, _STANDARD_TIMESTAMP)
    msg_id = _required_delivery_id(view, _STANDARD_ID)
    sent_at = _timestamp(_STANDARD_TIMESTAMP, raw_timestamp, now, tolerance)
    candidates: list[bytes] = []
    for entry in header.split():
        version, sep, value = entry.partition(",")
        if not sep or not version:
            raise _malformed(_STANDARD_SIGNATURE, "expected space-separated 'v1,<base64>'")
        if version != "v1":
            continue  # e.g. v1a (asymmetric): not a scheme we hold keys for
        try:
            mac = base64.b64decode(value, validate=True)
        except ValueError:
            raise _malformed(_STANDARD_SIGNATURE, "a v1 value is not base64") from None
        if len(mac) != _DIGEST_SIZE:
            raise _malformed(_STANDARD_SIGNATURE, "a v1 value is not a 32-byte HMAC-SHA256")
        candidates.append(mac)
    _check_count(_STANDARD_SIGNATURE, candidates)
    # The reference libraries sign the parsed integer, so "01614265330" means 1614265330.
    _require_match(keys, candidates, f"{msg_id}.{sent_at}.".encode() + body)
    return Delivery(msg_id, float(sent_at))


def _verify_stripe(
    keys: list[bytes], view: _Headers, body: bytes, now: float, tolerance: float
) -> Delivery:
    header = _required(view, _STRIPE_SIGNATURE)
    timestamps: list[str] = []
    candidates: list[bytes] = []
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or not name:
            raise _malformed(_STRIPE_SIGNATURE, "expected 't=<unix>,v1=<hex>'")
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            if not _HEX_DIGEST.fullmatch(value):
                raise _malformed(_STRIPE_SIGNATURE, "v1 must be 64 hex digits")
            candidates.append(bytes.fromhex(value))
        # Anything else (v0 from test mode, a future scheme) is not ours to check.
    if len(timestamps) != 1:
        raise _malformed(_STRIPE_SIGNATURE, f"expected one t=, found {len(timestamps)}")
    sent_at = _timestamp(f"{_STRIPE_SIGNATURE} t", timestamps[0], now, tolerance)
    _check_count(_STRIPE_SIGNATURE, candidates)
    _require_match(keys, candidates, f"{sent_at}.".encode() + body)
    # Parsed only now that the body is authenticated.
    event_id = _stripe_event_id(body)
    if event_id is None:
        event_id = f"{sent_at}.{hashlib.sha256(body).hexdigest()}"
    return Delivery(event_id, float(sent_at))


def _stripe_event_id(body: bytes) -> str | None:
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested absurdly deep
        return None
    event_id = event.get("id") if isinstance(event, dict) else None
    if isinstance(event_id, str) and _id_problem(event_id) is None:
        return event_id
    return None


def _first_delivery_id(view: _Headers) -> str | None:
    for name in _NONE_ID_HEADERS:
        value = view.get(name)
        if value is not None and value.strip():
            _check_id(name, value)
            return value
    return None


# --- shared checks ----------------------------------------------------------------------


class _Headers:
    """Case-insensitive reads from any header mapping, refusing values that are oversized
    or that were sent more than once with different values (which one was signed?)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._pairs = [(k.lower(), v) for k, v in headers.items() if isinstance(k, str)]

    def get(self, name: str) -> str | None:
        wanted = name.lower()
        values = [v for k, v in self._pairs if k == wanted]
        if not values:
            return None
        value = values[0]
        if not isinstance(value, str):
            raise _malformed(name, "not text")
        if any(other != value for other in values[1:]):
            raise _malformed(name, f"sent {len(values)} times with different values")
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_HEADER_BYTES:
            raise _malformed(name, f"{size} bytes, at most {MAX_HEADER_BYTES} allowed")
        return value


def _required(view: _Headers, name: str) -> str:
    value = view.get(name)
    if value is None:
        raise SignatureError("missing_signature", f"missing {name} header")
    if not value.strip():
        raise _malformed(name, "empty")
    return value


def _required_delivery_id(view: _Headers, name: str) -> str:
    value = view.get(name)
    if value is None or not value.strip():
        raise SignatureError(
            "missing_delivery_id", f"missing {name} header: the delivery id is required"
        )
    _check_id(name, value)
    return value


def _check_id(name: str, value: str) -> None:
    problem = _id_problem(value)
    if problem is not None:
        raise _malformed(name, problem)


def _id_problem(value: str) -> str | None:
    # Ids become dedup keys and log fields; control characters would let a sender forge
    # log lines, and non-ASCII has no agreed byte form across ASGI servers.
    if not value.strip():
        return "must not be empty"
    if not (value.isascii() and value.isprintable()):
        return "must be printable ASCII"
    if len(value) > MAX_HEADER_BYTES:
        return f"must be at most {MAX_HEADER_BYTES} characters"
    return None


def _timestamp(name: str, raw: str, now: float, tolerance: float) -> int:
    if not _UNIX_SECONDS.fullmatch(raw):
        raise _malformed(name, "expected unix seconds")
    sent_at = int(raw)
    age = now - sent_at
    if age > tolerance:
        raise SignatureError(
            "stale_timestamp", f"{name} is {age:.1f}s old; tolerance is {tolerance:.1f}s"
        )
    if -age > tolerance:
        raise SignatureError(
            "future_timestamp",
            f"{name} is {-age:.1f}s in the future; tolerance is {tolerance:.1f}s",
        )
    return sent_at


def _check_count(name: str, candidates: list[bytes]) -> None:
    if not candidates:
        raise _malformed(name, "no v1 signature")
    if len(candidates) > MAX_SIGNATURES:
        raise _malformed(name, f"{len(candidates)} v1 signatures, at most {MAX_SIGNATURES}")


def _require_match(keys: list[bytes], candidates: list[bytes], signed: bytes) -> None:
    expected = [_mac(key, signed) for key in keys]
    # Compare every pair, so the time taken does not tell which secret (if any) matched.
    matched = False
    for got in candidates:
        for want in expected:
            matched |= hmac.compare_digest(got, want)
    if not matched:
        raise SignatureError("bad_signature", "no signature matches the body under any secret")


def _malformed(name: str, problem: str) -> SignatureError:
    return SignatureError("malformed_signature", f"malformed {name} header: {problem}")


def _mac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


def _check_clock(now: float, tolerance: float) -> None:
    if not math.isfinite(now):
        raise ValueError("now must be a finite unix time")
    if not tolerance >= 0:  # also refuses NaN
        raise ValueError("tolerance must be zero or more seconds")


def _keys(scheme: str, secrets: Sequence[str]) -> list[bytes]:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown webhook scheme {scheme!r}; expected one of {SCHEMES}")
    if scheme == "none":
        return []
    # A bare str is a Sequence[str] too; iterating it would make each character a key.
    given = [secrets] if isinstance(secrets, str) else list(secrets)
    if not 1 <= len(given) <= MAX_SECRETS:
        raise ValueError(f"{scheme} webhooks need 1 to {MAX_SECRETS} secrets, got {len(given)}")
    return [_key(scheme, secret) for secret in given]


def _key(scheme: str, secret: str) -> bytes:
    if not isinstance(secret, str) or not secret:
        raise ValueError("a webhook secret must be non-empty text")
    # Only Standard Webhooks decodes whsec_: Stripe's secrets look the same but are
    # used as text.
    if scheme == "standard" and secret.startswith(_WHSEC_PREFIX):
        try:
            key = base64.b64decode(secret.removeprefix(_WHSEC_PREFIX), validate=True)
        except ValueError:
            raise ValueError("a whsec_ secret must be base64 after the prefix") from None
        if not key:
            raise ValueError("a whsec_ secret must not be empty after the prefix")
        return key
    try:
        return secret.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a webhook secret must be encodable as UTF-8") from None
