"""One worker process: builds the services, runs them on one event loop, drains on
SIGTERM/SIGINT (DESIGN §4 runtime and shutdown)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from awa_django.conf import AwaSettings, QueueConfig, check_weighted
from awa_django.events import Event
from awa_django.execution import attempt
from awa_django.worker.completer import Completer
from awa_django.worker.database import TRANSIENT_ERRORS, Database
from awa_django.worker.dispatcher import Dispatcher
from awa_django.worker.executor import Executor
from awa_django.worker.fair_share import FairShare
from awa_django.worker.handled_kinds import HandledKinds
from awa_django.worker.health import DatabaseProbe, HealthServer
from awa_django.worker.heartbeat import Heartbeat
from awa_django.worker.hook_queue import HookQueue
from awa_django.worker.inflight import InFlight
from awa_django.worker.listener import Listener
from awa_django.worker.maintenance.ager import Ager
from awa_django.worker.maintenance.announcer import Announcer
from awa_django.worker.maintenance.cron import CronScheduler
from awa_django.worker.maintenance.depth import INTERVAL as DEPTH_INTERVAL
from awa_django.worker.maintenance.depth import QueueDepth
from awa_django.worker.maintenance.leader import LeaderElector
from awa_django.worker.maintenance.loop import MaintenanceLoop
from awa_django.worker.maintenance.promoter import Promoter
from awa_django.worker.maintenance.pruner import Pruner
from awa_django.worker.maintenance.reclaimer import INTERVAL as RECLAIM_INTERVAL
from awa_django.worker.maintenance.reclaimer import Reclaimer
from awa_django.worker.maintenance.rescuer import Rescuer
from awa_django.worker.maintenance.rollup import INTERVAL as ROLLUP_INTERVAL
from awa_django.worker.maintenance.rollup import Rollup
from awa_django.worker.metrics import WorkerMetrics
from awa_django.worker.overrides import OverrideReader
from awa_django.worker.registrar import REFRESH_SECONDS, Registrar
from awa_django.worker.slots import WeightedSlots
from awa_django.worker.supervisor import SUPERVISOR_ENV

logger = logging.getLogger("awa_django.worker")

EXIT_OK, EXIT_UNCLEAN = 0, 1
# How long after the dispatchers the leader election (with the first maintenance pass) and
# the worker's registration begin (decision 031): a starting worker's first claims then
# have the machine and the pool to themselves, and that pass runs on warm connections.
SERVICES_DELAY = 1.0
# How long the steps after the grace period (leadership, deregistration, closing) may take.
EXIT_BUDGET = 4.0
DEFAULT_METRICS_HOST = "0.0.0.0"  # a container's probes and scrapes come from outside


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Runtime:
    def __init__(
        self,
        settings: AwaSettings,
        queues: list[QueueConfig],
        worker_id: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = DEFAULT_METRICS_HOST,
    ) -> None:
        self.settings = settings
        self.queues = queues
        self.worker_id = worker_id or new_worker_id()
        # Metrics and health (decision 021): built first, so a missing prometheus-client
        # fails before anything starts.
        self.metrics = WorkerMetrics.for_worker(metrics_port, settings.metrics_max_kinds)
        self.metrics_address = (metrics_host, metrics_port)
        self.health: HealthServer | None = None
        self.forced = False
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Future[Any]] = []
        self._dispatching: list[asyncio.Future[Any]] = []

    # -- building -------------------------------------------------------------------------
    def _build(self) -> None:
        self.db = Database(
            self.settings.database,
            f"awa-worker {self.worker_id}",
            max_size=4 + 2 * len(self.queues),
            listen=self.settings.listen_database,
        )
        self._build_execution()
        self._build_maintenance()

    def _build_execution(self) -> None:
        """Claiming, running and finishing attempts: dispatchers, executor, completer,
        heartbeat, listener and the hook queue."""
        s = self.settings
        slots = s.max_workers or sum(q.concurrency for q in self.queues)
        self.share = self._fair_share()
        self.inflight = InFlight()
        self.threads = ThreadPoolExecutor(
            max_workers=s.sync_threads or slots, thread_name_prefix="awa-job"
        )
        self.completer = Completer(self.db, lambda: self.forced, self.metrics)
        self.hook_queue = HookQueue(s.hook_backlog, overflow=s.hook_overflow)
        if self.metrics.enabled:
            self.hook_queue.on_delivered = self.metrics.hook_ran
        self.handled = HandledKinds(s.unknown_kind_grace)
        self.executor = Executor(
            self.db,
            self.completer,
            self.inflight,
            self.threads,
            self.hook_queue,
            s.max_result_bytes,
            lambda: self.forced,
            s.unknown_kind_grace,
            self.metrics,
            refuse_kind=self.handled.refuse,
        )
        self.dispatchers = [
            Dispatcher(
                q,
                self.db,
                self.executor.execute,
                self.worker_id,
                s.poll_interval,
                may_claim=lambda: not self.hook_queue.full,
                slots=self._weighted_slots(q),
                metrics=self.metrics,
                standby_interval=s.standby_poll_interval,
                starts_at_once=self.executor.runs_on_loop,
                lease_now=attempt.lease_at_claim(q, s.heartbeat_interval),
                handled=self.handled,
            )
            for q in self.queues
        ]
        self.overrides = OverrideReader(self.db, self.dispatchers, s.override_refresh_interval)
        self.listener = Listener(self.db, self.dispatchers, self.inflight)
        self.heartbeat = Heartbeat(
            self.db,
            self.inflight,
            s.heartbeat_interval,
            deadlines={q.name: q.deadline for q in self.queues},
        )

    def _fair_share(self) -> FairShare | None:
        """With AWA["WORKER"]["max_workers"], every queue draws on one shared pool."""
        max_workers = self.settings.max_workers
        if max_workers is None:
            return None
        check_weighted(self.queues, max_workers)
        pool = max_workers - sum(q.min_workers for q in self.queues)
        return FairShare(pool, {q.name: q.weight for q in self.queues})

    def _weighted_slots(self, queue: QueueConfig) -> WeightedSlots | None:
        if self.share is None:
            return None
        return WeightedSlots(
            queue.name, queue.concurrency, queue.min_workers, self.share, self._wake_wanting
        )

    def _wake_wanting(self) -> None:
        """Pool slots came free: the queues waiting for them try again at once."""
        wanting = self.share.wanting if self.share else {}
        for dispatcher in self.dispatchers:
            if dispatcher.queue.name in wanting:
                dispatcher.wake()

    def _build_maintenance(self) -> None:
        """Leader election, the maintenance services it schedules, and the registrar."""
        s = self.settings
        self.elector = LeaderElector(self.db, self.worker_id, s.leader_ttl)
        self.rescuer = Rescuer(
            self.db, s.heartbeat_staleness, self._on_rescued, s.dead_letter_queues
        )
        self.cron = CronScheduler(self.db, missed_after=s.cron_interval + s.cron_grace)
        self.maintenance = MaintenanceLoop(
            self.elector,
            s.election_interval,
            [
                (s.promote_interval, Promoter(self.db).run_once),
                (s.rescue_interval, self.rescuer.run_once),
                # Cancelled for the children a failed parent's trigger cancelled (046).
                (s.promote_interval, Announcer(self.db, self.executor.emit).run_once),
                (
                    s.prune_interval,
                    Pruner(
                        self.db,
                        s.completed_retention,
                        s.failed_retention,
                        s.dead_letter_retention,
                    ).run_once,
                ),
                # Where autovacuum is off, the queue vacuums its own tables (decision 027).
                (RECLAIM_INTERVAL, Reclaimer(self.db).run_once),
                # Sync before the first evaluation, so a new leader fires what it declares.
                (s.cron_sync_interval, self.cron.sync),
                (s.cron_interval, self.cron.run_once),
                # Priority aging, every configured queue that asks for it (decision 018).
                *(
                    (q.priority_aging, Ager(self.db, q.name, q.priority_aging).run_once)
                    for q in s.queues.values()
                    if q.priority_aging
                ),
                *self._observability_services(),
            ],
        )
        self.registrar = Registrar(
            self.db,
            self.worker_id,
            {q.name: q.concurrency for q in self.queues},
            lambda: self.elector.is_leader,
            lambda: self.executor.completed_count,
            s.throughput_log_interval,
            lambda: self.hook_queue.dropped,
        )

    def _observability_services(self) -> list[tuple[float, Callable[[], Awaitable[Any]]]]:
        """The leader's rollups for the dashboard, and the queue gauges when metrics are on."""
        services: list[tuple[float, Callable[[], Awaitable[Any]]]] = [
            (ROLLUP_INTERVAL, Rollup(self.db, self.settings.rollup_retention).run_once)
        ]
        if self.metrics.enabled:
            depth = QueueDepth(self.db, self.metrics, [q.name for q in self.queues])
            services.append((DEPTH_INTERVAL, depth.run_once))
        return services

    def _start_health(self) -> None:
        """Serve /metrics, /healthz and /readyz when a metrics port was given."""
        host, port = self.metrics_address
        if port is None:
            return
        self.metrics.in_flight = lambda: {d.queue.name: len(d.tasks) for d in self.dispatchers}
        self.metrics.hook_backlog = lambda: self.hook_queue.undelivered
        self.metrics.is_leader = lambda: self.elector.is_leader
        probe = DatabaseProbe(self.db.kwargs)
        self.health = HealthServer(host, port, self.metrics, lambda: self.readiness(probe))
        self.health.start()

    def readiness(self, probe: DatabaseProbe) -> str | None:
        """None when this worker can take work, else why it cannot (/readyz)."""
        if self._stop is None or self._stop.is_set():
            return "draining: the worker is shutting down"
        if not self.heartbeat.alive:
            return "the heartbeat loop has stopped"
        # Before the loops start the list is empty; strict=False keeps that a plain "none".
        loops = zip(self.dispatchers, self._dispatching, strict=False)
        stopped = [d.queue.name for d, task in loops if task.done()]
        if stopped:
            return f"the dispatcher loop stopped for queue(s): {', '.join(stopped)}"
        return probe.run_once()

    def _on_rescued(self, event: Event) -> None:
        self.inflight.mark_cancelled(event.job.id, event.job.run_lease)
        self.executor.emit(event)

    # -- running --------------------------------------------------------------------------
    def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit code."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return loop.run_until_complete(self.main())
        finally:
            # Not loop.shutdown_default_executor(): hook threads must not delay the exit.
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.close()

    async def main(self) -> int:
        self._stop = asyncio.Event()
        self._build()
        self._install_signal_handlers()
        self._start_health()  # first: a port already taken fails before any work starts
        await self.db.open()
        await self._read_overrides()
        self.heartbeat.start()
        self._dispatching = [asyncio.ensure_future(d.run()) for d in self.dispatchers]
        self._spawn(
            self.listener.run(),
            self.completer.run(),
            self.hook_queue.run(),
            self._watch_supervisor(),
            self.overrides.run(),
            self._start_services_later(),
        )
        logger.info("awa worker %s started: %s", self.worker_id, self._limits_line())
        await self._stop.wait()
        return await self.drain()

    async def _read_overrides(self) -> None:
        try:
            await self.overrides.run_once()
        except TRANSIENT_ERRORS as exc:
            logger.warning("reading the queue overrides failed: %s", exc)

    def _limits_line(self) -> str:
        """The effective limits of every queue (settings and overrides), for the log."""
        queues = "; ".join(f"{d.queue.name}: {d.describe()}" for d in self.dispatchers)
        if self.settings.max_workers is None:
            return queues
        weights = ", ".join(
            f"{q.name} min {q.min_workers} weight {q.weight:g}" for q in self.queues
        )
        return f"{queues}; max_workers {self.settings.max_workers} shared by weight ({weights})"

    def _spawn(self, *coroutines: Awaitable[Any]) -> None:
        for coroutine in coroutines:
            self._tasks.append(asyncio.ensure_future(coroutine))

    async def _start_services_later(self) -> None:
        await asyncio.sleep(SERVICES_DELAY)
        if self._stop is not None and self._stop.is_set():
            return  # stopping: a draining worker neither seeks leadership nor registers
        self._spawn(self.maintenance.run(), self._registrar_loop())

    async def _registrar_loop(self) -> None:
        while True:
            try:
                await self.registrar.run_once()
            except TRANSIENT_ERRORS as exc:
                logger.warning("worker registration failed: %s", exc)
            self.registrar.log_throughput()
            await asyncio.sleep(REFRESH_SECONDS)

    async def _watch_supervisor(self) -> None:
        supervisor = os.environ.get(SUPERVISOR_ENV)
        if not supervisor:
            return
        while os.getppid() == int(supervisor):
            await asyncio.sleep(1.0)
        logger.warning("supervisor %s is gone: draining and exiting", supervisor)
        self.request_stop()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    def request_stop(self) -> None:
        """First signal: drain. Second signal: exit at once; rescue recovers the rest."""
        assert self._stop is not None
        if self._stop.is_set():
            logger.warning("second stop signal: exiting now, in-flight jobs will be rescued")
            logging.shutdown()
            os._exit(EXIT_UNCLEAN)
        logger.info("stopping: no new claims, draining %d in-flight jobs", len(self.inflight))
        self._stop.set()

    async def drain(self) -> int:
        """Stop claiming, let in-flight attempts finish within the grace period (heartbeats
        keep running), flush completions, give up leadership, close."""
        deadline = time.monotonic() + self.settings.shutdown_grace
        self.registrar.shutting_down = True
        for dispatcher in self.dispatchers:
            await dispatcher.stop()
        # A claim may be in flight: wait for each dispatcher loop to end so the attempts
        # it returns are counted below and drained, not left running.
        await asyncio.wait(self._dispatching, timeout=_left(deadline))
        self.inflight.cancel_all()  # cooperative: is_cancelled() tells handlers to wrap up
        # Each attempt's task ends only once its outcome is written (a completion awaits
        # its batch), so waiting for them also flushes the completer.
        running = {t for d in self.dispatchers for t in d.tasks}
        pending: set[asyncio.Task[None]] = set()
        if running:
            _, pending = await asyncio.wait(running, timeout=_left(deadline))
        clean = not pending
        if pending:
            logger.warning(
                "shutdown grace of %.1fs expired with %d jobs still running; they will be rescued",
                self.settings.shutdown_grace,
                len(pending),
            )
            self.forced = True
        await self._deliver_hooks(deadline)
        await self._stop_services(time.monotonic() + EXIT_BUDGET)
        return EXIT_OK if clean else EXIT_UNCLEAN

    async def _deliver_hooks(self, deadline: float) -> None:
        """Hand every committed outcome to its hooks before exiting, within the grace."""
        abandoned = await self.hook_queue.drain(_left(deadline))
        if abandoned:
            logger.warning(
                "shutdown grace of %.1fs expired with %d lifecycle events not delivered to "
                "their hooks; they are abandoned",
                self.settings.shutdown_grace,
                abandoned,
            )

    async def _stop_services(self, deadline: float) -> None:
        """Every step on the way out is bounded: with the database unreachable the process
        still exits EXIT_BUDGET seconds after the grace (leadership then expires by itself
        and the worker row is pruned by the next leader)."""
        for task in self._tasks:
            task.cancel()
        await _bounded(asyncio.gather(*self._tasks, return_exceptions=True), deadline, "services")
        await _bounded(self.elector.release(), deadline, "releasing leadership")
        await _bounded(self.registrar.deregister(), deadline, "deregistering")
        self.heartbeat.stop(timeout=_left(deadline))
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.hook_queue.close()
        if self.health is not None:
            self.health.stop()
        await _bounded(self.db.close(), deadline, "closing connections")
        logger.info("awa worker %s stopped", self.worker_id)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


async def _bounded(step: Awaitable[Any], deadline: float, what: str) -> None:
    """Await `step` until `deadline` at most (a hung database must not hold the exit).

    Not asyncio.wait_for: it waits for the cancelled step to finish, and psycopg answers
    the cancellation of a statement on a silent server by cancelling it in the server and
    waiting for that (up to 5 + 5 s). The step is cancelled and left behind instead."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=max(_left(deadline), 0.01))
    if task in done:
        task.result()  # its error, if any, as before
        return
    task.cancel()
    task.add_done_callback(_quietly)
    logger.warning("gave up %s on the way out: the database did not answer in time", what)


def _quietly(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned step's outcome, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def run_worker(
    settings: AwaSettings,
    queues: list[QueueConfig],
    worker_id: str | None = None,
    on_ready: Callable[[Runtime], None] | None = None,
    metrics_port: int | None = None,
    metrics_host: str = DEFAULT_METRICS_HOST,
) -> int:
    runtime = Runtime(settings, queues, worker_id, metrics_port, metrics_host)
    if on_ready:
        on_ready(runtime)
    return runtime.run()
