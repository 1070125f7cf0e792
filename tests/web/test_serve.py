"""`webui.serve.stop`, the way out of `make run`, against real child processes that answer signals the way
gunicorn and a Celery worker do (the whole `make run` is stopped mid-search in test_faults.py)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


from webui import serve

# A stand-in for a process of `make run`: it logs each SIGQUIT and SIGTERM it gets, and exits at the Nth SIGQUIT
# (1: a Celery worker's cold shutdown; never: a worker stuck on its way out) or at SIGTERM (gunicorn).
CHILD = """
import signal, sys, time
log, quits_to_exit = sys.argv[1], int(sys.argv[2])
quits = 0
def on_quit(signum, frame):
    global quits
    quits += 1
    open(log, "a").write("QUIT\\n")
    if quits == quits_to_exit:
        sys.exit(0)
def on_term(signum, frame):
    open(log, "a").write("TERM\\n")
    sys.exit(0)
signal.signal(signal.SIGQUIT, on_quit)
signal.signal(signal.SIGTERM, on_term)
open(log, "a").write("ready\\n")
while True:
    time.sleep(0.01)
"""


def child(tmp_path: Path, name: str, quits_to_exit: int) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(log), str(quits_to_exit)], process_group=0)
    deadline = time.monotonic() + 10
    while not (log.exists() and "ready" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return process, log


def test_stop_quits_the_worker_once_and_terminates_the_web_server(tmp_path):
    worker, worker_log = child(tmp_path, "worker", quits_to_exit=1)
    web, web_log = child(tmp_path, "web", quits_to_exit=99)
    started = time.monotonic()
    serve.stop({"web server": web, "worker": worker})
    assert time.monotonic() - started < 2  # not the deadline: each stopped by its own signal
    assert worker.returncode == 0 and web.returncode == 0
    assert worker_log.read_text().split()[1:] == ["QUIT"]
    assert web_log.read_text().split()[1:] == ["TERM"]


def test_stop_kills_what_no_signal_stopped_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(serve, "STOP_WITHIN_S", 2.5)
    worker, worker_log = child(tmp_path, "worker", quits_to_exit=99)  # as a worker stuck past its cold shutdown
    web, _ = child(tmp_path, "web", quits_to_exit=99)
    started = time.monotonic()
    serve.stop({"web server": web, "worker": worker})
    assert 2.5 <= time.monotonic() - started < 5
    assert worker.returncode == -signal.SIGKILL and web.returncode == 0
    assert worker_log.read_text().split()[1:] == ["QUIT"]  # one: a second would be Celery's hard shutdown
