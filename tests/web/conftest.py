"""Fixtures for the web tests: the seeded catalog, small specs, and a real Celery worker process.

The worker runs as a separate process over the configured broker (the filesystem one under var/test-broker by
default, Redis when CELERY_BROKER_URL is set) against the test database, never in eager mode.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from webui import celery_app, services

ROOT = Path(__file__).resolve().parents[2]

# Llama 3 8B on 64 H100s, hardware by catalog name: small enough that the search takes a moment.
SMALL_SPEC: dict[str, Any] = {
    "model": {"name": "Llama 3 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
              "ffn_hidden": 14336, "gated_mlp": True, "vocab": 128256, "seq_len": 8192},
    "training": {"global_batch": 256, "precision": "bf16", "tokens": 1e12},
    "cluster": {"num_gpus": 64, "gpu": "H100 SXM5 80GB", "node": "DGX H100", "fabric": "NDR InfiniBand fat tree"},
}


@pytest.fixture
def small_spec() -> dict[str, Any]:
    return copy.deepcopy(SMALL_SPEC)


@pytest.fixture
def seeded(db) -> dict[str, int]:
    """The shipped catalog (fixtures/*.json) in the test database."""
    return services.catalog_seed()


def database_url(settings_dict: dict[str, Any]) -> str:
    """A DATABASE_URL for the database this test run uses (the test database, not the real one)."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = quote(settings_dict.get("USER") or "")
    password = quote(settings_dict.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if user else ""
    return f"postgres://{auth}{settings_dict.get('HOST') or 'localhost'}:{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}"


class WorkerProcess:
    """A `celery worker` subprocess whose output is collected, so a failing test can show it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "webui", "worker", "--concurrency", "1", "--loglevel", "info",
             "--without-mingle", "--without-gossip", "--without-heartbeat", "-n", f"test-{uuid.uuid4().hex[:8]}@%h"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(" ready." in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the Celery worker did not start:\n{self.output()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def worker(django_db_setup, django_db_blocker) -> Iterator[WorkerProcess]:
    """One real worker for the session, on the test database and the test broker, started clean."""
    with django_db_blocker.unblock():
        env = {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
               "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "CELERY_BROKER_DIR": str(settings.BROKER_DIR),
               "PYTHONUNBUFFERED": "1"}
    celery_app.control.purge()  # messages left by an earlier run name plans that no longer exist
    process = WorkerProcess(env)
    process.wait_ready()
    yield process
    process.stop()


def wait_for_status(plan, statuses: tuple[str, ...], timeout: float = 90) -> list[str]:
    """Poll the plan row until its status is one of `statuses`; return every status seen on the way."""
    seen = [plan.status]
    deadline = time.monotonic() + timeout
    while plan.status not in statuses and time.monotonic() < deadline:
        time.sleep(0.1)
        plan.refresh_from_db()
        if plan.status != seen[-1]:
            seen.append(plan.status)
    return seen
