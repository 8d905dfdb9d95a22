"""Settings of flow control (decision 017): AWA["QUEUES"][name] rate_limit, rate_scope,
min_workers and weight, and AWA["WORKER"]["max_workers"]; each mistake is an
ImproperlyConfigured that says what to change."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from awa_django.conf import AwaSettings, QueueConfig, awa_settings
from awa_django.limits import RateLimit


def settings_from(awa: dict[str, Any]) -> AwaSettings:
    with override_settings(AWA=awa):
        return awa_settings()


def test_a_rate_limit_is_global_by_default() -> None:
    s = settings_from({"QUEUES": {"api": {"concurrency": 20, "rate_limit": (50, 10)}}})
    assert s.queues["api"] == QueueConfig("api", 20, rate_limit=RateLimit(50.0, 10))
    assert s.queues["api"].rate_scope == "global"
    assert s.max_workers is None


def test_a_local_rate_limit_and_a_bare_rate() -> None:
    s = settings_from({"QUEUES": {"api": {"rate_limit": 2.5, "rate_scope": "local"}}})
    assert (s.queues["api"].rate_limit, s.queues["api"].rate_scope) == (
        RateLimit(2.5, 3),
        "local",
    )


def test_weighted_queues_default_their_cap_to_max_workers() -> None:
    s = settings_from(
        {
            "WORKER": {"max_workers": 64},
            "QUEUES": {"a": {"weight": 3, "min_workers": 2}, "b": {"concurrency": 8}},
        }
    )
    assert s.max_workers == 64
    assert (s.queues["a"].concurrency, s.queues["a"].weight, s.queues["a"].min_workers) == (
        64,
        3,
        2,
    )
    assert (s.queues["b"].concurrency, s.queues["b"].weight) == (8, 1.0)


@pytest.mark.parametrize(
    ("awa", "message"),
    [
        ({"QUEUES": {"a": {"rate_limit": (0, 1)}}}, r"\['a'\]: the rate must be"),
        ({"QUEUES": {"a": {"rate_limit": (5, 0)}}}, "the burst must be"),
        ({"QUEUES": {"a": {"rate_limit": 5, "rate_scope": "cluster"}}}, "rate_scope must be"),
        ({"QUEUES": {"a": {"weight": 2}}}, r'set AWA\["WORKER"\]'),
        ({"WORKER": 8}, "must be a dict with one key"),
        ({"WORKER": {"max_worker": 8}}, "must be a dict with one key"),
        ({"WORKER": {"max_workers": 0}}, "whole number >= 1"),
        ({"WORKER": {"max_workers": 4}, "QUEUES": {"a": {"weight": -1}}}, "weight must be"),
        (
            {"WORKER": {"max_workers": 4}, "QUEUES": {"a": {"min_workers": 3, "concurrency": 2}}},
            "min_workers must be a whole number 0..concurrency",
        ),
        (
            {"WORKER": {"max_workers": 4}, "QUEUES": {"a": {"min_workers": 4}, "b": {}}},
            r"queue\(s\) b \(min_workers 0\) could never run",
        ),
    ],
)
def test_mistakes_say_what_to_change(awa: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        settings_from(awa)


def test_minimums_beyond_the_total_name_both_numbers() -> None:
    awa = {
        "WORKER": {"max_workers": 4},
        "QUEUES": {"a": {"min_workers": 3}, "b": {"min_workers": 2}},
    }
    with pytest.raises(ImproperlyConfigured, match=r"add up to 5, more than .* = 4"):
        settings_from(awa)
