"""The worker's cold shutdown stops its search processes first (webui/celery.py `stop_searches_first`), here in
this process with a real child process standing in for a pool process; the whole `make run` is stopped
mid-search, over both brokers, in test_faults.py."""
from __future__ import annotations

import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from webui import celery as worker_wiring
from webui import tasks


@pytest.fixture
def sigquit():
    """Restores this process's SIGQUIT handler and the shutdown flag afterwards."""
    before = signal.getsignal(signal.SIGQUIT)
    yield
    signal.signal(signal.SIGQUIT, before)
    tasks.searches_stopping.clear()


def test_a_cold_shutdown_stops_every_pool_process_before_celery_handles_it(sigquit):
    pool_process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen: list[tuple[str, object]] = []

    def celery_handler(signum, frame):  # what Celery's cold shutdown then finds
        seen.append(("celery", (tasks.searches_stopping.is_set(), pool_process.poll())))

    signal.signal(signal.SIGQUIT, celery_handler)
    consumer = SimpleNamespace(pool=SimpleNamespace(info={"processes": [pool_process.pid]}))
    worker_wiring.stop_searches_first(sender=consumer)
    worker_wiring.stop_searches_first(sender=consumer)  # ready again after a reconnect: wrapped once only
    try:
        signal.raise_signal(signal.SIGQUIT)
        assert pool_process.wait(timeout=10) == -signal.SIGTERM
        assert len(seen) == 1 and seen[0][1][0] is True  # the shutdown was noted before Celery's handler ran
        assert signal.getsignal(signal.SIGQUIT) is celery_handler  # Celery's own handler takes any next signal
    finally:
        pool_process.kill()
        pool_process.wait()


def test_a_pool_of_threads_or_a_solo_worker_is_left_as_celery_made_it(sigquit):
    calls: list[int] = []

    def celery_handler(signum, frame):
        calls.append(signum)

    signal.signal(signal.SIGQUIT, celery_handler)
    worker_wiring.stop_searches_first(sender=SimpleNamespace(pool=None))
    assert signal.getsignal(signal.SIGQUIT) is celery_handler
    worker_wiring.stop_searches_first(sender=SimpleNamespace(pool=SimpleNamespace(info={"max-concurrency": 4})))
    signal.raise_signal(signal.SIGQUIT)  # no processes to stop: straight on to Celery's handler
    assert calls == [signal.SIGQUIT] and signal.getsignal(signal.SIGQUIT) is celery_handler


FORK_SCRIPT = """
import os, sys, threading, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
django.setup()
from webui import celery as worker_wiring
worker_wiring.prepare_for_forks()
imported = "django.db.models.sql.compiler" in sys.modules
inside = threading.Event()

def sweep():  # the recovery sweep on the embedded broker's timer thread
    with worker_wiring.fork_guard:
        inside.set()
        time.sleep(0.5)

thread = threading.Thread(target=sweep)
thread.start()
inside.wait()
started = time.monotonic()
pid = os.fork()  # billiard starting a pool process meanwhile
if pid == 0:
    os._exit(0)
waited = time.monotonic() - started
os.waitpid(pid, 0)
thread.join()
print(imported, round(waited, 2))
"""


def test_a_pool_process_is_not_forked_while_the_sweep_is_inside_the_database():
    # A process forked while another thread held SQLite's or an import's locks would wait on them forever.
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    imported, waited = out.stdout.split()
    assert imported == "True"  # Django's SQL compiler (SQLite's backend loads it on the first query only)
    assert float(waited) >= 0.3  # the fork waited for the sweep to leave the database


HUNG_GIVE_BACK_SCRIPT = """
import os, time
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webui.settings")
django.setup()
import billiard
from webui import tasks

def search(ready):
    with tasks.stop_signal_once():
        try:
            ready.set()
            time.sleep(60)  # the search
        except SystemExit:
            time.sleep(60)  # a give-back that hangs on a lock the stop left held
            raise

ready = billiard.Event()
process = billiard.Process(target=search, args=(ready,))
process.start()
ready.wait(30)
time.sleep(0.2)
started = time.monotonic()
os.kill(process.pid, 15)
process.join(30)
print(process.exitcode, round(time.monotonic() - started, 1))
"""


def test_a_stopped_search_process_whose_give_back_hangs_exits_after_its_grace():
    out = subprocess.run([sys.executable, "-c", HUNG_GIVE_BACK_SCRIPT], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    code, took = out.stdout.split()
    assert int(code) == 128 + signal.SIGTERM  # its own exit, not billiard's: the give-back never finished
    assert tasks.STOP_GIVE_BACK_S - 0.5 <= float(took) <= tasks.STOP_GIVE_BACK_S + 5
