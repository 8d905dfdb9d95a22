"""Registering follow-up builders (decision 015): keyed by kind and outcome, checked at
registration, isolated per test like hooks. No database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import awa_django
from awa_django.events import Cancelled, Completed, Exhausted, Rescued, Retried, WaitingForCallback
from awa_django.registry import registry


@dataclass
class Paid:
    order_id: int


REGISTRARS = [
    (awa_django.on_completed_enqueue, Completed),
    (awa_django.on_retried_enqueue, Retried),
    (awa_django.on_exhausted_enqueue, Exhausted),
    (awa_django.on_cancelled_enqueue, Cancelled),
    (awa_django.on_waiting_for_callback_enqueue, WaitingForCallback),
    (awa_django.on_rescued_enqueue, Rescued),
]


@pytest.mark.parametrize(
    ("register", "event"), REGISTRARS, ids=lambda v: getattr(v, "__name__", "")
)
def test_each_registrar_keys_its_builder_by_kind_and_its_outcome_only(
    register: Any, event: type
) -> None:
    def build(args: Paid, outcome: Any) -> list[Any]:
        return []

    assert register(Paid, build) is build
    assert [r.build for r in registry.follow_ups_for("paid", event)] == [build]
    others = [e for _, e in REGISTRARS if e is not event]
    assert not any(registry.follow_ups_for("paid", other) for other in others)


def test_builders_of_one_outcome_keep_their_registration_order() -> None:
    def first(args: Paid, done: Completed[Paid]) -> list[Any]:
        return []

    def second(args: Paid, done: Completed[Paid]) -> list[Any]:
        return []

    awa_django.on_completed_enqueue(Paid, first)
    awa_django.on_completed_enqueue(Paid, second)
    assert [r.build for r in registry.follow_ups_for("paid", Completed)] == [first, second]


def test_a_builder_must_be_callable() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        awa_django.on_completed_enqueue(Paid, "send_invoice")  # type: ignore[arg-type]


def test_the_args_type_must_be_a_dataclass() -> None:
    with pytest.raises(TypeError, match="must be a dataclass"):
        awa_django.on_completed_enqueue(dict, lambda a, e: [])


def test_follow_up_carries_its_enqueue_options() -> None:
    built = awa_django.follow_up(Paid(1), queue="email", priority=1, tags=["x"])
    assert built.args == Paid(1)
    assert (built.options.queue, built.options.priority, tuple(built.options.tags)) == (
        "email",
        1,
        ("x",),
    )
