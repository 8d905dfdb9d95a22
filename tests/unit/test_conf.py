"""Unit tests of settings (`awa_django.conf`): defaults, the QUEUES forms, validation
errors with their fix in the message, queue-name rules and NOTIFY channel naming."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from awa_django.channels import channel_for, channel_sql
from awa_django.conf import AwaSettings, QueueConfig, awa_settings, validate_queue_name
from awa_django.exceptions import InvalidQueueName


def settings_from(awa: dict[str, Any]) -> AwaSettings:
    with override_settings(AWA=awa):
        return awa_settings()


def test_defaults_match_the_design() -> None:
    s = settings_from({})
    assert s.queues == {"default": QueueConfig("default", concurrency=10, deadline=300.0)}
    assert (s.heartbeat_interval, s.heartbeat_staleness) == (30.0, 90.0)
    assert (s.completed_retention, s.failed_retention) == (24 * 3600.0, 72 * 3600.0)
    assert s.poll_interval == 0.2
    assert s.standby_poll_interval == 1.0  # decision 025
    assert s.database == "default"
    assert s.max_args_bytes == 256 * 1024
    assert s.metrics_max_kinds == 100


def test_scalar_settings_are_read_by_upper_case_name() -> None:
    s = settings_from({"HEARTBEAT_INTERVAL": 0.5, "MAX_ARGS_BYTES": 100, "DATABASE": "other"})
    assert (s.heartbeat_interval, s.max_args_bytes, s.database) == (0.5, 100, "other")


def test_settings_are_re_read_on_every_call() -> None:
    with override_settings(AWA={"POLL_INTERVAL": 1.5}):
        assert awa_settings().poll_interval == 1.5
    with override_settings(AWA={"POLL_INTERVAL": 2.5}):
        assert awa_settings().poll_interval == 2.5


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("POLL_INTERVAL", "0.2"),
        ("HEARTBEAT_INTERVAL", -1),
        ("HEARTBEAT_STALENESS", float("nan")),
        ("LEADER_TTL", True),
        ("MAX_ARGS_BYTES", 1.5),
        ("MAX_ARGS_BYTES", 0),
        ("SYNC_THREADS", "4"),
        ("CALLBACK_ALLOW_UNSIGNED", "yes"),
        ("CALLBACK_SECRET", 123),
        ("DATABASE", None),
        ("METRICS_MAX_KINDS", 0),
        ("METRICS_MAX_KINDS", "50"),
    ],
)
def test_scalar_settings_of_the_wrong_type_are_configuration_errors(key: str, value: Any) -> None:
    # Caught here, not as a TypeError deep inside a running worker.
    with pytest.raises(ImproperlyConfigured, match=rf'AWA\["{key}"\] must be'):
        settings_from({key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [("POLL_INTERVAL", 1), ("SYNC_THREADS", None), ("SYNC_THREADS", 8), ("CALLBACK_SECRET", None)],
)
def test_scalar_settings_of_the_right_type_are_accepted(key: str, value: Any) -> None:
    settings_from({key: value})


@pytest.mark.parametrize(
    "options",
    [{"concurrency": "4"}, {"concurrency": 2.5}, {"concurrency": True}, {"deadline": "60"}],
)
def test_queue_options_of_the_wrong_type_are_configuration_errors(options: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="concurrency must be"):
        settings_from({"QUEUES": {"a": options}})


def test_unknown_setting_names_the_known_ones() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"Unknown AWA setting\(s\): HEARTBEET") as e:
        settings_from({"HEARTBEET": 1})
    assert "HEARTBEAT_INTERVAL" in str(e.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["a", "b"], {"a": QueueConfig("a"), "b": QueueConfig("b")}),
        ({"a": 3}, {"a": QueueConfig("a", concurrency=3)}),
        ({"a": None}, {"a": QueueConfig("a")}),
        ({"a": {"concurrency": 2, "deadline": 0}}, {"a": QueueConfig("a", 2, 0)}),
    ],
)
def test_queues_forms(raw: Any, expected: dict[str, QueueConfig]) -> None:
    assert settings_from({"QUEUES": raw}).queues == expected


@pytest.mark.parametrize("raw", [{}, [], "default", 5])
def test_queues_must_be_a_non_empty_mapping(raw: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match="must be a non-empty dict"):
        settings_from({"QUEUES": raw})


def test_queue_option_typo_lists_allowed_keys() -> None:
    with pytest.raises(
        ImproperlyConfigured,
        match="allowed keys are concurrency, deadline, atomic, dead_letter, rate_limit",
    ):
        settings_from({"QUEUES": {"a": {"concurency": 2}}})


def test_queue_atomic_default_is_parsed() -> None:
    queues = settings_from({"QUEUES": {"a": {"atomic": True}, "b": {}}}).queues
    assert (queues["a"].atomic, queues["b"].atomic) == (True, False)


@pytest.mark.parametrize("value", [1, "yes", None, 0.0])
def test_queue_atomic_must_be_a_bool(value: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match=r'\["atomic"\] must be True or False'):
        settings_from({"QUEUES": {"a": {"atomic": value}}})


@pytest.mark.parametrize("options", [{"concurrency": 0}, {"concurrency": 10_001}, {"deadline": -1}])
def test_queue_limits_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(ImproperlyConfigured, match="concurrency must be 1 to 10000"):
        settings_from({"QUEUES": {"a": options}})


def test_bad_queue_name_in_settings_is_rejected() -> None:
    with pytest.raises(InvalidQueueName):
        settings_from({"QUEUES": {"bad name": 1}})


def test_unconfigured_queue_gets_defaults() -> None:
    assert settings_from({}).queue("elsewhere") == QueueConfig("elsewhere")


def test_with_overrides_ignores_none() -> None:
    s = settings_from({}).with_overrides(poll_interval=0.05, heartbeat_interval=None)
    assert (s.poll_interval, s.heartbeat_interval) == (0.05, 30.0)


# -- callback secrets ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("awa", "secrets"),
    [
        ({}, ()),
        ({"CALLBACK_SECRET": None}, ()),
        ({"CALLBACK_SECRET": ""}, ()),  # an unset environment variable: no secret
        ({"CALLBACK_SECRET": "one"}, ("one",)),
        ({"CALLBACK_SECRETS": ["new", "old"]}, ("new", "old")),
        ({"CALLBACK_SECRETS": ("new",)}, ("new",)),
        ({"CALLBACK_SECRETS": []}, ()),
        ({"CALLBACK_SECRETS": ["new"], "CALLBACK_SECRET": None}, ("new",)),
        # `[os.environ.get("AWA_CALLBACK_SECRET", "")]` in a shell without it: no secret,
        # which the system checks report with the fix (awa.E010 / awa.W013), not a crash.
        ({"CALLBACK_SECRETS": [""]}, ()),
        ({"CALLBACK_SECRETS": ["new", ""]}, ("new",)),
    ],
)
def test_callback_secret_is_a_one_element_callback_secrets(
    awa: dict[str, Any], secrets: tuple[str, ...]
) -> None:
    s = settings_from(awa)
    assert s.callback_secrets == secrets
    assert s.callback_secret == (secrets[0] if secrets else None)  # the one that signs


def test_callback_secret_and_callback_secrets_together_are_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"CALLBACK_SECRETS.*not both"):
        settings_from({"CALLBACK_SECRET": "a", "CALLBACK_SECRETS": ["b"]})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # A bare string would otherwise be a list of one-character secrets.
        ("one-string", r'AWA\["CALLBACK_SECRETS"\] must be a list of strings, .* got a str\.'),
        (5, r'AWA\["CALLBACK_SECRETS"\] must be a list of strings, .* got a int\.'),
        (["ok", None], r'AWA\["CALLBACK_SECRETS"\]\[1\] must be a string, got a NoneType\.'),
        ([b"bytes"], r'AWA\["CALLBACK_SECRETS"\]\[0\] must be a string, got a bytes\.'),
    ],
)
def test_callback_secrets_must_be_a_list_of_strings(value: Any, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message) as raised:
        settings_from({"CALLBACK_SECRETS": value})
    assert "ok" not in str(raised.value).replace("NoneType", "")  # no value: it may be secret


# -- queue names --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "a", "x" * 200, "Email.v2:high-prio_1"])
def test_valid_queue_names(name: str) -> None:
    assert validate_queue_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "x" * 201, "has space", "semi;colon", "quote'", "ünïcode", "tab\t", "new\nline"],
)
def test_invalid_queue_names(name: str) -> None:
    with pytest.raises(InvalidQueueName, match="invalid queue name"):
        validate_queue_name(name)


def test_a_trailing_newline_is_not_a_valid_queue_name() -> None:
    # `$` matches before a final "\n"; the rule must hold for the whole string.
    with pytest.raises(InvalidQueueName):
        validate_queue_name("default\n")


@pytest.mark.parametrize("name", [None, 5, b"default", ["default"]])
def test_non_string_queue_names(name: Any) -> None:
    with pytest.raises(InvalidQueueName):
        validate_queue_name(name)


# -- channels -----------------------------------------------------------------------------
def test_short_queue_channel_is_readable() -> None:
    assert channel_for("email") == "awa:email"


def test_channel_of_the_longest_plain_name_fits_exactly() -> None:
    name = "q" * 59  # "awa:" + 59 = 63 bytes
    assert channel_for(name) == "awa:" + name


@pytest.mark.parametrize("name", ["q" * 60, "q" * 200])
def test_long_queue_channel_is_hashed_within_63_bytes(name: str) -> None:
    channel = channel_for(name)
    assert channel.startswith("awa:") and len(channel.encode()) <= 63
    assert channel != channel_for(name[:-1] + "r")  # distinct queues, distinct channels


def test_channel_sql_mentions_the_same_limit() -> None:
    assert "63" in channel_sql("queue") and "md5(queue)" in channel_sql("queue")


def test_hook_overflow_is_drop_or_pause() -> None:
    assert settings_from({}).hook_overflow == "drop"
    assert settings_from({"HOOK_OVERFLOW": "pause", "HOOK_BACKLOG": 50}).hook_backlog == 50
    with pytest.raises(ImproperlyConfigured, match="HOOK_OVERFLOW"):
        settings_from({"HOOK_OVERFLOW": "block"})


def test_unknown_kind_grace_is_seconds_and_may_be_zero() -> None:
    assert settings_from({}).unknown_kind_grace == 3600.0
    assert settings_from({"UNKNOWN_KIND_GRACE": 0}).unknown_kind_grace == 0
    with pytest.raises(ImproperlyConfigured, match="UNKNOWN_KIND_GRACE"):
        settings_from({"UNKNOWN_KIND_GRACE": -1})


def test_dead_letter_is_a_per_queue_opt_in() -> None:
    settings = settings_from({"QUEUES": {"a": {}, "b": {"dead_letter": True}}})
    assert settings.queue("a").dead_letter is False
    assert settings.dead_letter_queues == ("b",)
    assert settings.dead_letter_retention == 30 * 86400


@pytest.mark.parametrize("value", [1, "yes", None])
def test_dead_letter_must_be_a_bool(value: Any) -> None:
    with pytest.raises(ImproperlyConfigured, match=r'\["dead_letter"\] must be True or False'):
        settings_from({"QUEUES": {"a": {"dead_letter": value}}})


def test_dead_letter_retention_is_checked() -> None:
    with pytest.raises(ImproperlyConfigured, match="DEAD_LETTER_RETENTION"):
        settings_from({"DEAD_LETTER_RETENTION": -1})


@pytest.mark.parametrize("key", ["POLL_INTERVAL", "STANDBY_POLL_INTERVAL", "LEADER_TTL"])
def test_a_zero_interval_is_a_system_check_error(key: str) -> None:
    from awa_django.checks import check_settings

    with override_settings(AWA={key: 0}):
        assert [m.id for m in check_settings()] == ["awa.E004"]
