"""`webui.serve.stop`, the way out of `make run`, against real child processes that answer signals the way
gunicorn and a Celery worker do (the whole `make run` is stopped mid-search in test_faults.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
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


class FakeArgs:
    host, port, workers = "127.0.0.1", 0, 1

    def __init__(self, tmp_path: Path):
        self.worker_log = tmp_path / "worker.log"


def run_main(monkeypatch, tmp_path: Path, worker_lives: list[bool | str],
             stop_after_s: float | None) -> tuple[int, list]:
    """serve.main with stand-in children: each worker started exits at once, lives, or is killed at once ("killed":
    SIGKILL, as the OOM killer's) (worker_lives, in order); SIGTERM to this process after stop_after_s, as `make`
    passes on Ctrl-C. Signal handlers are restored."""
    started: list[subprocess.Popen] = []

    def fake_worker(args):
        lives = worker_lives[len(started)] if len(started) < len(worker_lives) else worker_lives[-1]
        if lives == "killed":
            suicide = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
            process = subprocess.Popen([sys.executable, "-c", suicide], process_group=0)
        elif lives:
            process, _ = child(tmp_path, f"worker{len(started)}", quits_to_exit=1)
        else:
            process = subprocess.Popen([sys.executable, "-c", "pass"], process_group=0)
        started.append(process)
        return process

    monkeypatch.setattr(serve, "start_worker", fake_worker)
    monkeypatch.setattr(serve, "start", lambda args: {"web server": child(tmp_path, "web", 99)[0],
                                                      "worker": fake_worker(args)})
    monkeypatch.setattr(serve.argparse.ArgumentParser, "parse_args", lambda self, argv=None: FakeArgs(tmp_path))
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(stop_after_s, os.kill, (os.getpid(), signal.SIGTERM)) if stop_after_s else None
    try:
        if timer:
            timer.start()
        return serve.main([]), started
    finally:
        if timer:
            timer.cancel()
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def test_a_worker_that_dies_is_started_again_and_stopped_with_the_rest(monkeypatch, tmp_path, capsys):
    code, started = run_main(monkeypatch, tmp_path, worker_lives=[False, True], stop_after_s=2.0)
    assert code == 0 and len(started) == 2
    assert started[1].returncode == 0  # the second worker got its cold shutdown at the stop
    assert "the worker stopped (exit status 0); starting another" in capsys.readouterr().err


def test_a_worker_that_keeps_dying_stops_make_run_instead_of_looping(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(serve, "MAX_WORKER_RESTARTS", 2)
    code, started = run_main(monkeypatch, tmp_path, worker_lives=[False], stop_after_s=None)
    assert code == 1 and len(started) == 3  # the first start and two restarts
    err = capsys.readouterr().err
    assert "the worker stopped 3 times within 60 s; not starting it again" in err
    assert "make run: the worker stopped; see its output above" in err


def test_a_worker_killed_again_and_again_is_started_again_each_time(monkeypatch, tmp_path, capsys):
    # Kills say nothing about whether a worker can start: more of them than MAX_WORKER_RESTARTS in a minute leave
    # the site up and a worker running, where a worker that exits by itself that often stops `make run`.
    monkeypatch.setattr(serve, "MAX_WORKER_RESTARTS", 2)
    code, started = run_main(monkeypatch, tmp_path, worker_lives=["killed"] * 5 + [True], stop_after_s=4.0)
    assert code == 0 and len(started) == 6
    assert [p.returncode for p in started] == [-signal.SIGKILL] * 5 + [0]  # the last got its cold shutdown
    err = capsys.readouterr().err
    assert err.count("make run: the worker was killed (SIGKILL); starting another") == 5
    assert "not starting it again" not in err
