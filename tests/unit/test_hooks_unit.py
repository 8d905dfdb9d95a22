"""Hook registration and delivery semantics, and the hook/callback system checks (no DB)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import threading

import pytest

import awa_django
from awa_django.checks import check_callback_secret, check_hook_kinds
from awa_django.events import Cancelled, Completed, Exhausted, Retried, Started
from awa_django.registry import HookRegistration, JobDefinition, Registry
from awa_django.registry import dispatch as hooks
from awa_django.snapshot import JobSnapshot

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass
class PackOrder:
    order_id: int


def job_row(**changes) -> JobSnapshot:
    base = {
        "id": 41, "kind": "pack_order", "queue": "default", "args": {"order_id": 5},
        "state": "completed", "priority": 2, "attempt": 1, "max_attempts": 25, "run_at": NOW,
        "created_at": NOW, "attempted_at": NOW, "finalized_at": NOW, "run_lease": 1,
        "errors": [], "metadata": {}, "tags": [], "progress": None, "callback_id": None,
        "callback_timeout_at": None, "result": None, "attempted_by": [],
    }  # fmt: skip
    return JobSnapshot(**{**base, **changes})


def add(reg: Registry, hook, kind="pack_order", events=None, args_type=None) -> None:
    reg.add_hook(HookRegistration(kind, hook, frozenset(events or {Completed}), args_type))


@pytest.fixture
def reg() -> Registry:
    return Registry()


def test_hooks_run_in_registration_order_across_kind_and_global_hooks(reg):
    seen: list[str] = []
    add(reg, lambda e: seen.append("kind-1"))
    add(reg, lambda e: seen.append("any"), kind=None)
    add(reg, lambda e: seen.append("other-kind"), kind="other")
    add(reg, lambda e: seen.append("kind-2"))
    hooks.dispatch(Completed(job=job_row()), reg)
    assert seen == ["kind-1", "any", "kind-2"]


def test_a_hook_sees_only_the_events_it_subscribed_to(reg):
    seen: list[type] = []
    add(reg, lambda e: seen.append(type(e)), events={Exhausted, Cancelled})
    for event in (Completed(job=job_row()), Exhausted(job=job_row(state="failed"), error="x")):
        hooks.dispatch(event, reg)
    assert seen == [Exhausted]


def test_a_failing_hook_is_logged_with_the_job_id_and_the_next_hook_runs(reg, caplog):
    seen: list[str] = []

    def broken(event):
        raise RuntimeError("boom")

    add(reg, broken)
    add(reg, lambda e: seen.append("after"))
    with caplog.at_level(logging.ERROR, logger="awa_django.hooks"):
        hooks.dispatch(Completed(job=job_row(id=9001)), reg)
    assert seen == ["after"]
    [record] = caplog.records
    assert "9001" in record.getMessage() and "broken" in record.getMessage()
    assert record.exc_info is not None


def test_typed_hooks_get_the_dataclass_and_untyped_hooks_the_dict(reg):
    seen: list[object] = []
    add(reg, lambda e: seen.append(e.args), args_type=PackOrder)
    add(reg, lambda e: seen.append(e.args))
    hooks.dispatch(Completed(job=job_row()), reg)
    assert seen == [PackOrder(order_id=5), {"order_id": 5}]


def test_a_typed_hook_that_cannot_decode_the_args_is_skipped_with_a_warning(reg, caplog):
    seen: list[str] = []
    add(reg, lambda e: seen.append("typed"), args_type=PackOrder)
    add(reg, lambda e: seen.append("untyped"))
    event = Completed(job=job_row(id=77, args={"order_id": "not a number"}))
    with caplog.at_level(logging.WARNING, logger="awa_django.hooks"):
        hooks.dispatch(event, reg)
    assert seen == ["untyped"]
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "77" in record.getMessage()
    assert "PackOrder" in record.getMessage()


def test_a_typed_hook_whose_post_init_rejects_the_args_is_skipped(reg):
    @dataclasses.dataclass
    class Strict:
        order_id: int

        def __post_init__(self):
            raise ValueError("never valid")

    seen: list[str] = []
    add(reg, lambda e: seen.append("typed"), args_type=Strict)
    add(reg, lambda e: seen.append("untyped"))
    hooks.dispatch(Completed(job=job_row()), reg)
    assert seen == ["untyped"]


def test_sync_dispatch_runs_async_hooks_to_completion(reg):
    seen: list[str] = []

    async def async_hook(event):
        await asyncio.sleep(0)
        seen.append("async")

    add(reg, async_hook)
    add(reg, lambda e: seen.append("sync"))
    hooks.dispatch(Completed(job=job_row()), reg)
    assert seen == ["async", "sync"]


def test_sync_dispatch_works_even_inside_a_running_event_loop(reg):
    seen: list[str] = []

    async def async_hook(event):
        seen.append("async")

    add(reg, async_hook)

    async def caller():
        hooks.dispatch(Completed(job=job_row()), reg)

    asyncio.run(caller())
    assert seen == ["async"]


def test_adispatch_awaits_async_hooks_and_runs_sync_hooks_off_the_loop(reg, caplog):
    seen: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()

    async def async_hook(event):
        seen.append(("async", threading.get_ident() == loop_thread))

    def sync_hook(event):
        seen.append(("sync", threading.get_ident() == loop_thread))

    def broken(event):
        raise ValueError("boom")

    class CallableObject:
        async def __call__(self, event):
            seen.append(("object", True))

    for hook in (sync_hook, broken, async_hook, CallableObject()):
        add(reg, hook)
    with caplog.at_level(logging.ERROR, logger="awa_django.hooks"):
        asyncio.run(hooks.adispatch(Completed(job=job_row()), reg))
    assert seen == [("sync", False), ("async", True), ("object", True)]
    assert len(caplog.records) == 1


def test_event_filter_rejects_things_that_are_not_events(clean_hooks):
    with pytest.raises(TypeError, match="not lifecycle events"):
        awa_django.on_event_kind("pack_order", print, events={str})  # type: ignore[arg-type]  # on purpose


def test_registrars_validate_their_arguments_and_return_the_hook(clean_hooks):
    with pytest.raises(TypeError, match="callable"):
        awa_django.on_any_event("not callable")  # type: ignore[type-var]  # on purpose
    with pytest.raises(TypeError, match="dataclass"):
        awa_django.on_event(dict, print)
    with pytest.raises(TypeError, match="kind"):
        awa_django.on_event_kind("", print)

    def hook(event):
        pass

    assert awa_django.on_event(PackOrder, hook, events={Retried}) is hook
    [registration] = clean_hooks.hooks_for("pack_order", Retried)
    assert registration.args_type is PackOrder and registration.hook is hook
    assert clean_hooks.hooks_for("pack_order", Started) == []


def test_registering_a_hook_after_the_worker_started_logs_a_warning(reg, caplog):
    with caplog.at_level(logging.WARNING, logger="awa_django.hooks"):
        add(reg, print)
        assert caplog.records == []
        reg.mark_started()
        add(reg, print)
    [record] = caplog.records
    assert "after this process's worker started" in record.getMessage()
    assert "AppConfig.ready()" in record.getMessage()
    assert len(reg.hooks()) == 2  # accepted all the same: it sees this process's events


def test_hooks_for_kinds_without_a_handler_are_warned_about(reg):
    reg.add_job(JobDefinition("pack_order", PackOrder, print, "default", 25, 2))
    reg.add_resolver(lambda kind: None)
    add(reg, print)  # served by @job
    add(reg, print, kind=None)  # global: never warned about
    add(reg, print, kind="pakc_order")  # a typo
    add(reg, print, kind="os.path.join")  # a dotted callable, as django.tasks kinds are
    add(reg, print, kind="no.such.module")
    warnings = check_hook_kinds(hooks=reg)
    assert [w.id for w in warnings] == ["awa.W010", "awa.W010"]
    assert "'no.such.module'" in warnings[0].msg and "'pakc_order'" in warnings[1].msg


def test_kinds_a_resolver_supplies_are_not_warned_about(reg):
    reg.add_resolver(
        lambda kind: (
            JobDefinition(kind, None, print, "default", 25, 2) if kind == "tasks:report" else None
        )
    )
    add(reg, print, kind="tasks:report")
    assert check_hook_kinds(hooks=reg) == []


@pytest.mark.parametrize(
    ("awa", "ids"),
    [
        ({}, ["awa.W013"]),
        ({"CALLBACK_SECRET": ""}, ["awa.W013"]),
        ({"CALLBACK_SECRETS": [""]}, ["awa.W013"]),
        ({"CALLBACK_ALLOW_UNSIGNED": True}, []),
        ({"CALLBACK_SECRET": "s3cret"}, []),
    ],
)
def test_a_missing_callback_secret_is_a_warning_while_debugging(settings, awa, ids):
    """Under DEBUG (a new project) the ordinary checks warn, so `migrate` and `awa_worker`
    still run; `check --deploy` makes it awa.E010 (tests/unit/test_callback_checks.py)."""
    settings.AWA = awa
    settings.DEBUG = True  # CALLBACK_ALLOW_UNSIGNED is itself an error without DEBUG (awa.E011)
    problems = check_callback_secret()
    assert [e.id for e in problems] == ids
    if problems:
        assert "CALLBACK_ALLOW_UNSIGNED" in (problems[0].hint or "")
        assert "export AWA_CALLBACK_SECRET=" in (problems[0].hint or "")


def test_wants_follows_hooks_added_and_removed_after_it_answered(reg):
    """The worker's filter remembers its answers; a hook registered or removed later must
    still change them (the cache is per set of hooks)."""
    assert not reg.wants("pack_order", Completed)
    add(reg, lambda event: None)
    assert reg.wants("pack_order", Completed)
    assert not reg.wants("pack_order", Started)
    assert not reg.wants("ship_order", Completed)
    reg.remove_hook(reg.hooks()[0])
    assert not reg.wants("pack_order", Completed)
    reg.add_hook(HookRegistration(None, lambda e: None, frozenset({Started}), None, "ship".__eq__))
    assert reg.wants("ship", Started) and not reg.wants("pack_order", Started)
    reg.clear_hooks()
    assert not reg.wants("ship", Started)
