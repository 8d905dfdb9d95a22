"""The signed callback endpoints: every accepted request and every rejection, each rejection
checked for its status AND for leaving the job exactly as it was."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid

import pytest
from django.test import Client as HttpClient

import awa_django
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
    seen: list = []
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


def post(http, callback_id, action, body: bytes | dict | None = None, *, method="POST",
         signed_path=None, signed_body=None, skew=0, headers=None, **extra):  # fmt: skip
    """Send a request signed like a real sender would, unless told to sign something else."""
    raw = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    path = url(callback_id, action)
    if headers is None:
        headers = sign_callback_request(
            method, signed_path or path, raw if signed_body is None else signed_body,
            secret=SECRET, timestamp=int(time.time()) + skew,
        )  # fmt: skip
    return http.generic(method, path, raw, content_type="application/json", headers=headers,
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
    callback_settings.AWA = {
        **callback_settings.AWA, "CALLBACK_SECRET": None, "CALLBACK_ALLOW_UNSIGNED": True,
    }  # fmt: skip
    job = ParkedJobFactory()
    assert send(job.callback_id, "complete", {}, headers={}).status_code == 200
    assert snapshot(job)["state"] == "completed"


def test_allow_unsigned_does_not_weaken_a_configured_secret(send, callback_settings):
    callback_settings.AWA = {**callback_settings.AWA, "CALLBACK_ALLOW_UNSIGNED": True}
    job = ParkedJobFactory()
    assert send(job.callback_id, "complete", {}, headers={}).status_code == 401
    assert snapshot(job)["state"] == "waiting_external"
