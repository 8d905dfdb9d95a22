from __future__ import annotations

import os
import time

from django.apps import AppConfig


class TestJobsConfig(AppConfig):
    """Jobs the acceptance tests run in real worker processes."""

    name = "testproject.testjobs"
    label = "testjobs"

    def ready(self) -> None:
        import awa_django

        awa_django.on_event_kind("acc_sleep", record_hook)
        for kind in ("acc_block", "acc_park", "acc_wait_in_place", "acc_async_wait_in_place"):
            awa_django.on_event_kind(kind, record_hook)
        awa_django.on_event_kind("acc_slow_hooked", record_hook)
        awa_django.on_event_kind("acc_slow_hooked", sleepy_hook, events={awa_django.Completed})
        awa_django.on_event_kind("acc_unstorable_error", record_hook)
        awa_django.on_event_kind("acc_hooked", paced_hook, events={awa_django.Completed})
        awa_django.on_event_kind("acc_rolling", record_hook)
        awa_django.on_event_kind("acc_atomic_invoice", record_hook)
        awa_django.on_event_kind("acc_followed", record_hook)

        from .jobs import AccAtomicInvoice, AccFollowed, AccNoop

        awa_django.on_completed_enqueue(AccAtomicInvoice, lambda a, _: [AccNoop(a.order_id)])
        awa_django.on_completed_enqueue(AccFollowed, lambda a, _: [AccNoop(a.n)])
        awa_django.on_event_kind("acc_dead_fail", record_hook)


def sleepy_hook(event: object) -> None:
    """A hook far slower than any shutdown grace: the worker must not wait for it."""
    time.sleep(60)


def paced_hook(event: object) -> None:
    """Sleeps the job's `hook_seconds`, then records the event like `record_hook`."""
    time.sleep(event.args.get("hook_seconds", 0))  # type: ignore[attr-defined]
    record_hook(event)


def record_hook(event: object) -> None:
    """Writes each lifecycle event it sees, from whichever process dispatched it."""
    from .models import HookCall

    job = event.job  # type: ignore[attr-defined]
    HookCall.objects.create(
        job_id=job.id,
        event=type(event).__name__,
        state=job.state,
        run_lease=job.run_lease,
        pid=os.getpid(),
        detail=("dead_lettered: " if getattr(event, "dead_lettered", False) else "")
        + (getattr(event, "reason", "") or getattr(event, "error", ""))[:200],
    )
