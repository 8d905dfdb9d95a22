"""Unit tests of enqueue planning's template memo (execution/rows.py): a call without per-call
inputs is planned once per args type and options, and the memo never lets through what
planning would refuse, nor outlives the declaration it was planned from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from awa_django.exceptions import InvalidEnqueueOption
from awa_django.execution import rows
from awa_django.execution.rows import NO_OPTIONS, EnqueueOptions, plan_template
from awa_django.registry import JobDefinition, registry


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no template kept (and leaves none behind)."""
    monkeypatch.setattr(rows, "_templates", {})


@dataclass
class PlannedOnce:
    n: int


@dataclass
class LaterNamed:
    n: int


@dataclass
class ResolvedKind:
    n: int


def test_a_call_without_per_call_inputs_is_planned_once() -> None:
    first = plan_template(PlannedOnce(1), NO_OPTIONS)
    assert plan_template(PlannedOnce(2), EnqueueOptions()) is first
    tagged = plan_template(PlannedOnce(3), EnqueueOptions(queue="memo", tags=["a", "b"]))
    assert plan_template(PlannedOnce(4), EnqueueOptions(queue="memo", tags=("a", "b"))) is tagged
    assert (tagged.queue, tagged.tags) == ("memo", ["a", "b"])
    assert tagged is not first


@pytest.mark.parametrize(
    ("accepted", "refused"),
    [
        ({"priority": 1}, {"priority": True}),  # True == 1, and hashes alike
        ({"max_attempts": 1}, {"max_attempts": True}),
        ({"max_attempts": 2}, {"max_attempts": 2.0}),
        ({"priority": 2}, {"priority": 2.0}),
    ],
)
def test_equal_values_of_other_types_are_still_refused(
    accepted: dict[str, object], refused: dict[str, object]
) -> None:
    plan_template(PlannedOnce(1), EnqueueOptions(**accepted))  # type: ignore[arg-type]
    with pytest.raises(InvalidEnqueueOption):
        plan_template(PlannedOnce(1), EnqueueOptions(**refused))  # type: ignore[arg-type]


def test_a_bad_tag_is_refused_after_good_ones_were_planned() -> None:
    plan_template(PlannedOnce(1), EnqueueOptions(tags=["ok"]))
    with pytest.raises(InvalidEnqueueOption):
        plan_template(PlannedOnce(1), EnqueueOptions(tags=[""]))
    with pytest.raises(InvalidEnqueueOption):
        plan_template(PlannedOnce(1), EnqueueOptions(tags="ok"))


@pytest.fixture
def declarations() -> Iterator[list[JobDefinition]]:
    """A resolver answering for `resolved_kind` with the last definition in the list."""
    answers: list[JobDefinition] = []

    def resolve(kind: str) -> JobDefinition | None:
        return answers[-1] if kind == "resolved_kind" and answers else None

    saved = list(registry._resolvers)
    registry.add_resolver(resolve)
    try:
        yield answers
    finally:
        registry._resolvers[:] = saved


def definition(queue: str) -> JobDefinition:
    return JobDefinition("resolved_kind", ResolvedKind, lambda args: None, queue, 3, 2)


def test_a_new_declaration_of_the_kind_is_planned_afresh(
    declarations: list[JobDefinition],
) -> None:
    declarations.append(definition("first-queue"))
    first = plan_template(ResolvedKind(1), NO_OPTIONS)
    assert plan_template(ResolvedKind(1), NO_OPTIONS) is first
    declarations.append(definition("second-queue"))
    second = plan_template(ResolvedKind(1), NO_OPTIONS)
    assert (first.queue, second.queue) == ("first-queue", "second-queue")


def test_a_kind_given_to_the_args_class_later_is_planned_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`@job(LaterNamed, kind=...)` imported after a first enqueue names the class's kind
    then: the template planned before must not keep the old one."""
    assert plan_template(LaterNamed(1), NO_OPTIONS).kind == "later_named"
    monkeypatch.setattr(LaterNamed, "__awa_kind__", "renamed_later", raising=False)
    assert plan_template(LaterNamed(1), NO_OPTIONS).kind == "renamed_later"
