"""Signing and verifying HTTP callback requests (docs/decisions/003-callback-signature.md).

A request carries two headers:

    X-Awa-Timestamp: <unix seconds>
    X-Awa-Signature: v1=<lowercase hex HMAC-SHA256(secret, canonical string)>

where the canonical string is the UTF-8 encoding of

    "<timestamp>\\n<METHOD>\\n<path>\\n<lowercase hex SHA-256 of the raw body>"

`path` is the URL path exactly as Django sees it (`request.path`: script prefix included,
no scheme, host or query string). The path names the callback and the action, so a
signature for one callback or verb is useless for another; the body hash authenticates the
payload; the timestamp bounds replays to the replay window (old and future alike).

Senders use `sign_callback_request` (and `callback_url` to build the URL). The receiver
accepts a signature made with any of `AWA["CALLBACK_SECRETS"]` and signs with the first, so
a secret is rotated by putting the new one first, moving senders to it, then removing the
old one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
import uuid
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidSignature

TIMESTAMP_HEADER = "X-Awa-Timestamp"
SIGNATURE_HEADER = "X-Awa-Signature"
SCHEME = "v1"
ACTIONS = ("complete", "fail", "retry", "heartbeat")

_TIMESTAMP_RE = re.compile(r"^[0-9]{1,12}$")
_SIGNATURE_RE = re.compile(r"^v1=([0-9a-f]{64})$")


def canonical_string(timestamp: str, method: str, path: str, body: bytes) -> bytes:
    """The exact bytes that are signed (see the module docstring)."""
    digest = hashlib.sha256(body).hexdigest()
    return f"{timestamp}\n{method.upper()}\n{path}\n{digest}".encode()


def compute_signature(
    secret: str | bytes, timestamp: str, method: str, path: str, body: bytes
) -> str:
    """The `X-Awa-Signature` header value for these inputs: `v1=<hex>`."""
    key = secret.encode() if isinstance(secret, str) else secret
    mac = hmac.new(key, canonical_string(timestamp, method, path, body), hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def sign_callback_request(
    method: str,
    path: str,
    body: bytes | str,
    *,
    secret: str | bytes | None = None,
    timestamp: int | None = None,
) -> dict[str, str]:
    """The headers that authenticate one callback request.

        body = json.dumps({"payload": {"ok": True}}).encode()
        url = callback_url(token.id, "complete")
        headers = sign_callback_request("POST", url, body)
        requests.post("https://shop.example" + url, data=body, headers=headers)

    `secret` defaults to the first of `AWA["CALLBACK_SECRETS"]` (or `AWA["CALLBACK_SECRET"]`);
    `timestamp` to now (unix seconds).
    Send `body` byte for byte as signed.
    """
    secret = _secret(secret)
    stamp = str(int(time.time()) if timestamp is None else int(timestamp))
    raw = body.encode() if isinstance(body, str) else body
    return {
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: compute_signature(secret, stamp, method, path, raw),
    }


def verify_callback_request(
    method: str,
    path: str,
    body: bytes,
    *,
    timestamp: str | None,
    signature: str | None,
    secret: str | bytes | Sequence[str | bytes],
    replay_window: float,
    now: float | None = None,
) -> None:
    """Raise InvalidSignature unless the headers sign exactly this request within the
    replay window, with `secret` or (given a list) any one of them. Every secret is
    compared, each in constant time, so the time taken says nothing about which matched."""
    if not timestamp or not signature:
        raise InvalidSignature(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header")
    if not _TIMESTAMP_RE.match(timestamp):
        raise InvalidSignature(f"{TIMESTAMP_HEADER} must be whole unix seconds")
    if not _SIGNATURE_RE.match(signature):
        raise InvalidSignature(f"{SIGNATURE_HEADER} must be {SCHEME}=<64 lowercase hex digits>")
    skew = int(timestamp) - (time.time() if now is None else now)
    if skew < -replay_window:
        raise InvalidSignature("the signature has expired (timestamp outside the replay window)")
    if skew > replay_window:
        raise InvalidSignature("the signature's timestamp is in the future")
    given = signature.encode()
    matches = [
        hmac.compare_digest(compute_signature(key, timestamp, method, path, body).encode(), given)
        for key in _keys(secret)
    ]
    if not any(matches):
        raise InvalidSignature("the signature does not match this request")


def _keys(secret: str | bytes | Sequence[str | bytes]) -> list[str | bytes]:
    # str and bytes are sequences too: one of them is one key, not a list of characters.
    keys = [secret] if isinstance(secret, str | bytes) else list(secret)
    if not keys or not all(keys):
        raise InvalidSignature("no secret to verify the signature with")
    return keys


def callback_url(callback_id: uuid.UUID | str, action: str, *, base: str = "") -> str:
    """The URL path of a callback action (`base`, e.g. "https://shop.example", prefixed),
    as routed by `include("awa_django.urls")`."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    path = reverse(f"awa_django:callback_{action}", kwargs={"callback_id": str(callback_id)})
    return base.rstrip("/") + path


def _secret(secret: str | bytes | None) -> str | bytes:
    secret = secret if secret is not None else awa_settings().callback_secret
    if not secret:
        raise ImproperlyConfigured(
            'No callback secret: set AWA["CALLBACK_SECRET"] (or CALLBACK_SECRETS) or pass '
            "secret= to sign a request."
        )
    return secret
