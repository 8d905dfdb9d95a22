"""Signing and verifying callback requests (no database)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from awa_django.exceptions import InvalidSignature
from awa_django.web.signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    callback_url,
    canonical_string,
    sign_callback_request,
    verify_callback_request,
)

SECRET = "unit-test-secret"
PATH = "/awa/callbacks/0b7e5c2a-8a51-4f43-9d6c-2f1b1f0f6a11/complete"
BODY = b'{"payload": {"ok": true}}'


def verify(method="POST", path=PATH, body=BODY, *, headers, secret=SECRET, now=None):
    verify_callback_request(
        method,
        path,
        body,
        timestamp=headers.get(TIMESTAMP_HEADER),
        signature=headers.get(SIGNATURE_HEADER),
        secret=secret,
        replay_window=300,
        now=now,
    )


def test_signature_is_hmac_sha256_over_the_documented_canonical_string():
    headers = sign_callback_request("post", PATH, BODY, secret=SECRET, timestamp=1700000000)
    body_hash = hashlib.sha256(BODY).hexdigest()
    message = f"1700000000\nPOST\n{PATH}\n{body_hash}".encode()
    expected = hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()
    assert headers == {TIMESTAMP_HEADER: "1700000000", SIGNATURE_HEADER: f"v1={expected}"}
    assert canonical_string("1700000000", "post", PATH, BODY) == message


def test_a_fresh_signature_verifies():
    verify(headers=sign_callback_request("POST", PATH, BODY, secret=SECRET))


def test_str_body_is_signed_as_utf8():
    headers = sign_callback_request("POST", PATH, '{"error": "é"}', secret=SECRET)
    verify(body='{"error": "é"}'.encode(), headers=headers)


@pytest.mark.parametrize(
    "change",
    [
        {"body": b'{"payload": {"ok": false}}'},
        {"path": PATH.replace("/complete", "/fail")},
        {"path": PATH.replace("0b7e5c2a", "1b7e5c2a")},
        {"method": "PUT"},
        {"secret": "another-secret"},
    ],
    ids=["tampered-body", "other-action", "other-callback", "other-method", "wrong-secret"],
)
def test_any_change_to_the_signed_request_is_rejected(change):
    headers = sign_callback_request("POST", PATH, BODY, secret=SECRET)
    with pytest.raises(InvalidSignature, match="does not match"):
        verify(headers=headers, **change)


def test_changing_the_timestamp_header_breaks_the_signature():
    headers = sign_callback_request("POST", PATH, BODY, secret=SECRET)
    headers[TIMESTAMP_HEADER] = str(int(headers[TIMESTAMP_HEADER]) - 1)
    with pytest.raises(InvalidSignature, match="does not match"):
        verify(headers=headers)


def test_old_and_future_timestamps_fall_outside_the_replay_window():
    now = time.time()
    old = sign_callback_request("POST", PATH, BODY, secret=SECRET, timestamp=int(now) - 301)
    future = sign_callback_request("POST", PATH, BODY, secret=SECRET, timestamp=int(now) + 302)
    with pytest.raises(InvalidSignature, match="expired"):
        verify(headers=old, now=now)
    with pytest.raises(InvalidSignature, match="future"):
        verify(headers=future, now=now)


def test_edges_of_the_replay_window_are_accepted():
    now = 1_700_000_000.0
    for stamp in (int(now) - 300, int(now) + 300):
        headers = sign_callback_request("POST", PATH, BODY, secret=SECRET, timestamp=stamp)
        verify(headers=headers, now=now)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {TIMESTAMP_HEADER: "1700000000"},
        {SIGNATURE_HEADER: "v1=" + "0" * 64},
        {TIMESTAMP_HEADER: "", SIGNATURE_HEADER: "v1=" + "0" * 64},
    ],
    ids=["none", "no-signature", "no-timestamp", "empty-timestamp"],
)
def test_missing_headers_are_rejected(headers):
    with pytest.raises(InvalidSignature, match="missing"):
        verify(headers=headers)


@pytest.mark.parametrize(
    ("timestamp", "signature", "message"),
    [
        ("1.5", "v1=" + "0" * 64, "unix seconds"),
        ("-5", "v1=" + "0" * 64, "unix seconds"),
        ("now", "v1=" + "0" * 64, "unix seconds"),
        (None, "v2=" + "0" * 64, "v1="),
        (None, "v1=" + "0" * 63, "v1="),
        (None, "v1=" + "A" * 64, "v1="),
        (None, "0" * 64, "v1="),
    ],
)
def test_malformed_headers_are_rejected(timestamp, signature, message):
    stamp = timestamp or str(int(time.time()))
    with pytest.raises(InvalidSignature, match=message):
        verify(headers={TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: signature})


def test_signing_without_a_secret_is_a_configuration_error(settings):
    settings.AWA = {"CALLBACK_SECRET": None}
    with pytest.raises(ImproperlyConfigured, match="CALLBACK_SECRET"):
        sign_callback_request("POST", PATH, BODY)


def test_signing_defaults_to_the_configured_secret(settings):
    settings.AWA = {"CALLBACK_SECRET": SECRET}
    verify(headers=sign_callback_request("POST", PATH, BODY))


# -- rotation: sign with the first secret, accept any ------------------------------------
def test_any_listed_secret_verifies():
    for key in ("new-secret", SECRET):
        headers = sign_callback_request("POST", PATH, BODY, secret=key)
        verify(headers=headers, secret=["new-secret", SECRET])


def test_a_secret_no_longer_listed_is_rejected():
    headers = sign_callback_request("POST", PATH, BODY, secret="retired-secret")
    with pytest.raises(InvalidSignature, match="does not match"):
        verify(headers=headers, secret=["new-secret", SECRET])


@pytest.mark.parametrize("secrets", [[], [""], ["ok", ""]])
def test_verifying_without_a_usable_secret_fails_closed(secrets):
    headers = sign_callback_request("POST", PATH, BODY, secret="ok")
    with pytest.raises(InvalidSignature, match="no secret"):
        verify(headers=headers, secret=secrets)


def test_every_listed_secret_is_compared(monkeypatch):
    # The first match does not end the loop, so timing says nothing about which key matched.
    compared = []
    real = hmac.compare_digest

    def counting(a, b):
        compared.append(a)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    headers = sign_callback_request("POST", PATH, BODY, secret="first")
    verify(headers=headers, secret=["first", "second", "third"])
    assert len(compared) == 3


def test_signing_uses_the_first_of_callback_secrets(settings):
    settings.AWA = {"CALLBACK_SECRETS": ["newest", "older"]}
    headers = sign_callback_request("POST", PATH, BODY)
    verify(headers=headers, secret="newest")
    with pytest.raises(InvalidSignature):
        verify(headers=headers, secret="older")


def test_callback_url_reverses_each_action_under_the_mounted_prefix():
    cb = uuid.UUID("0b7e5c2a-8a51-4f43-9d6c-2f1b1f0f6a11")
    assert callback_url(cb, "complete") == PATH
    assert callback_url(str(cb), "heartbeat", base="https://shop.example/") == (
        f"https://shop.example/awa/callbacks/{cb}/heartbeat"
    )
    with pytest.raises(ValueError, match="action"):
        callback_url(cb, "resume")


def test_known_answer_from_the_documented_shell_recipe():
    # Computed with sha256sum and `openssl dgst -sha256 -hmac` (docs/callbacks.md).
    path = "/awa/callbacks/0b7e5c2a-8a51-4f43-9d6c-2f1b1f0f6a11/fail"
    headers = sign_callback_request(
        "POST", path, b'{"error":"declined"}', secret="s3cret", timestamp=1767225600
    )
    assert headers[SIGNATURE_HEADER] == (
        "v1=d3f18bd7271d5bf303cdb08ca3379c7952e491bb30835cb04ede57476e0d8591"
    )
