"""Fixtures for the web tests: the seeded catalog, small specs, a real Celery worker process and gunicorn.

The worker and the web server run as separate processes (tests/web/procs.py) over the configured broker (the
filesystem one under var/test-broker by default, Redis when CELERY_BROKER_URL is set) against the test
database, never in eager mode.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from webui import celery_app, services

from .procs import ROOT, WebServer, WorkerProcess, database_url

__all__ = ["ROOT", "SMALL_SPEC", "fresh_python", "require", "settings_in", "wait_for_status"]

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


# The sweep that sends the outbox and requeues lapsed leases runs every second in the tests' processes.
FAST_RECOVERY = {"PLAN_RECOVER_EVERY_S": "1"}


# What the settings read from the environment and a test's subprocess must not inherit from the caller's shell.
SETTINGS_ENV = ("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "HTTPS", "SECRET_KEY", "ALLOWED_HOSTS",
                "CSRF_TRUSTED_ORIGINS", "SECURE_SSL_REDIRECT")


def fresh_python(args: list[str], env: dict[str, str], timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run Python in the repository root with `env` over a clean environment (settings are read at import)."""
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True,
                          timeout=timeout)


def settings_in(env: dict[str, str], expression: str) -> str:
    """Evaluate an expression on webui.settings in a fresh interpreter with `env`."""
    out = fresh_python(["-c", f"import webui.settings as s; print(repr(({expression})))"], env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def require(available: bool, reason: str) -> None:
    """Skip, saying why, where a service the test needs is absent; in CI (.ci/run) that is a failure."""
    if not available:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run this test)")
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def broker_backoff_reset() -> Iterator[None]:
    """Each test starts with this process's broker taken as up: a test whose broker refused a send would
    otherwise send nothing in the tests after it for BROKER_BACKOFF_S (webui/delivery.py)."""
    from webui import delivery

    delivery._Broker.down_until = 0.0
    yield
    delivery._Broker.down_until = 0.0


@pytest.fixture(scope="session", autouse=True)
def collected_static() -> None:
    """Pages name static files by content hash (the manifest), as in production: collect them once."""
    call_command("collectstatic", "--noinput", "-v", "0")


@pytest.fixture(scope="session")
def service_env(django_db_setup, django_db_blocker) -> dict[str, str]:
    """The environment for the tests' subprocesses: the test database and the test broker."""
    with django_db_blocker.unblock():
        return {**os.environ, "DATABASE_URL": database_url(connection.settings_dict),
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "CELERY_BROKER_DIR": str(settings.BROKER_DIR),
                "STATIC_ROOT": str(settings.STATIC_ROOT), **FAST_RECOVERY}


@pytest.fixture(scope="module")
def worker(service_env) -> Iterator[WorkerProcess]:
    """One real worker for the module, on the test database and the test broker, started clean. Per module, not
    per session: its sweep would send other modules' plans (test_faults.py's, say) through the wrong broker."""
    celery_app.control.purge()  # messages left by an earlier run name plans that no longer exist
    process = WorkerProcess(service_env).wait_ready()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def web(service_env) -> Iterator[WebServer]:
    """gunicorn serving the app over the test database and broker, as `make run` does."""
    server = WebServer(service_env).wait_ready()
    yield server
    server.stop()


def wait_for_status(plan, statuses: tuple[str, ...], timeout: float = 90, every: float = 0.1) -> list[str]:
    """Poll the plan row until its status is one of `statuses`; return every status seen on the way."""
    seen = [plan.status]
    deadline = time.monotonic() + timeout
    while plan.status not in statuses and time.monotonic() < deadline:
        time.sleep(every)
        plan.refresh_from_db()
        if plan.status != seen[-1]:
            seen.append(plan.status)
    return seen
