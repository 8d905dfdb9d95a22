"""The signed callback endpoints: every accepted request and every rejection, each rejection
checked for its status AND for leaving the job exactly as it was."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Any

import pytest
from django.test import Client as HttpClient

import awa_django
from awa_django.codec import MAX_ERROR_BYTES
from awa_django.events import Completed, Exhausted, Retried
from awa_django.web.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_callback_request
from tests.integration.test_callbacks import (
    ParkedJobFactory,
    db_now,
    running_with_callback,
    snapshot,
)

pytestmark = pytest.mark.django_db

SECRET = "http-test-secret-0123456789abcdef"
LIMIT = 2048


@pytest.fixture(autouse=True)
def callback_settings(settings):
    settings.AWA = {**settings.AWA, "CALLBACK_SECRET": SECRET, "CALLBACK_MAX_BODY_BYTES": LIMIT}
    return settings


@pytest.fixture
def http() -> HttpClient:
    # CSRF checks on, as in production: the signed views must not need a token.
    return HttpClient(enforce_csrf_checks=True)


@pytest.fixture
def events(clean_hooks):
    seen: list[Any] = []
    awa_django.on_any_event(seen.append)
    return seen


@pytest.fixture
def send(http, django_capture_on_commit_callbacks):
    """`post` through the test client, running the hooks the request's commit scheduled."""

    def call(*args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return post(http, *args, **kwargs)

    return call


def url(callback_id, action: str) -> str:
    return f"/awa/callbacks/{callback_id}/{action}"


def post(http, callback_id, action, body: bytes | dict[str, Any] | None = None, *, method="POST",
         signed_path=None, signed_body=None, skew=0, headers=None, secret=SECRET,
         content_type="application/json", **extra):  # fmt: skip
    """Send a request signed like a real sender would, unless told to sign something else."""
    raw = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    path = url(callback_id, action)
    if headers is None:
        headers = sign_callback_request(
            method, signed_path or path, raw if signed_body is None else signed_body,
            secret=secret, timestamp=int(time.time()) + skew,
        )  # fmt: skip
    return http.generic(method, path, raw, content_type=content_type, headers=headers,
                        **extra)  # fmt: skip


# -- accepted ----------------------------------------------------------------------------
def test_complete_with_a_valid_signature(send, events):
    job = ParkedJobFactory()
    response = send(job.callback_id, "complete", {"payload": {"approved": True}})
    assert response.status_code == 200
    assert response.json() == {"id": job.id, "state": "completed"}
    assert snapshot(job)["state"] == "completed"
    # The view calls the Client, so hooks fire in this (the web) process after commit.
    assert [(type(e), e.job.state) for e in events] == [(Completed, "completed")]


@pytest.mark.parametrize("body", [b"", b"{}", b'{"payload": null}', b'{"payload": [1, "a"]}'])
def test_complete_accepts_an_absent_or_any_json_payload(send, body):
    job = running_with_callback()
    assert send(job.callback_id, "complete", body).status_code == 200
    assert snapshot(job)["state"] == "completed" and snapshot(job)["has_lease"] is False


def test_fail_with_a_valid_signature(send, events):
    job = ParkedJobFactory()
    response = send(job.callback_id, "fail", {"error": "payment declined"})
    assert response.status_code == 200 and response.json()["state"] == "failed"
    assert snapshot(job)["errors"][-1]["error"] == "payment declined"
    assert [(type(e), e.error) for e in events] == [(Exhausted, "payment declined")]


@pytest.mark.parametrize("body", [b"", b"{}"])
def test_retry_with_a_valid_signature(send, events, body):
    job = ParkedJobFactory(attempt=2)
    response = send(job.callback_id, "retry", body)
    assert response.status_code == 200 and response.json()["state"] == "available"
    assert snapshot(job)["attempt"] == 0
    assert [(type(e), e.attempt) for e in events] == [(Retried, 2)]


@pytest.mark.parametrize(("body", "seconds"), [(b"", 3600), ({"timeout_seconds": 90.5}, 90.5),
                                               ({"timeout_seconds": 0}, 0)])  # fmt: skip
def test_heartbeat_with_a_valid_signature(send, events, body, seconds):
    job = ParkedJobFactory()
    response = send(job.callback_id, "heartbeat", body)
    assert response.status_code == 200 and response.json()["state"] == "waiting_external"
    assert snapshot(job)["callback_timeout_at"] == db_now() + dt.timedelta(seconds=seconds)
    assert events == []


def test_the_body_limit_is_inclusive(send):
    job = ParkedJobFactory()
    body = json.dumps({"payload": "x" * (LIMIT - 15)}).encode()
    assert len(body) == LIMIT
    assert send(job.callback_id, "complete", body).status_code == 200


# -- rejected, with no state change ------------------------------------------------------
OTHER = uuid.uuid4()


def rejection_cases():
    now = int(time.time())
    body = {"payload": {"amount": 100}}
    return {
        "tampered body": (401, "complete", body, {"signed_body": b'{"payload": {"amount": 1}}'}),
        "other callback id": (401, "complete", body, {"signed_path": url(OTHER, "complete")}),
        "other action": (401, "complete", body, {"signed_path": "{path_of_fail}"}),
        "other method": (405, "complete", body, {"method": "PUT"}),
        "expired timestamp": (401, "complete", body, {"skew": -330}),
        "future timestamp": (401, "complete", body, {"skew": +330}),
        "no headers": (401, "complete", body, {"headers": {}}),
        "no signature": (401, "complete", body, {"headers": {TIMESTAMP_HEADER: str(now)}}),
        "no timestamp": (401, "complete", body, {"headers": {SIGNATURE_HEADER: "v1=" + "0" * 64}}),
        "garbage signature": (401, "complete", body,
                              {"headers": {TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: "x"}}),
        "oversized body": (413, "complete", {"payload": "x" * LIMIT}, {}),
        "declared oversized": (413, "complete", body, {"CONTENT_LENGTH": str(LIMIT + 1)}),
        "bad content length": (400, "complete", body, {"CONTENT_LENGTH": "lots"}),
        "negative content length": (400, "complete", body, {"CONTENT_LENGTH": "-1"}),
        "wrong secret": (401, "complete", body, {"secret": "not-the-secret-0123456789abcdef"}),
        "text/plain body": (415, "complete", body, {"content_type": "text/plain"}),
        "form body": (415, "fail", {"error": "x"},
                      {"content_type": "application/x-www-form-urlencoded"}),
        "no content type": (415, "complete", body, {"content_type": ""}),
        "latin-1 json": (415, "complete", body,
                         {"content_type": "application/json; charset=latin-1"}),
        "lone surrogate error": (400, "fail", b'{"error": "\\ud800"}', {}),
        "lone low surrogate error": (400, "fail", b'{"error": "ok \\udfff then"}', {}),
        "NUL error": (400, "fail", b'{"error": "nul \\u0000"}', {}),
        "lone surrogate payload": (400, "complete", b'{"payload": "\\ud800"}', {}),
        "lone surrogate payload key": (400, "complete", b'{"payload": {"\\udc00": 1}}', {}),
        "NUL payload": (400, "complete", b'{"payload": ["\\u0000"]}', {}),
        "malformed json": (400, "complete", b'{"payload": ', {}),
        "not utf-8": (400, "complete", b'{"payload": "\xff"}', {}),
        "json array": (400, "complete", b"[1, 2]", {}),
        "NaN constant": (400, "complete", b'{"payload": NaN}', {}),
        "unknown field": (400, "complete", {"payload": 1, "result": 2}, {}),
        "fail without error": (400, "fail", {}, {}),
        "fail with empty error": (400, "fail", {"error": " "}, {}),
        "fail with non-text error": (400, "fail", {"error": {"code": 1}}, {}),
        "negative timeout": (400, "heartbeat", {"timeout_seconds": -1}, {}),
        "string timeout": (400, "heartbeat", {"timeout_seconds": "60"}, {}),
        "boolean timeout": (400, "heartbeat", {"timeout_seconds": True}, {}),
        "infinite timeout": (400, "heartbeat", b'{"timeout_seconds": 1e999}', {}),
        "huge timeout": (400, "heartbeat", {"timeout_seconds": 1e15}, {}),
        "timeout past float range": (400, "heartbeat", {"timeout_seconds": 10**400}, {}),
        "negative timeout past float range": (400, "heartbeat", {"timeout_seconds": -(10**400)},
                                              {}),
    }  # fmt: skip


CASES = rejection_cases()


@pytest.mark.parametrize("case", CASES)
def test_rejected_requests_change_nothing(send, events, case):
    status, action, body, options = CASES[case]
    job = ParkedJobFactory()
    if options.get("signed_path") == "{path_of_fail}":
        options = {**options, "signed_path": url(job.callback_id, "fail")}
    before = snapshot(job)
    response = send(job.callback_id, action, body, **options)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json" and response.json()["error"]
    assert snapshot(job) == before and events == []


# -- text PostgreSQL cannot store -----------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "body", "problem"),
    [
        ("fail", b'{"error": "\\ud800"}', "error contains a lone surrogate"),
        ("fail", b'{"error": "a\\u0000b"}', "error contains a NUL character"),
        (
            "complete",
            b'{"payload": {"k": "\\udbff"}}',
            "callback payload contains a lone surrogate",
        ),
        ("complete", b'{"payload": "\\u0000"}', "callback payload contains a NUL character"),
    ],
)
def test_a_value_the_caller_chose_is_refused_not_repaired(send, events, action, body, problem):
    # 400 saying what is wrong, where these used to raise UnicodeEncodeError: a 500.
    job = ParkedJobFactory()
    before = snapshot(job)
    response = send(job.callback_id, action, body)
    assert response.status_code == 400 and problem in response.json()["error"]
    assert snapshot(job) == before and events == []


def test_a_surrogate_pair_is_one_character_and_is_stored(send):
    job = ParkedJobFactory()
    body = b'{"error": "card \\ud83d\\udcb3 declined"}'
    assert send(job.callback_id, "fail", body).status_code == 200
    assert snapshot(job)["errors"][-1]["error"] == "card \N{CREDIT CARD} declined"


def test_a_long_fail_error_is_stored_cut_to_max_error_bytes(send, events, callback_settings):
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_MAX_BODY_BYTES": 256 * 1024}
    job = ParkedJobFactory()
    text = "declined: " + "é" * 20_000  # 40,010 UTF-8 bytes
    assert send(job.callback_id, "fail", {"error": text}).status_code == 200
    stored = snapshot(job)["errors"][-1]["error"]
    assert len(stored.encode()) <= MAX_ERROR_BYTES
    assert stored.startswith("declined: éé") and stored.endswith("(truncated, full text in logs)")
    assert [e.error for e in events] == [stored]


# -- content type --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON; Charset=UTF-8",
     "application/json;charset=utf8"],
)  # fmt: skip
def test_a_json_body_may_name_utf8_as_its_charset(send, content_type):
    job = ParkedJobFactory()
    response = send(job.callback_id, "complete", {"payload": 1}, content_type=content_type)
    assert response.status_code == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/jsonp", "application/json; charset=utf-16"]
)
def test_a_body_not_declared_as_utf8_json_is_unsupported(send, content_type):
    job = ParkedJobFactory()
    before = snapshot(job)
    response = send(job.callback_id, "complete", {"payload": 1}, content_type=content_type)
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]
    assert snapshot(job) == before


@pytest.mark.parametrize(
    ("action", "state"), [("retry", "available"), ("heartbeat", "waiting_external"),
                          ("complete", "completed")],
)  # fmt: skip
@pytest.mark.parametrize("content_type", ["", "application/x-www-form-urlencoded"])
def test_an_empty_body_needs_no_content_type(send, action, state, content_type):
    # Nothing to interpret; urllib, for one, labels an empty POST as a form.
    job = ParkedJobFactory()
    response = send(job.callback_id, action, b"", content_type=content_type)
    assert response.status_code == 200 and response.json()["state"] == state


# -- one answer for every signature failure ------------------------------------------------
LOGGED_REASON = {
    "tampered body": "does not match",
    "other callback id": "does not match",
    "other action": "does not match",
    "wrong secret": "does not match",
    "expired timestamp": "expired",
    "future timestamp": "in the future",
    "no headers": "missing",
    "no signature": "missing",
    "no timestamp": "missing",
    "garbage signature": "must be v1=",
}


@pytest.mark.parametrize("case", LOGGED_REASON)
def test_every_signature_failure_gets_the_same_401_and_logs_its_reason(send, caplog, case):
    status, action, body, options = CASES[case]
    job = ParkedJobFactory()
    if options.get("signed_path") == "{path_of_fail}":
        options = {**options, "signed_path": url(job.callback_id, "fail")}
    response = send(job.callback_id, action, body, **options)
    assert status == response.status_code == 401
    assert response.json() == {"error": "invalid or missing signature"}
    [record] = [r for r in caplog.records if r.name == "awa_django.callbacks"]
    assert record.levelname == "WARNING" and LOGGED_REASON[case] in record.getMessage()


# -- rotating the secret -------------------------------------------------------------------
NEW_SECRET = "http-test-new-secret-fedcba9876543210"


def test_a_secret_rotates_without_refusing_a_request(send, callback_settings):
    def accepted(secret: str) -> bool:
        job = ParkedJobFactory()
        return send(job.callback_id, "complete", {}, secret=secret).status_code == 200

    # 1. Add the new secret first: both are accepted while senders move over.
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_SECRET": None,
                             "CALLBACK_SECRETS": [NEW_SECRET, SECRET]}  # fmt: skip
    assert accepted(NEW_SECRET) and accepted(SECRET)
    # 2. Remove the old one: only the new one is.
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_SECRETS": [NEW_SECRET]}
    assert accepted(NEW_SECRET) and not accepted(SECRET)


# -- replays (docs/decisions/008-callback-replay.md) ---------------------------------------
@pytest.mark.parametrize(("action", "body"), [("complete", b"{}"), ("fail", b'{"error": "x"}'),
                                              ("retry", b"")])  # fmt: skip
def test_a_replayed_resolution_is_not_found(http, events, action, body):
    job = ParkedJobFactory()
    path = url(job.callback_id, action)
    headers = sign_callback_request("POST", path, body, secret=SECRET)
    first = http.generic("POST", path, body, content_type="application/json", headers=headers)
    after = snapshot(job)
    replay = http.generic("POST", path, body, content_type="application/json", headers=headers)
    assert (first.status_code, replay.status_code) == (200, 404)
    assert snapshot(job) == after


def test_a_replayed_heartbeat_only_reapplies_its_own_timeout(http, events):
    job = ParkedJobFactory()
    path, body = url(job.callback_id, "heartbeat"), b'{"timeout_seconds": 60}'
    headers = sign_callback_request("POST", path, body, secret=SECRET)
    for _ in range(2):  # the original, then its replay within the window
        response = http.generic("POST", path, body, content_type="application/json",
                                headers=headers)  # fmt: skip
        assert response.status_code == 200
        row = snapshot(job)
        assert row["state"] == "waiting_external" and row["callback_id"] == job.callback_id
        assert row["callback_timeout_at"] == db_now() + dt.timedelta(seconds=60)
    assert events == []
    # Once the callback is resolved the replay matches nothing.
    assert post(http, job.callback_id, "complete", {}).status_code == 200
    replay = http.generic("POST", path, body, content_type="application/json", headers=headers)
    assert replay.status_code == 404


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_are_not_allowed(send, method):
    job = ParkedJobFactory()
    before = snapshot(job)
    response = send(job.callback_id, "complete", method=method)
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert snapshot(job) == before


def test_a_non_uuid_callback_id_is_a_bad_request(send):
    response = send("not-a-uuid", "complete", {})
    assert response.status_code == 400 and "UUID" in response.json()["error"]


def test_an_unknown_callback_is_not_found(send):
    response = send(uuid.uuid4(), "complete", {})
    assert response.status_code == 404


def test_a_second_resolution_is_not_found(send, events):
    job = ParkedJobFactory()
    assert send(job.callback_id, "complete", {}).status_code == 200
    after = snapshot(job)
    for action, body in [("complete", {}), ("fail", {"error": "x"}), ("retry", {}),
                         ("heartbeat", {})]:  # fmt: skip
        assert send(job.callback_id, action, body).status_code == 404
    assert snapshot(job) == after and len(events) == 1


@pytest.mark.parametrize(("action", "body"), [("retry", {}), ("heartbeat", {})])
def test_actions_that_need_a_parked_job_refuse_a_running_one(send, action, body):
    job = running_with_callback()
    before = snapshot(job)
    assert send(job.callback_id, action, body).status_code == 404
    assert snapshot(job) == before


def test_an_oversized_body_is_refused_before_it_is_read(send):
    class Unreadable:
        def read(self, *args):
            raise AssertionError("the view read a body it had to refuse")

        readline = read

    job = ParkedJobFactory()
    response = send(job.callback_id, "complete", b"{}", CONTENT_LENGTH=str(10 * LIMIT),
                    **{"wsgi.input": Unreadable()})  # fmt: skip
    assert response.status_code == 413


# -- no secret configured ----------------------------------------------------------------
def test_without_a_secret_every_request_is_refused(send, callback_settings, caplog):
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_SECRET": None}
    job = ParkedJobFactory()
    before = snapshot(job)
    response = send(job.callback_id, "complete", {})  # signed, but nothing to check with
    assert response.status_code == 401
    assert response.json() == {"error": "invalid or missing signature"}
    # The operator's reason is in the log, not in the answer.
    assert 'AWA["CALLBACK_SECRET"] is not set' in caplog.text
    assert snapshot(job) == before


def test_unsigned_requests_pass_only_when_explicitly_allowed(send, callback_settings):
    callback_settings.DEBUG = True
    callback_settings.AWA = {
        **callback_settings.AWA, "CALLBACK_SECRET": None, "CALLBACK_ALLOW_UNSIGNED": True,
    }  # fmt: skip
    job = ParkedJobFactory()
    assert send(job.callback_id, "complete", {}, headers={}).status_code == 200
    assert snapshot(job)["state"] == "completed"


@pytest.mark.parametrize("action", ["complete", "fail", "retry", "heartbeat"])
def test_allow_unsigned_without_debug_is_refused_at_request_time(
    send, callback_settings, caplog, action
):
    # Production servers never run system checks (awa.E011): the view itself refuses, with
    # the very bytes of every other 401.
    callback_settings.DEBUG = False
    other = send(ParkedJobFactory().callback_id, action, {}, secret="not-the-secret-xxxxxxxx")
    callback_settings.AWA = {
        **callback_settings.AWA, "CALLBACK_SECRET": None, "CALLBACK_ALLOW_UNSIGNED": True,
    }  # fmt: skip
    job = ParkedJobFactory()
    before = snapshot(job)
    body = {"fail": {"error": "boom"}}.get(action, {})
    response = send(job.callback_id, action, body, headers={})
    assert (response.status_code, response.content) == (401, other.content)
    assert other.status_code == 401
    assert snapshot(job) == before
    assert "applies only with DEBUG on" in caplog.text


def test_allow_unsigned_does_not_weaken_a_configured_secret(send, callback_settings):
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_ALLOW_UNSIGNED": True}
    job = ParkedJobFactory()
    assert send(job.callback_id, "complete", {}, headers={}).status_code == 401
    assert snapshot(job)["state"] == "waiting_external"
