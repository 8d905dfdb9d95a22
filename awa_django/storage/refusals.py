"""What a refused write of an attempt's outcome means, decided in one place (decision 036).

A value the database cannot hold (SQLSTATE class 22, data exception; or text the client
cannot encode) would be refused again on every retry: `OutcomeNotStored`, the job fails
for good. Any other refusal (a trigger's exception, a constraint, a serialization failure,
a deadlock, a lock or statement timeout, a dropped connection) says nothing about the
values: `OutcomeRefused`, the attempt is retried.
"""

from __future__ import annotations

import psycopg
from django.db import DataError

from awa_django.exceptions import OutcomeNotStored, OutcomeRefused

# Class 22 is PostgreSQL's "data exception": invalid text, numbers out of range, an
# unsupported Unicode escape in jsonb, a NUL in text...
VALUE_CLASS = "22"


def refusal(error: BaseException) -> OutcomeNotStored | OutcomeRefused:
    """The typed refusal for a database (or encoding) `error` of an outcome write."""
    text = str(error).strip() or type(error).__name__
    if refused_for_its_values(error):
        return OutcomeNotStored(text)
    return OutcomeRefused(text)


def refused_for_its_values(error: BaseException) -> bool:
    """Whether `error` blames a value of the write: the same write would fail again."""
    # Django's wrapper keeps psycopg's error as its cause, with the SQLSTATE on it.
    for candidate in (error, error.__cause__):
        if isinstance(candidate, UnicodeError | psycopg.DataError | DataError):
            return True
        sqlstate = getattr(candidate, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(VALUE_CLASS):
            return True
    return False
