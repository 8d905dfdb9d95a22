"""Settings for the benchmark: the test project plus the bench app, on its own database.

The database defaults to `awa_bench` on the server of `DATABASE_URL` (so under
`devtools/pgenv.py` the embedded server), which `bench/run.py` drops and recreates;
override it with `AWA_BENCH_DATABASE_URL` (the name must contain "bench": the script drops
it).
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import AWA, INSTALLED_APPS, LOGGING, env

_SERVER_URL = env("DATABASE_URL").rsplit("/", 1)[0]
BENCH_DATABASE_URL = env("AWA_BENCH_DATABASE_URL", default=f"{_SERVER_URL}/awa_bench")
# Persistent connections, as a worker deployment should have them: an atomic handler
# (drain_atomic) runs on its thread's Django connection, which CONN_MAX_AGE=0 would close
# after every job (plain handlers that do not query are unaffected).
DATABASES = {
    "default": {
        **env.db_url_config(BENCH_DATABASE_URL),
        "CONN_MAX_AGE": 600,
    }
}

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchapp"]

# Production configuration: with DEBUG on, Django logs every query with its parameters,
# which for enqueue_many means formatting 10 arrays x N rows into a string per call.
DEBUG = False

# AWA_BENCH_DEAD_LETTER=1 (the fail_dead_letter scenario) makes `bench` a dead-letter queue.
_DEAD_LETTER = env.bool("AWA_BENCH_DEAD_LETTER", default=False)
AWA = {**AWA, "QUEUES": {"bench": {"concurrency": 10, "dead_letter": _DEAD_LETTER}}}
# The drain_rate_limited scenario: "rate,burst" for the bench queue (a global limit).
if env.str("AWA_BENCH_RATE_LIMIT", default=""):
    _rate, _burst = env.str("AWA_BENCH_RATE_LIMIT").split(",")
    AWA["QUEUES"]["bench"]["rate_limit"] = (float(_rate), int(_burst))

# The soak scenario keeps finished jobs a minute, pruned every 10 s, so the table reaches
# a steady size within its run (production keeps them 24 h: the same equilibrium, larger).
if env.str("AWA_BENCH_RETENTION", default=""):
    _retention = float(env.str("AWA_BENCH_RETENTION"))
    AWA.update(COMPLETED_RETENTION=_retention, FAILED_RETENTION=_retention, PRUNE_INTERVAL=10.0)

# Worker logs at WARNING so a drain of 20,000 jobs does not measure the console.
LOGGING = {
    **LOGGING,
    "loggers": {"awa_django": {"handlers": ["console"], "level": "WARNING"}},
}
