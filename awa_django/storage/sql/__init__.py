"""Every hand-written statement on the hot path, by name (DESIGN §3, STYLE §4).

Each statement is a `Statement`: its name starts with the entity it touches, its comment
names its parameters, the index it relies on and any planner trap. Everything that is not
on the hot path uses the ORM instead. Both the runtime (psycopg connections) and the client
(Django's connection) run these same statements.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Statement:
    name: str
    sql: str

    def __str__(self) -> str:
        return self.name
