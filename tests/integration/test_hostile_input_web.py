"""Property-based: hostile input to the web surfaces never gets a 500 and never a partial
write (issue 8). Generated requests drive (a) the signed callback endpoint — bodies,
headers, content types, methods and callback ids — and (b) the admin job list's query
string. Every answer is a 2xx, 3xx or 4xx; a job row changes only when the callback request
was valid and signed; the job list queries only what it declares (docs/admin.md).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_from_bytes

import pytest
from django.contrib.admin.views.main import IGNORED_PARAMS, PAGE_VAR
from django.db import connection
from django.http import QueryDict
from django.test import Client as HttpClient
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django.codec import MAX_ERROR_BYTES
from awa_django.storage.models import Job
from awa_django.web.signing import ACTIONS, SIGNATURE_HEADER, TIMESTAMP_HEADER, compute_signature
from tests.factories import JobFactory
from tests.integration.test_callbacks import ParkedJobFactory, running_with_callback, snapshot

pytestmark = pytest.mark.django_db

SECRET = "hostile-input-secret-0123456789abcdef"
OLD_SECRET = "hostile-input-old-secret-fedcba987654"
LIMIT = 4096
HOSTILE = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- strategies ------------------------------------------------------------------------------
# Characters that have broken text handling before: NUL, both surrogate halves, quotes and
# backslashes, a line separator, a superscript and an Arabic-Indic digit, an astral emoji.
NASTY = ["\x00", "\ud800", "\udfff", "\\", '"', "\u2028", "²", "٣", "😀", "\ufeff"]
# Joined lists, not st.text(): st.text() leaves surrogates out of any alphabet.
texts = st.lists(st.sampled_from(NASTY) | st.characters(), max_size=20).map("".join)
# Header values arrive as latin-1 strings in the WSGI environ.
header_texts = st.text(st.characters(max_codepoint=0xFF), max_size=40)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], odds: int = 3) -> Any:
    """`common` drawn `odds` times as often as `rare`: enough valid-looking requests get
    past the early refusals to reach the Client and the database."""
    # sampled_from counts repeats (one_of does not weight its branches so).
    return st.sampled_from([common] * odds + [rare]).flatmap(lambda chosen: chosen)


# The field each action takes, and values for it that are mostly of the right type.
FIELD_VALUES = {
    "complete": ("payload", json_values),
    "fail": ("error", mostly(texts, json_values)),
    "heartbeat": ("timeout_seconds", mostly(st.integers(-(10**400), 10**400) | st.floats(),
                                            json_values)),
}  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn, action: str) -> bytes:
    kind = draw(mostly(st.just("json"), st.sampled_from(["raw", "bytes", "empty", "oversized"])))
    if kind in ("bytes", "empty", "oversized"):
        return {"empty": b"", "oversized": b'{"payload": "' + b"x" * LIMIT + b'"}'}.get(
            kind, draw(st.binary(max_size=64))
        )
    fields: dict[str, Any] = {}
    if action in FIELD_VALUES and draw(mostly(st.just(True), st.just(False))):
        name, values = FIELD_VALUES[action]
        fields[name] = draw(values)
    if draw(st.integers(0, 4)) == 4:  # now and then a field this action does not take
        fields[draw(texts)] = draw(json_values)
    if kind == "json":  # NUL and surrogates arrive as \uXXXX escapes
        return json.dumps(fields).encode()
    return json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass")  # not UTF-8


content_types = mostly(
    st.just("application/json"),
    st.sampled_from(
        [
            "application/json; charset=utf-8",
            "application/json; charset=latin-1",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "",
        ]
    )
    | header_texts.map(lambda t: "application/json; " + t),
    odds=5,
)
callback_ids = mostly(
    st.just("job"),
    st.just("other") | st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
)
SIGNING_MODES = ["old-secret", "wrong-secret", "stale", "future", "none", "garbage"]


@dataclass(frozen=True)
class HostileRequest:
    state: str  # of the job before the request
    action: str
    method: str
    callback_id: str  # "job": the job's own, "other": an unknown UUID, else this text
    body: bytes
    content_type: str
    signing: str  # "valid", "old-secret" (also valid), or one of the failures
    garbage_headers: dict[str, str]


@st.composite
def signed_requests(draw: st.DrawFn) -> HostileRequest:
    """A well-formed envelope (signed POST with a JSON body to a pending callback) around
    hostile contents: these reach the Client and the database."""
    action = draw(st.sampled_from(ACTIONS))
    return HostileRequest(
        state=draw(mostly(st.just("waiting_external"), st.sampled_from(["running", "completed"]))),
        action=action,
        method="POST",
        callback_id="job",
        body=draw(bodies(action)),
        content_type="application/json",
        signing="valid",
        garbage_headers={},
    )


@st.composite
def callback_requests(draw: st.DrawFn) -> HostileRequest:
    """Everything hostile: method, callback id, content type, signature and body."""
    action = draw(st.sampled_from(ACTIONS))
    signing = draw(mostly(st.just("valid"), st.sampled_from(SIGNING_MODES), odds=4))
    garbage = {TIMESTAMP_HEADER: draw(header_texts), SIGNATURE_HEADER: draw(header_texts)}
    return HostileRequest(
        state=draw(st.sampled_from(["waiting_external", "running", "completed"])),
        action=action,
        method=draw(mostly(st.just("POST"), st.sampled_from(["GET", "PUT", "DELETE"]), odds=6)),
        callback_id=draw(callback_ids),
        body=draw(bodies(action)),
        content_type=draw(content_types),
        signing=signing,
        garbage_headers=garbage if signing == "garbage" else {},
    )


# -- (a) the callback endpoint ---------------------------------------------------------------
@pytest.fixture
def callback_settings(settings: Any) -> Any:
    settings.AWA = {
        **settings.AWA,
        "CALLBACK_SECRET": None,
        "CALLBACK_SECRETS": [SECRET, OLD_SECRET],
        "CALLBACK_MAX_BODY_BYTES": LIMIT,
    }
    return settings


@pytest.fixture
def events(clean_hooks: Any) -> list[Any]:
    seen: list[Any] = []
    awa_django.on_any_event(seen.append)
    return seen


def start(state: str) -> Job:
    if state == "running":
        return running_with_callback()
    return ParkedJobFactory(state=state)


def signed_headers(mode: str, path: str, body: bytes, method: str) -> dict[str, str]:
    key = {"valid": SECRET, "old-secret": OLD_SECRET, "stale": SECRET, "future": SECRET}.get(
        mode, "not-the-secret-0123456789abcdef0123"
    )
    skew = {"stale": -3600, "future": 3600}.get(mode, 0)
    stamp = str(int(time.time()) + skew)
    return {
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: compute_signature(key, stamp, method, path, body),
    }


def outcome(response: Any) -> str:
    """Status and the start of the error, for --hypothesis-show-statistics."""
    if response["Content-Type"] != "application/json":  # e.g. the URL resolver's 404
        return f"{response.status_code} (not JSON)"
    error = response.json().get("error", "")[:28]
    return f"{response.status_code} {error!a}"  # an echoed field name may be a surrogate


# What a valid, signed request does to a job in each state (absent: it must be refused).
RESULT = {
    ("complete", "waiting_external"): "completed",
    ("complete", "running"): "completed",
    ("fail", "waiting_external"): "failed",
    ("fail", "running"): "failed",
    ("retry", "waiting_external"): "available",
    ("heartbeat", "waiting_external"): "waiting_external",
}


@HOSTILE
@given(request=signed_requests())
def test_signed_requests_with_hostile_contents_never_fail_or_write_partly(
    callback_settings: Any, events: list[Any], django_capture_on_commit_callbacks: Any,
    request: HostileRequest,
) -> None:  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        check_callback_request(request, events)


@HOSTILE
@given(request=callback_requests())
def test_hostile_callback_requests_never_fail_or_write_unless_valid_and_signed(
    callback_settings: Any, events: list[Any], django_capture_on_commit_callbacks: Any,
    request: HostileRequest,
) -> None:  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        check_callback_request(request, events)


def check_callback_request(request: HostileRequest, events: list[Any]) -> None:
    """Send `request` about a new job: no 500, and the job changes (and an event fires)
    only for a valid, signed request, and then exactly as its action says."""
    events.clear()
    job = start(request.state)
    target = {"job": str(job.callback_id), "other": str(uuid.uuid4())}.get(
        request.callback_id, request.callback_id
    )
    path = f"/awa/callbacks/{target}/{request.action}"  # as the view sees it, decoded
    headers = request.garbage_headers
    if request.signing not in ("none", "garbage"):
        headers = signed_headers(request.signing, path, request.body, request.method)
    before = snapshot(job)
    response = HttpClient().generic(
        request.method, f"/awa/callbacks/{quote(target, safe='')}/{request.action}",
        request.body, content_type=request.content_type, headers=headers,
    )  # fmt: skip
    assert response.status_code < 500, response.content
    event(outcome(response))
    after = snapshot(job)
    if response.status_code != 200:
        assert after == before and events == []
        return
    assert request.signing in ("valid", "old-secret") and request.method == "POST"
    assert request.callback_id == "job"
    assert after["state"] == RESULT[request.action, request.state]
    if request.action == "fail":  # stored as sent: a caller's text is refused, not repaired
        sent = json.loads(request.body)["error"]
        assert after["errors"][-1]["error"] == sent or len(sent.encode()) > MAX_ERROR_BYTES


# -- (b) the admin job list ------------------------------------------------------------------
CHANGELIST = "admin:awa_django_job_changelist"
DECLARED_KEYS = ["q", "o", "p", "queue", "kind", "state__exact"]
OTHER_KEYS = [
    "e", "all", "state", "state__isnull", "args__a", "metadata__k__regex", "errors__0__error",
    "id__gt", "tags__contains", "callback_id", "_to_field", "_popup", "_facets",
    "_changelist_filters",
]  # fmt: skip
VALUE_TEXTS = st.text(
    st.characters(exclude_categories=["Cs"]) | st.sampled_from(["\x00", "²", "٣", "-", "."]),
    max_size=30,
)
# Values that have broken the list before, or would sort or match by something undeclared:
# column numbers for ?o=, digits int() refuses, a NUL, a long number.
SHARP_VALUES = ["2", "-3", "6.2.1", "1", "²", "١٢", "\x00", "9" * 30, "9" * 5000, "tag:\x00"]
admin_values = st.one_of(
    st.sampled_from(SHARP_VALUES),
    VALUE_TEXTS,
    st.integers(-(10**30), 10**30).map(str),
).map(lambda t: quote(t, safe="")) | st.binary(max_size=8).map(
    lambda b: quote_from_bytes(b, safe="")
)
encoded_pairs = st.lists(
    st.tuples(
        mostly(
            st.sampled_from(DECLARED_KEYS),
            st.sampled_from(OTHER_KEYS) | VALUE_TEXTS.map(lambda t: quote(t, safe="")),
            odds=4,
        ),
        admin_values,
    ),
    max_size=3,
)
# The job list's declared filters (state's choices, queue, kind), each served by an index.
FILTER_PARAMETERS = frozenset({"state__exact", "queue", "kind"})
# Columns the list may filter or search on: each behind an index (docs/admin.md).
INDEXED = {"id", "state", "queue", "kind", "tags", "callback_id"}
# Django's own parameters, which never become lookups.
NOT_LOOKUPS = {*IGNORED_PARAMS, PAGE_VAR, "e"}


@pytest.fixture
def jobs(db: Any) -> list[Job]:
    return [
        JobFactory(queue="email", kind="send_receipt", state="failed", tags=["vip"]),
        JobFactory(kind="²"),
        ParkedJobFactory(),
    ]


def where_columns(sql: str) -> set[str]:
    where = sql.partition(" WHERE ")[2].partition(" ORDER BY ")[0]
    return set(re.findall(r'"awa_jobs_hot"\."(\w+)"', where))


@HOSTILE
@given(pairs=encoded_pairs)
def test_the_job_list_never_fails_and_runs_only_declared_lookups(
    admin_client: Any, jobs: list[Job], pairs: list[tuple[str, str]]
) -> None:
    query = "&".join(f"{key}={value}" for key, value in pairs)
    rows = list(Job.objects.order_by("id").values())
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse(CHANGELIST) + "?" + query)

    assert response.status_code < 500
    event(str(response.status_code))
    assert list(Job.objects.order_by("id").values()) == rows  # a GET writes nothing
    lookups = {key for key in QueryDict(query) if key not in NOT_LOOKUPS}
    if response.status_code < 400:
        assert lookups <= FILTER_PARAMETERS, lookups
    for sql in (q["sql"] for q in queries.captured_queries if '"awa_jobs_hot"' in q["sql"]):
        assert where_columns(sql) <= INDEXED, sql
        order = sql.partition(" ORDER BY ")[2].partition(" LIMIT")[0]
        assert order in ("", '"awa_jobs_hot"."id" ASC', '"awa_jobs_hot"."id" DESC'), sql
