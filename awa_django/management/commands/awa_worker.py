"""`python manage.py awa_worker`: run the job worker (see docs/worker.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from awa_django.codec import unstorable_character
from awa_django.conf import (
    MAX_CONCURRENCY,
    QueueConfig,
    check_weighted,
    load_settings,
    validate_queue_name,
)
from awa_django.exceptions import InvalidQueueName, MetricsUnavailable
from awa_django.registry import registry
from awa_django.worker.runtime import run_worker
from awa_django.worker.supervisor import WORKER_INDEX_ENV, Supervisor

ZERO_ALLOWED = {"unknown_kind_grace"}
TIMING_FLAGS = {
    "poll_interval": "seconds between polls when no NOTIFY arrives (default 0.2)",
    "standby_poll_interval": "seconds between polls of a process that does not hold the "
    "queue's waker role (default 1)",
    "heartbeat_interval": "seconds between lease heartbeats (default 30)",
    "heartbeat_staleness": "seconds after which a silent attempt is rescued (default 90)",
    "rescue_interval": "seconds between rescue sweeps by the leader (default 30)",
    "promote_interval": "seconds between promotions of due jobs (default 0.25)",
    "prune_interval": "seconds between retention prunes (default 60)",
    "leader_ttl": "seconds a maintenance leader lease lasts (default 30)",
    "election_interval": "seconds between election attempts of non-leaders (default 10)",
    "shutdown_grace": "seconds in-flight jobs get to finish on SIGTERM (default 30)",
    "unknown_kind_grace": "seconds a job waits before a worker without its handler claims "
    "and fails it (default 3600; 0 claims every kind and fails unknown ones at once)",
}


def queue_option(value: str) -> tuple[str, int]:
    name, _, count = value.partition("=")
    try:
        validate_queue_name(name)
        concurrency = int(count) if count else 10
    except (InvalidQueueName, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected NAME=CONCURRENCY, got {value!r}: {exc}"
        ) from exc
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(f"concurrency must be 1 to {MAX_CONCURRENCY}")
    return name, concurrency


WORKER_ID_CHARS = 200  # the column's length (ActiveLease.worker_id, WorkerInstance.id)


def worker_id_option(value: str) -> str:
    """An identity PostgreSQL can store and a connection can carry in its application
    name: refused here, not by every connection the worker would open."""
    flaw = unstorable_character(value)
    if flaw is not None or not 1 <= len(value) <= WORKER_ID_CHARS:
        why = f"contains {flaw}" if flaw else f"must be 1 to {WORKER_ID_CHARS} characters"
        raise argparse.ArgumentTypeError(f"--worker-id {why}")
    return value


def host_option(value: str) -> str:
    """A host the endpoint can bind: an address or a name that encodes (IDNA)."""
    try:
        value.encode("idna")
    except UnicodeError as exc:
        raise argparse.ArgumentTypeError(f"not a host name or address: {exc}") from exc
    return value


def port_number(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("must be a port number 0..65535 (0: any free port)")
    return port


def _metrics_port(port: int | None) -> int | None:
    """A supervised child i serves on PORT + i (each process has its own counters)."""
    if port is None or port == 0:
        return port
    return port + int(os.environ.get(WORKER_INDEX_ENV, "0"))


def positive_seconds(value: str) -> float:
    seconds = seconds_or_zero(value)
    if not seconds > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return seconds


def seconds_or_zero(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError("must be a finite number >= 0")
    return seconds


class Command(BaseCommand):
    help = "Run the awa job worker: claims and runs jobs until SIGTERM/SIGINT."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_option,
            default=[],
            metavar="NAME=N",
            help="queue to work and its concurrency (repeatable; default: AWA['QUEUES'])",
        )
        parser.add_argument("--processes", type=int, default=1, help="worker processes")
        parser.add_argument(
            "--deadline",
            type=float,
            help="per-attempt deadline for all queues "
            "in seconds (0 = none; default per queue, 300)",
        )
        parser.add_argument(
            "--worker-id",
            type=worker_id_option,
            help="identity shown in leases and the dashboard",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            help="serve /metrics (Prometheus), /healthz and /readyz on this port "
            "(needs awa-django[metrics]; with --processes N, process i uses PORT+i)",
        )
        parser.add_argument(
            "--metrics-host",
            type=host_option,
            default="0.0.0.0",
            help="address the metrics and health endpoint listens on (default 0.0.0.0, all "
            "interfaces; 127.0.0.1 keeps it on this machine)",
        )
        for name, text in TIMING_FLAGS.items():
            kind = seconds_or_zero if name in ZERO_ALLOWED else positive_seconds
            parser.add_argument(f"--{name.replace('_', '-')}", type=kind, help=text)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        try:
            settings = load_settings().with_overrides(
                **{name: options[name] for name in TIMING_FLAGS}
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        queues = self._queues(settings.queues, options)
        if settings.max_workers is not None:
            try:
                check_weighted(queues, settings.max_workers)
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from exc
        if options["processes"] > 1:
            raise SystemExit(Supervisor(options["processes"], self._child_args()).run())
        if not logging.getLogger("awa_django").handlers and not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        registry.mark_started()
        try:
            code = run_worker(
                settings,
                queues,
                options["worker_id"],
                metrics_port=_metrics_port(options["metrics_port"]),
                metrics_host=options["metrics_host"],
            )
        except (MetricsUnavailable, OSError) as exc:
            raise CommandError(f"cannot serve metrics: {exc}") from exc
        # os._exit, not SystemExit: interpreter shutdown would join the job threads, so a
        # sync handler still running after the grace period (or a slow sync hook) would
        # keep the process alive. Its attempt is rescued; hooks are best-effort.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)

    def _queues(
        self, configured: dict[str, QueueConfig], options: dict[str, Any]
    ) -> list[QueueConfig]:
        chosen = dict(options["queue"]) or {n: q.concurrency for n, q in configured.items()}
        queues = []
        for name, concurrency in chosen.items():
            base = configured.get(name) or QueueConfig(name)
            deadline = base.deadline if options["deadline"] is None else options["deadline"]
            if deadline < 0:
                raise CommandError("--deadline must be >= 0")
            # replace(): the queue keeps its other settings from AWA["QUEUES"] (rate limit,
            # weight, atomic, dead_letter).
            queues.append(dataclasses.replace(base, concurrency=concurrency, deadline=deadline))
        return queues

    @staticmethod
    def _child_args() -> list[str]:
        args, skip = [], False
        for arg in sys.argv[2:]:
            if skip:
                skip = False
            elif arg == "--processes":
                skip = True
            elif not arg.startswith("--processes="):
                args.append(arg)
        return args
