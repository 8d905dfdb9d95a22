"""Signed HTTP endpoints that resolve external callbacks (DESIGN §6, docs/callbacks.md).

Thin by design: bound the body, check its content type, verify the signature, parse, call
the Client (so hooks fire in this process once the resolution commits), format JSON. Every
refusal is a 4xx JSON answer that changes nothing; a signature failure always gets the same
401 body, its reason going only to the log.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from awa_django.client import Client
from awa_django.client.callbacks import MAX_CALLBACK_TIMEOUT
from awa_django.codec import dumps
from awa_django.conf import AwaSettings, awa_settings
from awa_django.exceptions import (
    CallbackNotFound,
    DatabaseUnavailable,
    FollowUpFailed,
    InvalidCallbackOption,
    InvalidSignature,
    PayloadTooLarge,
    SerializationError,
)
from awa_django.snapshot import JobSnapshot
from awa_django.web.signing import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    verify_callback_request,
)

logger = logging.getLogger("awa_django.callbacks")

# One answer for every signature failure: telling a caller which check failed (no header,
# bad syntax, stale timestamp, wrong key) only helps someone probing for a way in.
UNAUTHENTICATED = "invalid or missing signature"
JSON_CONTENT_TYPE = "application/json"


class _Rejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _complete(client: Client, callback_id: uuid.UUID, body: dict[str, Any]) -> JobSnapshot:
    payload = body.get("payload")
    # Not stored today, but refused as resume_external refuses it (SerializationError for a
    # NUL or lone surrogate), so the answer does not depend on which verb keeps the payload.
    dumps(payload, what="callback payload")
    return client.complete_external(callback_id, payload)


def _fail(client: Client, callback_id: uuid.UUID, body: dict[str, Any]) -> JobSnapshot:
    return client.fail_external(callback_id, body.get("error", ""))


def _retry(client: Client, callback_id: uuid.UUID, body: dict[str, Any]) -> JobSnapshot:
    return client.retry_external(callback_id)


def _heartbeat(client: Client, callback_id: uuid.UUID, body: dict[str, Any]) -> JobSnapshot:
    timeout = body.get("timeout_seconds", 3600)
    # JSON integers are unbounded; one past float range would overflow the Client's range
    # check instead of failing it, so it is refused here as the out-of-range value it is.
    if isinstance(timeout, int) and abs(timeout) > MAX_CALLBACK_TIMEOUT:
        raise InvalidCallbackOption(
            f"timeout_seconds must be 0..{MAX_CALLBACK_TIMEOUT:.0f} seconds, got {timeout!r:.20}"
        )
    return client.heartbeat_callback(callback_id, timeout)


# Per action: the body fields it accepts and the Client call it makes. The Client checks
# the values (a missing or empty error, a negative timeout) and says what is wrong.
_ACTIONS: dict[str, tuple[frozenset[str], Callable[..., JobSnapshot]]] = {
    "complete": (frozenset({"payload"}), _complete),
    "fail": (frozenset({"error"}), _fail),
    "retry": (frozenset(), _retry),
    "heartbeat": (frozenset({"timeout_seconds"}), _heartbeat),
}

# Typed errors the Client raises, as HTTP statuses.
_STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (CallbackNotFound, 404),
    (InvalidCallbackOption, 400),
    (SerializationError, 400),
    (PayloadTooLarge, 400),
    (DatabaseUnavailable, 503),
)
_KNOWN_ERRORS = tuple(error for error, _ in _STATUS_OF)


# CSRF protection guards cookie-authenticated browser sessions; these requests carry no
# session and are authenticated by their HMAC signature instead, so CSRF does not apply.
@csrf_exempt
def resolve_callback(request: HttpRequest, callback_id: str, action: str) -> JsonResponse:
    """POST <prefix>/<callback_id>/<action>: 200 {"id", "state"} or {"error"} with 400,
    401, 404, 405, 413, 415, 500 (a follow-up builder failed; nothing changed) or 503."""
    if request.method != "POST":
        response = _error(405, "use POST")
        response["Allow"] = "POST"
        return response
    fields, resolve = _ACTIONS[action]
    settings = awa_settings()
    try:
        body = _read_body(request, settings.callback_max_body_bytes)
        _check_content_type(request, body)
        _authenticate(request, body, settings)
        job = resolve(Client(), _callback_uuid(callback_id), _parse(body, fields))
    except _Rejected as exc:
        return _error(exc.status, str(exc))
    except InvalidSignature as exc:
        # WARNING, like django.request's own line for the 401, so the reason is beside it.
        logger.warning("callback request to %r refused (401): %s", request.path, exc)
        return _error(401, UNAUTHENTICATED)
    except _KNOWN_ERRORS as exc:
        return _error(_status(exc), str(exc))
    except FollowUpFailed as exc:
        # A bug of ours, not the sender's: logged here, a plain answer there; nothing
        # changed, so the sender's retry is safe (decision 015).
        logger.error("callback %s: %s", callback_id, exc)
        return _error(500, "the callback's follow-up jobs could not be enqueued; retry later")
    return JsonResponse({"id": job.id, "state": job.state})


def _status(exc: Exception) -> int:
    return next(status for error, status in _STATUS_OF if isinstance(exc, error))


def _read_body(request: HttpRequest, limit: int) -> bytes:
    """The raw body, refusing anything over `limit` bytes before reading it: Content-Length
    is checked first, and the read itself is bounded in case the header under-reports."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = -1
    if declared < 0:
        raise _Rejected(400, "invalid Content-Length header")
    if declared > limit:
        raise _Rejected(413, f"body is larger than {limit} bytes")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise _Rejected(413, f"body is larger than {limit} bytes")
    return body


def _check_content_type(request: HttpRequest, body: bytes) -> None:
    """A body must be declared as JSON in UTF-8 (a charset parameter may say so); a request
    without a body has nothing to declare, whatever its client put in the header."""
    if not body:
        return
    charset = (request.content_params or {}).get("charset", "utf-8").lower()
    if request.content_type != JSON_CONTENT_TYPE or charset not in ("utf-8", "utf8"):
        raise _Rejected(415, f"send the body as Content-Type: {JSON_CONTENT_TYPE} (UTF-8)")


def _authenticate(request: HttpRequest, body: bytes, settings: AwaSettings) -> None:
    if not settings.callback_secrets:
        _check_unsigned_allowed(settings)
        return
    verify_callback_request(
        request.method or "",
        request.path,
        body,
        timestamp=request.headers.get(TIMESTAMP_HEADER),
        signature=request.headers.get(SIGNATURE_HEADER),
        secret=settings.callback_secrets,
        replay_window=settings.callback_replay_window,
    )


def _check_unsigned_allowed(settings: AwaSettings) -> None:
    """Without a secret nothing can be verified: an unsigned request passes only with
    CALLBACK_ALLOW_UNSIGNED *and* DEBUG on. Checked per request, because awa.E011 (the
    flag without DEBUG) is a system check, and production servers never run those."""
    if not settings.callback_allow_unsigned:
        raise InvalidSignature('AWA["CALLBACK_SECRET"] is not set, so nothing can be verified')
    if not django_settings.DEBUG:
        raise InvalidSignature(
            'AWA["CALLBACK_SECRET"] is not set and CALLBACK_ALLOW_UNSIGNED applies only '
            "with DEBUG on (awa.E011)"
        )


def _callback_uuid(callback_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(callback_id)
    except ValueError:
        raise _Rejected(400, f"{callback_id[:100]!r} is not a callback id (a UUID)") from None


def _parse(body: bytes, fields: frozenset[str]) -> dict[str, Any]:
    """The body as a JSON object with only `fields` (empty body = {})."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Rejected(400, "body is not valid JSON") from None
    if not isinstance(data, dict):
        raise _Rejected(400, "body must be a JSON object")
    unknown = sorted(set(data) - fields)
    if unknown:
        allowed = ", ".join(sorted(fields)) or "none"
        raise _Rejected(400, f"unknown field(s) {', '.join(unknown)}; allowed: {allowed}")
    return data


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _error(status: int, message: str) -> JsonResponse:
    if status >= 500:
        logger.warning("callback request failed (%s): %s", status, message)
    return JsonResponse({"error": message}, status=status)
