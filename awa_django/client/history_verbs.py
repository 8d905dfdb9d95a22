"""The Client's history verbs (docs/operations.md, decision 021), a base class of `Client`
so that client.py stays one screenful per concern; the queries are in observability.py."""

from __future__ import annotations

from awa_django.client import observability
from awa_django.snapshot import KindFigures, RollupPoint


class HistoryVerbs:
    @property
    def using(self) -> str:
        raise NotImplementedError

    def queue_history(self, minutes: int = 60) -> list[RollupPoint]:
        """Per-queue, per-minute rollups of the last `minutes`, oldest first."""
        return observability.history(self.using, minutes)

    def kind_figures(self, minutes: int = 60) -> list[KindFigures]:
        """Per kind: jobs finalized in the last `minutes`, failure rate, p95 run time."""
        return observability.kinds(self.using, minutes)

    def state_counts(self) -> dict[str, int]:
        """Jobs per live state (all but completed), over every queue."""
        return observability.states(self.using)

    def queue_outcomes(self, minutes: int = 5) -> dict[str, tuple[int, int]]:
        """{queue: (completed, failed)} of the jobs finalized in the last `minutes`."""
        return observability.outcomes(self.using, minutes)
