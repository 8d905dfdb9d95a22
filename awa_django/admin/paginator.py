"""A paginator that never counts a large table: exact up to a bound, estimated beyond it.

`COUNT(*)` over millions of job rows reads them all on every admin page. This paginator
counts at most `exact_limit + 1` rows (cheap: it stops there); past that it takes the
planner's row estimate from `EXPLAIN`, which PostgreSQL derives from `pg_class.reltuples`
for the whole table and from column statistics for a filtered one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

EXACT_LIMIT = 10_000

# Paginator is generic in django-stubs only; Django's class cannot be subscripted at runtime.
if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator


class EstimatedCountPaginator(_Paginator):
    """`count` is exact for small results and a planner estimate for large ones;
    `is_estimate` says which (templates print "about N")."""

    exact_limit = EXACT_LIMIT

    def __init__(self, object_list: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(object_list, *args, **kwargs)
        self.is_estimate = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        # Only the key in the subquery: annotations and ordering cost nothing to drop.
        bounded = queryset.order_by().values("pk")[: self.exact_limit + 1].count()
        if bounded <= self.exact_limit:
            return bounded
        self.is_estimate = True
        return max(planner_estimate(queryset), bounded)


def planner_estimate(queryset: QuerySet[Any]) -> int:
    """Rows the planner expects `queryset` to return (no rows are read)."""
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])
