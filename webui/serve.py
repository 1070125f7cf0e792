"""`make run`: the web server (gunicorn) and one Celery worker, started and stopped together.

Ctrl-C, or SIGTERM to `make` (which passes it on to this process), stops both within STOP_WITHIN_S, even
mid-search:
- gunicorn gets SIGTERM: it finishes the requests in hand (a page or an API call, well under a second);
- the worker gets SIGQUIT, Celery's cold shutdown. SIGTERM would be a warm shutdown, which waits for the search
  in hand, and a search may take minutes. The search cut off is not lost: its pool process gives the plan back
  to the queue on its way out (webui/celery.py `stop_searches_first`), and the next start searches it again.
Each child runs in a process group of its own, so the terminal's Ctrl-C (SIGINT to the foreground group)
reaches only this process, which decides what each child gets. Whatever is still alive at the deadline is
killed with its process group.

A worker that dies (killed by the kernel's OOM killer, or by hand) is started again, and the search it had in hand
goes back to the queue once its lease lapses. One that exits by itself, as a worker that cannot start at all does
(a broker it cannot reach, a setting it refuses), is started again at most MAX_WORKER_RESTARTS times in
RESTART_WINDOW_S; after that `make run` stops with a message instead of looping. A kill (KILLED_BY) is no sign that
the worker cannot start, so it is not counted: killing the worker repeatedly must not take the site down. When the
web server dies, everything stops: there is no site to serve.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

STOP_WITHIN_S = 8.0
MAX_WORKER_RESTARTS = 5
RESTART_WINDOW_S = 60.0
KILLED_BY = (signal.SIGKILL, signal.SIGTERM)  # the OOM killer's signal, and `kill`'s
BIN = Path(sys.executable).parent  # the virtual environment's bin/: celery and gunicorn live beside python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webui.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--worker-log", type=Path, default=Path("var/worker.log"))
    args = parser.parse_args(argv)

    stop_requested: list[int] = []

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.append(signum)

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    children = start(args)
    print(f"\n  The placement planner is running at http://{args.host}:{args.port}/\n"
          f"  (worker log: {args.worker_log}; stop with Ctrl-C)\n", flush=True)
    restarts: list[float] = []
    while not stop_requested and children["web server"].poll() is None:
        worker = children["worker"]
        if worker.poll() is not None:
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S]
            killed = -worker.returncode in KILLED_BY
            if not killed and len(restarts) >= MAX_WORKER_RESTARTS:
                print(f"make run: the worker stopped {len(restarts) + 1} times within {RESTART_WINDOW_S:.0f} s; "
                      "not starting it again.", file=sys.stderr, flush=True)
                break
            if not killed:
                restarts.append(now)
            clear_group(worker)  # its pool processes, if the kill reached only the main process
            how = (f"was killed ({signal.Signals(-worker.returncode).name})" if killed
                   else f"stopped (exit status {worker.returncode})")
            print(f"make run: the worker {how}; starting another. A search it had in hand is searched again once "
                  f"its lease lapses. See {args.worker_log}.", file=sys.stderr, flush=True)
            children["worker"] = start_worker(args)
        time.sleep(0.2)
    died = [name for name, child in children.items() if child.poll() is not None]
    stop(children)
    if died and not stop_requested:
        print(f"make run: the {' and the '.join(died)} stopped; see its output above and {args.worker_log}",
              file=sys.stderr)
        return 1
    return 0


def start(args: argparse.Namespace) -> dict[str, subprocess.Popen]:
    worker = start_worker(args)
    web = subprocess.Popen(
        [str(BIN / "gunicorn"), "webui.wsgi", "--bind", f"{args.host}:{args.port}", "--workers", str(args.workers),
         # No control socket: every gunicorn shares one path under ~/.gunicorn, so a second `make run` on the same
         # account took over the first's
         "--graceful-timeout", "3", "--access-logfile", "-", "--no-control-socket"], process_group=0)
    return {"web server": web, "worker": worker}


def start_worker(args: argparse.Namespace) -> subprocess.Popen:
    args.worker_log.parent.mkdir(parents=True, exist_ok=True)
    with open(args.worker_log, "ab") as log:
        # Searches run at a lower CPU priority than page requests, so the pages stay quick while one runs.
        return subprocess.Popen(
            ["nice", "-n", "10", str(BIN / "celery"), "-A", "webui", "worker", "--concurrency", "1",
             "--loglevel", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"],
            stdout=log, stderr=subprocess.STDOUT, process_group=0)


def clear_group(child: subprocess.Popen) -> None:
    """Kill what is left of a child's process group (each child leads one: process_group=0)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(children: dict[str, subprocess.Popen]) -> None:
    """gunicorn: graceful stop; the worker: cold shutdown; both killed outright at the deadline."""
    for name, child in children.items():
        if child.poll() is None:
            if name == "worker":
                full_priority(child)
            child.send_signal(signal.SIGQUIT if name == "worker" else signal.SIGTERM)
    deadline = time.monotonic() + STOP_WITHIN_S
    for child in children.values():
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for child in children.values():
        clear_group(child)  # the child, and anything it left behind (pool processes)
        child.wait()


def full_priority(child: subprocess.Popen) -> None:
    """The worker and its pool run at nice 10 so that pages stay quick; on a busy machine that can starve the
    cold shutdown (cancel the search, give its plan back, close the broker connection) past the deadline, and a
    plan killed outright waits for its lease to lapse. Back to normal priority for the way out, where allowed
    (lowering a niceness needs root or CAP_SYS_NICE; elsewhere the worker stops at nice 10 as before)."""
    try:
        os.setpriority(os.PRIO_PGRP, child.pid, 0)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
