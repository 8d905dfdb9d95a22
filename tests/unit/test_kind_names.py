"""Unit tests of kind naming (DESIGN §2: kind = snake_case of the args dataclass name) and
of what `@job` registers and refuses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import awa_django
from awa_django.exceptions import InvalidQueueName
from awa_django.registry import kind_for, registry


def named(name: str) -> type:
    return dataclass(type(name, (), {"__annotations__": {}}))


@pytest.mark.parametrize(
    ("class_name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("SendReceipt", "send_receipt"),
        ("Job", "job"),
        ("HTMLToPDF", "html_to_pdf"),
        ("ParseHTTPResponse", "parse_http_response"),
        ("Resize2XImage", "resize2_x_image"),
        ("V2Import", "v2_import"),
        ("already_snake", "already_snake"),
        ("ABC", "abc"),
    ],
)
def test_kind_is_snake_case_of_the_class_name(class_name: str, kind: str) -> None:
    assert kind_for(named(class_name)) == kind


def test_explicit_kind_attribute_wins() -> None:
    cls = named("CoreKindExplicit")
    cls.__awa_kind__ = "legacy.import"  # type: ignore[attr-defined]
    assert kind_for(cls) == "legacy.import"


def test_job_registers_the_snake_case_kind_with_its_defaults() -> None:
    @dataclass
    class CoreKindRegistered:
        n: int

    @awa_django.job(CoreKindRegistered, queue="core-kind", max_attempts=7, priority=3)
    def handler(job: awa_django.JobContext[CoreKindRegistered]) -> None:
        return None

    definition = registry.job("core_kind_registered")
    assert definition is not None
    assert (definition.handler, definition.args_type) == (handler, CoreKindRegistered)
    assert (definition.queue, definition.max_attempts, definition.priority) == ("core-kind", 7, 3)
    assert not definition.is_async
    assert registry.job_for_args(CoreKindRegistered) is definition


def test_job_with_an_explicit_kind_is_found_from_the_args_type() -> None:
    @dataclass
    class CoreKindRenamed:
        n: int

    @awa_django.job(CoreKindRenamed, kind="core.kind.renamed")
    async def handler(job: awa_django.JobContext[CoreKindRenamed]) -> None:
        return None

    definition = registry.job_for_args(CoreKindRenamed)
    assert definition is not None and definition.kind == "core.kind.renamed"
    assert definition.is_async


def test_a_second_handler_for_the_same_kind_is_refused() -> None:
    @dataclass
    class CoreKindTwice:
        n: int

    @awa_django.job(CoreKindTwice)
    def first(job: awa_django.JobContext[CoreKindTwice]) -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):

        @awa_django.job(CoreKindTwice)
        def second(job: awa_django.JobContext[CoreKindTwice]) -> None:
            return None

    # Registering the very same handler again (a re-import) is harmless.
    awa_django.job(CoreKindTwice)(first)


@pytest.mark.parametrize("bad", [dict, int, "CoreKind", named("X")()])
def test_job_needs_a_dataclass_class(bad: object) -> None:
    with pytest.raises(TypeError, match="must be a dataclass class"):
        awa_django.job(bad)  # type: ignore[arg-type]


def test_job_checks_queue_and_max_attempts() -> None:
    cls = named("CoreKindChecked")
    with pytest.raises(InvalidQueueName):
        awa_django.job(cls, queue="no spaces")
    with pytest.raises(ValueError, match="max_attempts"):
        awa_django.job(cls, max_attempts=0)
    assert registry.job("core_kind_checked") is None
