"""The options of per-key concurrency (decision 045), checked before any SQL: the key an
enqueue gives, `@job(concurrency_key=, max_in_flight=, key_rate_limit=)`, the queue
defaults in settings, and how a planned row carries its key."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

import awa_django
from awa_django.conf import awa_settings
from awa_django.exceptions import InvalidEnqueueOption, InvalidJobDeclaration
from awa_django.execution.rows import EnqueueOptions, plan_many, plan_one
from awa_django.keys import KEY_METADATA, MAX_KEY_CHARS, KeyLimits, check_key, key_digest
from awa_django.limits import RateLimit


@dataclass
class UnitKeyed:
    tenant: str


@awa_django.job(UnitKeyed, queue="unit-keys", concurrency_key=lambda a: a.tenant)
def unit_keyed(job: awa_django.JobContext[UnitKeyed]) -> None:
    return None


@dataclass
class UnitKeyedRated:
    tenant: int


@awa_django.job(
    UnitKeyedRated,
    queue="unit-keys",
    concurrency_key=lambda a: a.tenant,
    max_in_flight=3,
    key_rate_limit=2.5,
)
def unit_keyed_rated(job: awa_django.JobContext[UnitKeyedRated]) -> None:
    return None


@dataclass
class UnitPlain:
    n: int


@awa_django.job(UnitPlain, queue="unit-keys")
def unit_plain(job: awa_django.JobContext[UnitPlain]) -> None:
    return None


def spec_of(args: Any, **options: Any) -> Any:
    template, _ = plan_one(args, EnqueueOptions(**options))
    return json.loads(template.metadata).get(KEY_METADATA)


# -- keys ---------------------------------------------------------------------------------
@given(st.text(min_size=1, max_size=MAX_KEY_CHARS).filter(lambda t: "\x00" not in t))
def test_any_storable_text_up_to_200_characters_is_a_key(key: str) -> None:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(InvalidEnqueueOption):
            check_key(key)
        return
    assert check_key(key) == key
    assert len(key_digest(key)) == 16


@given(st.integers())
def test_an_int_key_is_its_text(key: int) -> None:
    assert check_key(key) == str(key)


@pytest.mark.parametrize("key", ["", "x" * 201, "a\x00b", True, 1.5, b"k", None, ["a"]], ids=repr)
def test_bad_keys_are_refused(key: object) -> None:
    with pytest.raises(InvalidEnqueueOption):
        check_key(key)


# -- planning -----------------------------------------------------------------------------
def test_the_declared_key_and_the_queue_default_limits_ride_in_metadata() -> None:
    assert spec_of(UnitKeyed("acme")) == {"key": "acme", "max": 1}
    assert spec_of(UnitKeyedRated(7)) == {"key": "7", "max": 3, "rate": 2.5, "burst": 3}


def test_an_enqueue_key_overrides_the_declared_one_and_keys_an_unkeyed_kind() -> None:
    assert spec_of(UnitKeyed("acme"), concurrency_key="vip")["key"] == "vip"
    assert spec_of(UnitPlain(1), concurrency_key=42) == {"key": "42", "max": 1}
    assert spec_of(UnitPlain(1)) is None


def test_bulk_planning_keys_each_row_by_its_own_args() -> None:
    rows = plan_many([UnitKeyed("a"), UnitKeyed("b"), UnitPlain(1)], EnqueueOptions())
    specs = [json.loads(t.metadata).get(KEY_METADATA) for t, _ in rows.rows]
    assert [s and s["key"] for s in specs] == ["a", "b", None]


def test_queue_settings_give_keyed_jobs_their_defaults() -> None:
    awa = {"QUEUES": {"unit-keys": {"max_in_flight": 4, "key_rate_limit": (1, 2)}}}
    with override_settings(AWA=awa):
        assert spec_of(UnitKeyed("acme")) == {"key": "acme", "max": 4, "rate": 1.0, "burst": 2}
        # The declaration wins over the queue's defaults.
        assert spec_of(UnitKeyedRated(1))["max"] == 3


def test_user_metadata_cannot_forge_a_key() -> None:
    with pytest.raises(InvalidEnqueueOption, match="reserved"):
        plan_one(UnitPlain(1), EnqueueOptions(metadata={KEY_METADATA: {"key": "x"}}))


def test_key_limits_spec_without_a_rate() -> None:
    assert KeyLimits(2).spec("k") == {"key": "k", "max": 2}
    assert KeyLimits(2, RateLimit(1.0, 1)).spec("k")["rate"] == 1.0


# -- declarations and settings ------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"concurrency_key": "tenant"},
        {"concurrency_key": lambda a: a, "max_in_flight": 0},
        {"concurrency_key": lambda a: a, "max_in_flight": 1001},
        {"concurrency_key": lambda a: a, "max_in_flight": True},
        {"concurrency_key": lambda a: a, "key_rate_limit": (0, 1)},
        {"concurrency_key": lambda a: a, "key_rate_limit": "fast"},
    ],
    # Not repr: a lambda's repr holds its address, and pytest-xdist needs the same test ids
    # in every process.
    ids=["key-not-callable", "max-0", "max-1001", "max-bool", "rate-0", "rate-str"],
)
def test_bad_declarations_fail_at_import(options: dict[str, Any]) -> None:
    @dataclass
    class UnitBadKeyed:
        n: int

    with pytest.raises(InvalidJobDeclaration):
        awa_django.job(UnitBadKeyed, queue="unit-keys", **options)


@pytest.mark.parametrize(
    "queue", [{"max_in_flight": 0}, {"max_in_flight": "2"}, {"key_rate_limit": (1, 0)}]
)
def test_bad_queue_defaults_are_improperly_configured(queue: dict[str, Any]) -> None:
    with (
        override_settings(AWA={"QUEUES": {"unit-keys": queue}}),
        pytest.raises(ImproperlyConfigured, match="unit-keys"),
    ):
        awa_settings()
