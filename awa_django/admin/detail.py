"""HTML fragments of the job detail page: args, errors, progress, lease and timeline.

Every value that came from a job (args, error text, messages) is escaped by
`format_html`; large JSON is cut so one job cannot make the page heavy.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import localtime, now

from awa_django.display import format_duration
from awa_django.storage.models import ActiveLease, Job

# Pretty-printed JSON longer than this is cut, with a link to the whole value.
MAX_INLINE_CHARS = 10_000
# One error entry (a traceback) longer than this is cut.
MAX_ERROR_CHARS = 20_000


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def json_block(value: Any, whole_url: str | None = None) -> SafeString:
    """`<pre>` of pretty JSON; when longer than MAX_INLINE_CHARS, its head and a link."""
    text = pretty_json(value)
    if len(text) <= MAX_INLINE_CHARS:
        return format_html('<pre class="awa-json">{}</pre>', text)
    size = f"{len(text.encode()) / 1024:.1f} KB"
    link = format_html(' <a href="{}">View the whole value</a>', whole_url) if whole_url else ""
    return format_html(
        '<pre class="awa-json">{}\n…</pre><p class="awa-truncated">Shown: the first {} '
        "characters of {}.{}</p>",
        text[:MAX_INLINE_CHARS],
        MAX_INLINE_CHARS,
        size,
        link,
    )


def error_history(errors: list[dict[str, Any]]) -> SafeString:
    """One collapsible block per attempt's error, the latest open: the summary is the
    exception line, the body the whole stored traceback."""
    if not errors:
        return format_html('<span class="awa-muted">{}</span>', "no errors")
    last = len(errors) - 1
    return format_html_join(
        "",
        '<details class="awa-error-entry"{}><summary><span class="awa-error-attempt">attempt {}'
        '</span> <time>{}</time>{} <code class="awa-error-head">{}</code></summary>'
        '<pre class="awa-error">{}</pre></details>',
        (
            (
                mark_safe(" open") if i == last else "",
                entry.get("attempt", "?"),
                _entry_time(entry),
                format_html(' <span class="awa-badge">{}</span>', "terminal")
                if entry.get("terminal")
                else "",
                _cut(_exception_line(text), 200),
                _cut(text, MAX_ERROR_CHARS),
            )
            for i, entry in enumerate(errors)
            for text in [traceback_text(str(entry.get("error", "")))]
        ),
    )


def traceback_text(error: str) -> str:
    """A stored error without the marker lines Python 3.11+ draws under a frame's source
    (`~~~^^^`): alone they say nothing, and a trimmed traceback may begin with one."""
    return "\n".join(line for line in error.splitlines() if not _is_marker(line))


def _is_marker(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.strip("^~")


def _exception_line(text: str) -> str:
    """The first line: the exception (`Type: message`, as the worker stores it first) or
    a plain message."""
    return next((line for line in text.splitlines() if line.strip()), "")


def progress_bar(progress: dict[str, Any] | None) -> SafeString:
    if not progress or "percent" not in progress:
        return format_html('<span class="awa-muted">{}</span>', "no progress reported")
    try:
        percent = max(0.0, min(100.0, float(progress["percent"])))
    except (TypeError, ValueError):
        percent = 0.0
    return format_html(
        '<div class="awa-progress" role="progressbar" aria-valuenow="{}" aria-valuemin="0" '
        'aria-valuemax="100"><div class="awa-progress-fill" style="width: {}%"></div></div>'
        ' <span class="awa-progress-label">{}% {}</span>',
        f"{percent:.0f}",
        f"{percent:.1f}",
        f"{percent:.0f}",
        str(progress.get("message") or ""),
    )


def lease_table(lease: ActiveLease | None, job: Job) -> SafeString:
    """Whose attempt holds the job and how fresh it is, in words: the run lease number is
    a guard for the runtime, not something an operator acts on."""
    if lease is None and job.state == "running" and job.attempted_by:
        # Decision 030: the attempt's first heartbeat writes its lease.
        return format_html(
            '<span class="awa-muted">claimed by {} at {}; no heartbeat yet (its first one '
            "writes the lease)</span>",
            job.attempted_by[-1],
            when(job.attempted_at) if job.attempted_at else "?",
        )
    if lease is None:
        return format_html('<span class="awa-muted">{}</span>', "no live lease")
    return format_html(
        '<p class="awa-lease-summary">Attempt {}\'s lease, held by worker <code>{}</code>; '
        "last heartbeat {} ago.</p>"
        '<table class="awa-lease"><tr><th>claimed at</th><td>{}</td></tr>'
        "<tr><th>heartbeat at</th><td>{}</td></tr><tr><th>deadline at</th><td>{}</td></tr>"
        "</table>",
        job.attempt,
        lease.worker_id,
        format_duration(max((now() - lease.heartbeat_at).total_seconds(), 0.0)),
        when(lease.claimed_at),
        when(lease.heartbeat_at),
        when(lease.deadline_at) if lease.deadline_at else "none",
    )


def timeline(job: Job, lease: ActiveLease | None) -> SafeString:
    entries = sorted(_timeline_entries(job, lease), key=lambda e: e[0])
    return format_html(
        '<ol class="awa-timeline">{}</ol>',
        format_html_join("", "<li><time>{}</time> {}</li>", ((when(t), e) for t, e in entries)),
    )


def _timeline_entries(job: Job, lease: ActiveLease | None) -> list[tuple[dt.datetime, str]]:
    entries = [(job.created_at, "created")]
    if job.run_at and job.run_at != job.created_at:
        entries.append((job.run_at, "run_at (due)"))
    for entry in job.errors or []:
        at = parse_datetime(str(entry.get("at", "")))
        if at is not None:
            # A traceback's last line names the exception; a plain message has one line.
            last_line = str(entry.get("error", "")).strip().splitlines()[-1:]
            label = f"attempt {entry.get('attempt', '?')} error: {''.join(last_line)}"
            entries.append((at, _cut(label, 200)))
    if job.attempted_at:
        entries.append((job.attempted_at, f"attempt {job.attempt} started"))
    if lease is not None:
        entries.append((lease.heartbeat_at, f"last heartbeat from {lease.worker_id}"))
    if job.callback_timeout_at:
        entries.append((job.callback_timeout_at, "callback times out"))
    if job.finalized_at:
        entries.append((job.finalized_at, f"finalized ({job.state})"))
    return entries


def _entry_time(entry: dict[str, Any]) -> str:
    at = parse_datetime(str(entry.get("at", "")))
    return when(at) if at else str(entry.get("at", ""))


def when(moment: dt.datetime | None) -> str:
    """A timestamp in the current time zone, to the second."""
    if moment is None:
        return "-"
    return localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
