"""A real worker's metrics endpoint is safe to expose (`awa_worker --metrics-port 0`): idle
and half-sent connections time out and cannot keep a probe out, health answers in under a
second while the endpoint is scraped hard, a client that goes away costs one log line, and
neither unknown kinds nor many kinds can blow up a scrape. The leader publishes the dead
letters per queue."""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from awa_django.storage.models import Job
from awa_django.worker.http_endpoint import READ_TIMEOUT_SECONDS
from tests.factories import DeadLetterFactory, JobFactory
from tests.waiting import wait_until

from .test_metrics_worker import endpoint, get

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

HOST = "127.0.0.1"


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def timed_get(url: str) -> tuple[int, float]:
    began = time.monotonic()
    status, _ = get(url)
    return status, time.monotonic() - began


def half_sent(port: int) -> socket.socket:
    """A connection that sent the start of a request and nothing more (slowloris)."""
    conn = socket.create_connection((HOST, port), timeout=30)
    conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: scraper\r\n")
    return conn


def closed_by_server(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False  # still open when the test's deadline came


def test_half_sent_connections_time_out_and_do_not_keep_a_probe_out(start_worker):
    worker = start_worker("--queue", "acc=2", "--metrics-port", "0")
    base = endpoint(worker)
    opened = time.monotonic()
    held = [half_sent(port_of(base)) for _ in range(300)]
    try:
        assert timed_get(f"{base}/healthz")[0] == 200  # let in beside 300 dribblers
        status, seconds = timed_get(f"{base}/metrics")
        assert status == 200 and seconds < 1.0
        for conn in held:
            conn.settimeout(max(0.1, opened + READ_TIMEOUT_SECONDS + 10 - time.monotonic()))
            assert closed_by_server(conn)
        # Every one was closed by the server within its read timeout (plus slack).
        assert time.monotonic() - opened < READ_TIMEOUT_SECONDS + 10
    finally:
        for conn in held:
            conn.close()
    assert "Traceback" not in worker.output()
    assert worker.stop() == 0


def test_health_answers_within_a_second_under_200_concurrent_scrapes(start_worker):
    worker = start_worker("--queue", "acc=4", "--metrics-port", "0")
    base = endpoint(worker)
    wait_until(lambda: get(f"{base}/readyz")[0] == 200, what="ready")
    stop_at = time.monotonic() + 30

    started = threading.Semaphore(0)

    def scrape(_: int) -> int:
        started.release()
        scraped = 0
        while time.monotonic() < stop_at and scraped < 15:
            with urllib.request.urlopen(f"{base}/metrics", timeout=60) as response:
                response.read()
            scraped += 1
        return scraped

    with ThreadPoolExecutor(max_workers=200) as scrapers:
        running = [scrapers.submit(scrape, n) for n in range(200)]
        for _ in range(200):  # every scraper is under way before the probes
            assert started.acquire(timeout=30)
        probes = []
        for _ in range(5):
            probes.append(("/healthz", *timed_get(f"{base}/healthz")))
            probes.append(("/readyz", *timed_get(f"{base}/readyz")))
        scraped = sum(future.result() for future in running)
    assert scraped >= 200  # every scraper was answered at least once
    for path, status, seconds in probes:
        assert status == 200, path
        assert seconds < 1.0, f"{path} took {seconds:.2f}s under 200 concurrent scrapes"
    assert worker.stop() == 0


def test_a_client_that_goes_away_early_costs_one_log_line(start_worker):
    worker = start_worker("--queue", "acc=2", "--metrics-port", "0")
    base = endpoint(worker)
    conn = socket.create_connection((HOST, port_of(base)))
    # /readyz opens a database connection before it answers: the reset comes first.
    conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: probe\r\n\r\n")
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()  # a reset, as from a client that timed out
    lines = wait_until(
        lambda: [line for line in worker.output().splitlines() if "went away" in line],
        what="the line about the client that went away",
    )
    assert len(lines) == 1, lines
    assert get(f"{base}/healthz")[0] == 200  # the endpoint carries on
    assert "Traceback" not in worker.output()
    assert worker.stop() == 0
    assert len([line for line in worker.output().splitlines() if "went away" in line]) == 1


def test_unknown_kinds_fold_into_other_and_the_dead_letters_are_gauged(start_worker):
    DeadLetterFactory.create_batch(3, queue="acc")
    DeadLetterFactory(queue="elsewhere")
    for n in range(305):
        JobFactory(queue="acc", kind=f"unknown_kind_{n}")
    worker = start_worker("--queue", "acc=20", "--metrics-port", "0", "--unknown-kind-grace", "0")
    base = endpoint(worker)
    wait_until(
        lambda: Job.objects.filter(queue="acc", state="failed").count() == 305,
        timeout=60,
        what="the 305 jobs of unknown kinds to fail",
    )

    def failed_other() -> float:
        status, text = get(f"{base}/metrics")
        assert status == 200
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "awa_job_failed_total" and s.labels == {
                    "kind": "other",
                    "queue": "acc",
                }:
                    return s.value
        return 0.0

    wait_until(lambda: failed_other() == 305, what="the failures counted under kind=other")
    # The leader publishes the dead letters (this worker, once its lease is taken).
    text = wait_until(
        lambda: text if "awa_dead_letter_depth{" in (text := get(f"{base}/metrics")[1]) else None,
        timeout=30,
        what="the leader's dead-letter gauge",
    )
    assert "unknown_kind_" not in text
    assert len(text.encode()) < 50_000, len(text.encode())
    assert 'awa_dead_letter_depth{queue="acc"} 3.0' in text
    assert 'awa_dead_letter_depth{queue="elsewhere"} 1.0' in text
    assert worker.stop() == 0
