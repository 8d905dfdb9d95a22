"""The Client's per-key concurrency verbs (docs/flow-control.md, decision 045), a base class
of `Client`: runtime overrides of a kind's per-key limits (one ORM row, read by every
admission of that kind) and the busiest keys operators read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from awa_django import keys, limits
from awa_django.client.twins import async_twin
from awa_django.codec import storable_text
from awa_django.exceptions import InvalidKeyLimits
from awa_django.limits import RateLimit
from awa_django.options import check_kind
from awa_django.snapshot import KeyFigures
from awa_django.states import JobState
from awa_django.storage.sql import keys as keys_sql

if TYPE_CHECKING:
    from awa_django.storage.models import KeyLimit

MAX_BY_CHARS = 200  # awa_key_limits.updated_by is varchar(200)
# A keyed job in these states holds a slot of its key or waits for one.
LIVE_KEYED_STATES = (
    JobState.AVAILABLE,
    JobState.RUNNING,
    JobState.WAITING_EXTERNAL,
    JobState.WAITING_SLOT,
)


class KeyVerbs:
    @property
    def using(self) -> str:
        raise NotImplementedError

    def set_key_limits(
        self,
        kind: str,
        *,
        max_in_flight: int | None = None,
        rate_limit: RateLimit | tuple[float, int] | float | None = None,
        by: str = "",
    ) -> KeyLimit:
        """Override the per-key limits of `kind`'s jobs (both replaced; None: the declared
        value applies). Admissions from the next statement on use them; jobs already
        admitted keep their slots, and the leader's sweep admits waiting jobs into slots
        a raised max opened. InvalidKeyLimits on a bad value."""
        from awa_django.storage.models import KeyLimit

        check_kind(kind)
        try:
            cap = None if max_in_flight is None else keys.check_max_in_flight(max_in_flight)
            rate = None if rate_limit is None else limits.rate_limit(rate_limit)
        except ValueError as exc:
            raise InvalidKeyLimits(f"kind {kind!r}: {exc}") from exc
        row, _ = KeyLimit.objects.using(self.using).update_or_create(
            kind=kind,
            defaults={
                "max_in_flight": cap,
                "rate": rate.rate if rate else None,
                "burst": rate.burst if rate else None,
                "updated_by": storable_text(str(by))[:MAX_BY_CHARS],
            },
        )
        return row

    def clear_key_limits(self, kind: str) -> None:
        """Drop `kind`'s override: its declared per-key limits apply again."""
        from awa_django.storage.models import KeyLimit

        KeyLimit.objects.using(self.using).filter(kind=check_kind(kind)).delete()

    def busiest_keys(self, limit: int = 10, *, kind: str | None = None) -> list[KeyFigures]:
        """The concurrency keys with the most jobs holding a slot or waiting for one,
        busiest first (key text as enqueued, in flight, waiting); with `kind`, only that
        kind's jobs are counted."""
        limit = max(1, min(int(limit), 1000))
        if kind is None:
            return keys_sql.key_busiest(limit=limit).run(self.using)
        return _busiest_keys_of(self.using, check_kind(kind), limit)

    def key_overrides(self) -> dict[str, KeyLimit]:
        """{kind: its runtime override} of every kind that has one (set_key_limits)."""
        from awa_django.storage.models import KeyLimit

        return {row.kind: row for row in KeyLimit.objects.using(self.using).order_by("kind")}

    aset_key_limits = async_twin(set_key_limits)
    aclear_key_limits = async_twin(clear_key_limits)
    abusiest_keys = async_twin(busiest_keys)
    akey_overrides = async_twin(key_overrides)


def _busiest_keys_of(using: str, kind: str, limit: int) -> list[KeyFigures]:
    """One kind's busiest keys, from its live keyed jobs (one grouped read on the kind;
    operators' pages, not the hot path, hence the ORM). A job counts in flight while it
    holds a slot, waiting while it is waiting_slot; the text is the key as enqueued."""
    from django.db.models import Count, F, Q
    from django.db.models.fields.json import KeyTextTransform, KeyTransform

    from awa_django.storage.models import Job

    rows = (
        Job.objects.using(using)
        .filter(kind=kind, state__in=LIVE_KEYED_STATES, concurrency_key__isnull=False)
        .annotate(key_text=KeyTextTransform("key", KeyTransform(keys.KEY_METADATA, "metadata")))
        .values_list("key_text")
        .annotate(
            in_flight=Count("id", filter=Q(key_slot__isnull=False)),
            waiting=Count("id", filter=Q(state=JobState.WAITING_SLOT)),
        )
        .order_by(-(F("in_flight") + F("waiting")), "key_text")[:limit]
    )
    return [KeyFigures(key or "", in_flight, waiting) for key, in_flight, waiting in rows]
