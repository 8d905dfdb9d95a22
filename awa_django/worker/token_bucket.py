"""The token-bucket arithmetic of a rate limit, with no clock and no I/O: the caller passes
the time. The local rate gate runs it in the process; the global one runs the same rule in
one SQL statement (storage/sql/queues.py, `rate_bucket_take`). Decision 017."""

from __future__ import annotations

from dataclasses import dataclass

from awa_django.limits import RateLimit


@dataclass(frozen=True, slots=True)
class Grant:
    """`granted` tokens taken now; when fewer than wanted, the next token is due in
    `wait` seconds (0 when every wanted token was granted)."""

    granted: int
    wait: float


def next_token_in(tokens: float, rate: float) -> float:
    """Seconds until the bucket holds one whole token again."""
    return max(0.0, (1.0 - tokens) / rate)


class TokenBucket:
    """Starts full (`burst` tokens), refills continuously at `rate` per second up to
    `burst`; a take grants whole tokens only, so claims never exceed rate x t + burst."""

    def __init__(self, limit: RateLimit, now: float) -> None:
        self.limit = limit
        self.tokens = float(limit.burst)
        self.at = now

    def retune(self, limit: RateLimit) -> None:
        """A new limit (a runtime override) keeps the tokens held, capped at the new burst."""
        self.limit = limit
        self.tokens = min(self.tokens, float(limit.burst))

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.at)  # a clock that steps back creates no tokens
        self.tokens = min(float(self.limit.burst), self.tokens + elapsed * self.limit.rate)
        self.at = max(self.at, now)

    def take(self, wanted: int, now: float) -> Grant:
        self.refill(now)
        granted = max(0, min(wanted, int(self.tokens)))
        self.tokens -= granted
        wait = 0.0 if granted >= wanted else next_token_in(self.tokens, self.limit.rate)
        return Grant(granted, wait)

    def give_back(self, unused: int) -> None:
        """Tokens taken for a claim that found fewer jobs: the bucket gets them back."""
        self.tokens = min(float(self.limit.burst), self.tokens + max(0, unused))
